"""`gangplugin serve` (the console script, as a user runs it), its CRDs, the local queues that use
its check (deploy/local/queues.yaml), and its webhooks registered once it serves them."""

from __future__ import annotations

import contextlib
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import yaml

from gangplugin.core.leader import ElectionConfig
from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL, PLACEMENT_GATE
from gangplugin.kube.client import PODS, ApiError, Client
from gangplugin.kube.discovery import serves
from gangplugin.localcluster import manifests
from gangplugin.localcluster.components.base import Component
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import wait
from gangplugin.localcluster.spec import ClusterSpec
from gangplugin.localcluster.supervisor import Process
from gangplugin.localcluster.upstream import REPO

# Where `gangplugin serve` keeps its leader Lease (as in deploy/manifests).
GANGPLUGIN_NAMESPACE = "gangplugin-system"
# The replicas' Lease timings: twice client-go's (the chart keeps its defaults). The local cluster
# shares a small machine with whatever else runs there; loaded many times its cores, its API server
# took 5-8 s to answer a Lease PUT, past half of a 10 s renew deadline (one renewal's timeout),
# and the leader lost the Lease with nothing wrong in it (issue 35's loaded runs).
ELECTION = ElectionConfig(lease_duration=30.0, renew_deadline=20.0, retry_period=2.0).validate()
# Its own name: the e2e manifests test dry-runs the base's objects beside it.
WEBHOOK_CONFIGURATION = "gangplugin-local"
LOCAL_QUEUES = REPO / "deploy" / "local" / "queues.yaml"
# The gang pods' gate as a MutatingAdmissionPolicy (the chart's podGate policy).
POD_GATE_POLICY = REPO / "deploy" / "manifests" / "components" / "pod-gate-policy" / "pod-gate.yaml"
MUTATING_POLICIES = manifests.resource_for(
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy"}
)
# The web console's local user (a ServiceAccount bound to cluster-admin): `make up` says how to
# get a token of it.
CONSOLE_ADMIN = REPO / "deploy" / "local" / "console-admin.yaml"


@dataclass(frozen=True)
class Gangplugin(Component):
    """`spec.gangplugin_replicas` replicas (two, as the Helm chart installs it), electing a
    leader. Replica 1 is the one `up` starts first and waits to lead (`lead=False`: ready as a
    follower too, when another replica holds the Lease); the others start after it, followers
    until it is gone. `args` are more `serve` flags."""

    name = "gangplugin"
    requires = ("kueue",)
    replica: int = 1
    args: tuple[str, ...] = ()
    lead: bool = True

    def binaries(self, spec: ClusterSpec) -> tuple[Path, ...]:
        return ()  # this package's own console script, beside the running Python

    def listens(self, spec: ClusterSpec) -> dict[str, int]:
        """Every replica's ports (checked free before `up` starts anything)."""
        found = {"gangplugin extender": spec.ports.gangplugin_extender}
        for n in range(1, spec.gangplugin_replicas + 1):
            found.update(replace(self, replica=n).replica_ports(spec))
        return found

    def replica_ports(self, spec: ClusterSpec) -> dict[str, int]:
        """This replica's own ports; not the extender's: only the leader binds it, and another
        replica may lead."""
        p, n = spec.ports, self.replica
        health, grpc, webhook = p.gangplugin_replica(n)
        name = self.name if n == 1 else f"{self.name}-{n}"
        return {
            f"{name} health": health,
            f"{name} webhook": webhook,
            f"{name} grpc": grpc,
            **({f"{name} grpc mtls": p.gangplugin_grpc_mtls} if n == 1 else {}),
            **(
                {f"{name} console": p.gangplugin_console(n)}
                if "console" in spec.gangplugin_components
                else {}
            ),
        }

    def install(self, spec: ClusterSpec, client: Client) -> None:
        crds = manifests.read_crds(REPO / "deploy" / "helm" / "gangplugin" / "crds", "*.yaml", "gangplugin")
        manifests.apply_crds(client, spec, crds, "gangplugin")
        manifests.ensure_namespace(client, GANGPLUGIN_NAMESPACE)
        # A cluster that died with gangplugin's webhooks registered keeps them in etcd; with
        # gangplugin not serving yet they would refuse the local GangPolicy.
        manifests.delete_webhooks(client, WEBHOOK_CONFIGURATION)

    def processes(self, spec: ClusterSpec) -> tuple[Process, ...]:
        every = (replace(self, replica=n).process(spec) for n in range(1, spec.gangplugin_replicas + 1))
        return tuple(p for p in every if p is not None)

    def process(self, spec: ClusterSpec) -> Process | None:
        if not spec.gangplugin_components:
            return None
        p, pki, replica, lead = spec.ports, spec.pki_dir, self.replica, self.lead
        health, grpc, webhook = p.gangplugin_replica(replica)
        ca = ssl.create_default_context(cafile=str(pki / "ca.crt"))

        def ready() -> bool:
            try:
                r = httpx.get(f"https://127.0.0.1:{health}/readyz", verify=ca, timeout=2.0)
            except httpx.HTTPError:
                return False
            # Replica 1 must lead (the tests expect working controllers); others may stand by.
            return r.status_code == 200 and (replica > 1 or not lead or "standby" not in r.text)

        def tls(listener: str) -> tuple[str, str]:
            return (
                f"--{listener}-tls-cert={pki / 'webhook.crt'}",
                f"--{listener}-tls-key={pki / 'webhook.key'}",
            )

        return Process(
            self.name if replica == 1 else f"{self.name}-{replica}",
            (
                str(Path(sys.executable).parent / "gangplugin"),
                "serve",
                f"--kubeconfig={spec.kubeconfig}",
                f"--components={','.join(spec.gangplugin_components)}",
                f"--health-bind=127.0.0.1:{health}",
                *tls("health"),
                "--log-format=text",
                f"--leader-election-namespace={GANGPLUGIN_NAMESPACE}",
                f"--leader-election-lease-duration={ELECTION.lease_duration:g}s",
                f"--leader-election-renew-deadline={ELECTION.renew_deadline:g}s",
                f"--leader-election-retry-period={ELECTION.retry_period:g}s",
                # Stable per replica: a restarted replica renews its own lease at once.
                f"--leader-election-identity=local-gangplugin-{replica}",
                f"--grpc-bind=127.0.0.1:{grpc}",
                *tls("grpc"),
                *(
                    (
                        f"--grpc-mtls-bind=127.0.0.1:{p.gangplugin_grpc_mtls}",
                        f"--grpc-client-ca={pki / 'ca.crt'}",
                    )
                    if replica == 1
                    else ()
                ),
                f"--extender-bind=127.0.0.1:{p.gangplugin_extender}",
                *tls("extender"),
                f"--extender-client-ca={spec.extender_clients_dir / 'ca.crt'}",
                f"--webhook-bind=127.0.0.1:{webhook}",
                *tls("webhook"),
                *(
                    (f"--console-bind=127.0.0.1:{p.gangplugin_console(replica)}", *tls("console"))
                    if "console" in spec.gangplugin_components
                    else ()
                ),
                *spec.gangplugin_args,
                *self.args,
            ),
            health=ready,
            ports=tuple(self.replica_ports(spec).values()),
        )

    def started(self, spec: ClusterSpec, client: Client, log: Callable[[str], None]) -> None:
        """The local queues (they need Kueue's webhooks; only where the gang check runs: a
        MultiKueue manager has queues of its own), the console's local user, then
        deploy/manifests/base's webhook configurations (validating and mutating), pointed at
        replica 1 with the cluster CA: registered once gangplugin serves them, and only when its
        webhook component runs."""
        if "admission" in spec.gangplugin_components:
            manifests.apply_file(client, LOCAL_QUEUES)
        if "console" in spec.gangplugin_components and self.replica == 1:
            manifests.apply_file(client, CONSOLE_ADMIN)
        if "webhook" not in spec.gangplugin_components:
            return
        gate_pods(client, spec, policy=serves(client, MUTATING_POLICIES))


def gate_pods(client: Client, spec: ClusterSpec, *, policy: bool) -> None:
    """deploy/manifests' webhook configurations, pointed at replica 1 with the cluster CA, and the
    gang pods' gate: with `policy` the MutatingAdmissionPolicy (as the chart's podGate auto
    chooses where the API server serves it), else the mutating webhook; the other one removed."""
    docs = yaml.safe_load_all((REPO / "deploy" / "manifests" / "base" / "webhook.yaml").read_text())
    configs = [d for d in docs if d and d["kind"] in manifests.WEBHOOK_KINDS]
    if policy:
        manifests.apply_file(client, POD_GATE_POLICY)
        configs = [c for c in configs if c["kind"] != "MutatingWebhookConfiguration"]
        with contextlib.suppress(ApiError):  # 404: none registered
            client.delete(manifests.WEBHOOK_KINDS["MutatingWebhookConfiguration"], WEBHOOK_CONFIGURATION)
    for config in configs:
        config["metadata"].pop("annotations", None)  # cert-manager's CA injection: not here
        config["metadata"]["name"] = WEBHOOK_CONFIGURATION
    manifests.apply_webhooks(client, spec, configs, spec.ports.gangplugin_webhook)
    if not policy:
        for doc in reversed([d for d in yaml.safe_load_all(POD_GATE_POLICY.read_text()) if d]):
            with contextlib.suppress(ApiError):  # 404: none there
                client.delete(manifests.resource_for(doc), doc["metadata"]["name"])
    # Both take effect once the API server has seen them: until then a gang pod would go ungated.
    seen = ["no answer"]

    def gated() -> bool:
        try:
            made = client.request(
                "POST", PODS.path(GANGPLUGIN_NAMESPACE), body=GATE_PROBE, params={"dryRun": "All"}
            )
        except ApiError as err:
            seen[0] = f"refused: {err}"
            return False
        gates = [g.get("name") for g in made["spec"].get("schedulingGates") or []]
        seen[0] = f"created with the scheduling gates {gates}"
        return PLACEMENT_GATE in gates

    try:
        wait(gated, 60, "gang pods to be created behind the placement gate")
    except ClusterError as err:
        raise ClusterError(f"{err}; a gang pod created as a dry run was last {seen[0]}") from None


# A gang pod as `gate_pods` creates it (a dry run) to see the gate put on: in gangplugin's
# namespace, whose Pod Security level is `restricted` once deploy/manifests' namespace is applied.
GATE_PROBE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gate-probe", "labels": {GANG_LABEL: "gate-probe", BIND_MODE_LABEL: "Ungate"}},
    "spec": {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "probe",
                "image": "probe",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}
