"""The Kubeflow training-operator (PyTorchJob, `kubeflow.org/v1`), from its own CRD and webhook
manifests (`<cache>/training-operator-<version>/`), running the PyTorchJob controller only.

v1.9 always runs its certificate rotator (open-policy-agent/cert-controller): it fills the
Secret `training-operator-webhook-cert` in namespace `kubeflow` (which must exist) with a CA of
its own, writes that CA into the webhook configuration named `validator.training-operator
.kubeflow.org` if there is one, and reports ready once a `tls.crt` exists in the fixed
directory a kubelet would mount the Secret at. Here its webhook configuration has the local
name (`training-operator-...`, pointed at 127.0.0.1 with the cluster CA, which the rotator then
leaves alone), its webhook server reads the cluster's serving pair (its own TMPDIR), and the
fixed directory gets that pair too when it has none.
"""

from __future__ import annotations

import contextlib
import fcntl
from dataclasses import dataclass
from pathlib import Path

from gangplugin.kube.client import ApiError, Client, Resource
from gangplugin.localcluster import credentials, manifests
from gangplugin.localcluster.components.operators import UpstreamController, serving_tmpdir
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import http_ok
from gangplugin.localcluster.realnodes.images import PYTORCH_INIT, PYTORCH_INIT_TEMPLATE
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

NAMESPACE = "kubeflow"  # the rotator's (MY_POD_NAMESPACE unset)
SECRET = "training-operator-webhook-cert"
SECRETS = Resource("v1", "secrets")
# cert-controller's CertDir in training-operator v1.9 (pkg/cert): only checked to hold tls.crt.
MOUNTED_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def _mounted_certificate(spec: ClusterSpec) -> None:
    """A tls.crt where the rotator looks for one (shared by every cluster on the machine, and
    only checked to exist): one already there is left alone."""
    try:
        MOUNTED_CERT_DIR.mkdir(parents=True, exist_ok=True)
        with (MOUNTED_CERT_DIR / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (MOUNTED_CERT_DIR / "tls.crt").exists():
                credentials.copy_serving_pair(spec, MOUNTED_CERT_DIR)
    except OSError as err:
        raise ClusterError(
            f"cannot write {MOUNTED_CERT_DIR} ({err.strerror}); the training-operator's certificate "
            "rotator waits for a tls.crt there: make it writable for this user"
        ) from err


@dataclass(frozen=True)
class TrainingOperator(UpstreamController):
    name = "training-operator"
    kueue_frameworks = ("kubeflow.org/pytorchjob",)
    version_key = "TRAINING_OPERATOR_VERSION"
    crd_files = "kubeflow.org_pytorchjobs.yaml"
    what = "training-operator"
    webhook_offset, health_offset = 946, 885

    def keep(self, path: str) -> bool:
        return path.endswith("-pytorchjob")

    def install(self, spec: ClusterSpec, client: Client) -> None:
        super().install(spec, client)
        manifests.ensure_namespace(client, NAMESPACE)
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}
        with contextlib.suppress(ApiError):  # 409: there already, maybe filled by the rotator
            client.create(SECRETS, secret, NAMESPACE)

    def process(self, spec: ClusterSpec) -> Process:
        _mounted_certificate(spec)
        ports = self.listens(spec)
        health = ports["training-operator health"]
        return Process(
            self.name,
            (
                str(spec.bin_dir / self.name),
                f"--kubeconfig={spec.kubeconfig}",
                "--enable-scheme=pytorchjob",
                "--leader-elect=false",
                f"--webhook-server-port={ports['training-operator webhook']}",
                "--metrics-bind-address=0",  # off: nothing here reads it
                f"--health-probe-bind-address=127.0.0.1:{health}",
                # Its PyTorchJob workers' init container on real nodes: an image they hold (no
                # registry) and a template its busybox runs (kwok's nodes fake containers).
                *(
                    (
                        f"--pytorch-init-container-image={PYTORCH_INIT}",
                        f"--pytorch-init-container-template-file={PYTORCH_INIT_TEMPLATE}",
                    )
                    if "real-nodes" in spec.components
                    else ()
                ),
            ),
            env={"KUBECONFIG": str(spec.kubeconfig), "TMPDIR": str(serving_tmpdir(spec, self.name))},
            # Ready once its rotator is done and its webhook server listens.
            health=lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
            ports=tuple(ports.values()),
        )
