"""What the job controllers' components share: where an upstream's manifests are in the cache,
and a controller-runtime webhook server's certificate directory for programs that cannot be
told one.

controller-runtime serves webhooks from `$TMPDIR/k8s-webhook-server/serving-certs` unless told
otherwise; the training-operator and Trainer take no certificate directory, so each runs with a
TMPDIR of its own under the state directory holding the cluster's serving pair there: clusters
side by side never share it.
"""

from __future__ import annotations

from pathlib import Path

from gangplugin.localcluster import credentials
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.upstream import versions


def manifests_dir(spec: ClusterSpec, name: str, version_key: str) -> Path:
    """`<cache>/<name>-<version>/`, where hack/build-upstream.sh copies an upstream's CRDs and
    webhook configurations from its module."""
    return spec.cache / f"{name}-{versions()[version_key]}"


def serving_tmpdir(spec: ClusterSpec, name: str) -> Path:
    """A TMPDIR for component `name` whose controller-runtime webhook server finds the cluster's
    serving certificate at its default path."""
    tmp = spec.state_dir / f"{name}-tmp"
    credentials.copy_serving_pair(spec, tmp / "k8s-webhook-server" / "serving-certs")
    return tmp
