"""The Kueue controller manager at a chosen version: `<cache>/bin/kueue-<version>` with the CRDs
and webhook configurations of the same version (`<cache>/kueue-<version>/`), configured by its
local settings plus the patch gangplugin ships (kueue_config)."""

from __future__ import annotations

import contextlib
import fcntl
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.client import Client, Resource
from gangplugin.localcluster import credentials, kueue_config, manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import INSTALL_DEADLINE, http_ok
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process

KUEUE_NAMESPACE = "kueue-system"
# The CRDs whose versions Kueue's conversion webhook converts: those its kustomization patches
# with `webhook_in_<plural>.yaml` (config/components/crd, v0.17.0 and v0.19.2 alike). The others'
# v1beta1 and v1beta2 are the same schema and convert without it; v0.19's webhook refuses
# them ("*v1beta2.ResourceFlavor is not convertible to *v1beta1.ResourceFlavor").
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
# With its own certificate management off, Kueue reads its metrics certificate from this fixed
# path (cmd/kueue/main.go): one directory for every local cluster on the machine.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Plain pod groups (kueue.x-k8s.io/pod-group-name): the e2e tests gang them too.
PLAIN_PODS = "pod"
OUTSIDE_SYSTEM = {
    "matchExpressions": [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", KUEUE_NAMESPACE],
        }
    ]
}


def manifests_dir(spec: ClusterSpec) -> Path:
    return spec.cache / f"kueue-{spec.kueue_version}"


def frameworks(spec: ClusterSpec) -> list[str]:
    """Kueue's integrations here: those of the controllers that run, and plain pods."""
    return list(dict.fromkeys((*spec.kueue_frameworks, PLAIN_PODS)))


def serves(path: str, enabled: list[str]) -> bool:
    """Whether a webhook of Kueue's manifests (`/mutate-<group>-<version>-<kind>`, dots of the
    group as dashes) is one this Kueue serves: its own objects' and its enabled frameworks'.
    Framework names are `<group>/<kind>`, or a kind alone for the core and apps kinds (pod,
    deployment, statefulset)."""
    own = r"kueue-x-k8s-io-[^-]+-[a-z]+"
    hooks = [
        rf"{re.escape(group.replace('.', '-'))}-[^-]+-{re.escape(kind)}"
        if group
        else rf"[a-z0-9-]*-[^-]+-{re.escape(kind)}"
        for group, _, kind in (f.rpartition("/") for f in enabled)
    ]
    return re.fullmatch(rf"/(mutate|validate)-({'|'.join([own, *hooks])})", path) is not None


def configuration(spec: ClusterSpec) -> dict[str, Any]:
    """Kueue's Configuration here: its local settings (its ports, certificates, no leader
    election, the frameworks of the controllers that run) plus the shipped patch, plus the
    cluster's own settings (`ClusterSpec.kueue_config`: a MultiKueue manager's dispatcher)."""
    p = spec.ports
    local = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p.kueue_health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{p.kueue_metrics}"},
        "webhook": {"port": p.kueue_webhook, "host": "127.0.0.1", "certDir": str(spec.serving_cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": OUTSIDE_SYSTEM,
        "integrations": {"frameworks": frameworks(spec)},
        # Kueue's own manifests' (a burst of gangs is several writes each)
        "clientConnection": {"qps": 300, "burst": 500},
    }
    return kueue_config.merge(kueue_config.merge(local, kueue_config.shipped_patch()), spec.kueue_config)


def _metrics_certificate(spec: ClusterSpec) -> None:
    """A valid pair at METRICS_CERT_DIR. Clusters side by side share it, and nothing here checks
    Kueue's metrics certificate against a CA: a valid pair is left as it is, and replaced under
    a lock, so a Kueue starting meanwhile never reads one cluster's certificate with another's key."""
    try:
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        with (METRICS_CERT_DIR / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with contextlib.suppress(OSError):  # ssl.SSLError: a mismatched or broken pair
                ssl.create_default_context().load_cert_chain(
                    METRICS_CERT_DIR / "tls.crt", METRICS_CERT_DIR / "tls.key"
                )
                return
            credentials.copy_serving_pair(spec, METRICS_CERT_DIR)
    except OSError as err:
        raise ClusterError(
            f"cannot write Kueue's certificates to {METRICS_CERT_DIR} ({err.strerror}); Kueue reads its "
            "metrics certificate from that fixed path: make it writable for this user or run as root"
        ) from err


@dataclass(frozen=True)
class Kueue(Component):
    name = "kueue"

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return (spec.bin_dir / f"kueue-{spec.kueue_version}",)

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        p = spec.ports
        return {
            "kueue webhook": p.kueue_webhook,
            "kueue metrics": p.kueue_metrics,
            "kueue health": p.kueue_health,
        }

    def install(self, spec: ClusterSpec, client: Client) -> None:
        manifests.ensure_namespace(client, KUEUE_NAMESPACE)
        enabled = frameworks(spec)
        manifests.install_upstream(
            client,
            spec,
            manifests_dir(spec),
            "kueue.x-k8s.io_*.yaml",
            "Kueue",
            spec.ports.kueue_webhook,
            keep=lambda path: serves(path, enabled),
            pod_selector={"namespaceSelector": OUTSIDE_SYSTEM},
            converted=CONVERTED,
        )
        # Kueue >= v0.19's MutatingAdmissionPolicy: it empties a Workload's nominatedClusterNames
        # when Kueue records the worker that admitted it or evicts it, which a MultiKueue
        # dispatcher other than Kueue's own (it owns that field) relies on.
        policies = manifests_dir(spec) / "admission-policies.yaml"
        if policies.exists():
            manifests.apply_file(client, policies)

    def process(self, spec: ClusterSpec) -> Process:
        _metrics_certificate(spec)
        config = spec.state_dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(configuration(spec), sort_keys=False))
        health = spec.ports.kueue_health
        return Process(
            self.name,
            (
                str(self.binaries(spec)[0]),
                f"--config={config}",
                # The visibility API needs an APIService routed into the cluster; not here.
                "--feature-gates=" + ",".join(("VisibilityOnDemand=false", *spec.kueue_feature_gates)),
            ),
            env={"KUBECONFIG": str(spec.kubeconfig)},
            health=lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
            ports=tuple(self.listens(spec).values()),
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """Until a dry-run create goes through its mutating and validating webhooks."""
        probe = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gangplugin-webhook-probe"},
        }
        flavors = Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", namespaced=False)
        manifests.wait_webhooks_answer(client, flavors, probe, INSTALL_DEADLINE, "Kueue")
