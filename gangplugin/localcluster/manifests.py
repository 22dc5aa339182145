"""Objects the local cluster writes into its API server: CRDs, webhook configurations pointed at
127.0.0.1 (upstream controllers are installed from their own manifests, served here by a local
process rather than a Service), namespaces, and YAML files of objects."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Collection, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from gangplugin.kube.client import NODES, ApiError, Client, Resource
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.probes import INSTALL_DEADLINE, persist, wait
from gangplugin.localcluster.spec import ClusterSpec

FIELD_MANAGER = "gangplugin-localcluster"

CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
MUTATING = Resource("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False)
VALIDATING = Resource("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False)
WEBHOOK_KINDS = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}


def read_crds(directory: Path, pattern: str, what: str) -> list[dict[str, Any]]:
    """Every CRD in the files of `directory` matching `pattern`; none is an error naming the fix."""
    crds = [
        doc for path in sorted(directory.glob(pattern)) for doc in yaml.safe_load_all(path.read_text()) if doc
    ]
    if not crds:
        raise ClusterError(f"{what} CRDs not found in {directory}; run hack/build-upstream.sh")
    return crds


def apply_crds(
    client: Client,
    spec: ClusterSpec,
    crds: Iterable[dict[str, Any]],
    what: str,
    conversion_port: int | None = None,
    converted: Collection[str] = (),
) -> None:
    """Apply `crds` and wait until each is established; with `conversion_port`, the CRDs named in
    `converted` (their plurals) convert through that controller's webhook; the others keep
    their own conversion (None: the versions' schemas are the same)."""
    names = []
    for crd in crds:
        if conversion_port is not None and crd["spec"]["names"]["plural"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": webhook_client_config(spec, "/convert", conversion_port),
                    "conversionReviewVersions": ["v1"],
                },
            }
        name = crd["metadata"]["name"]
        persist(partial(client.apply, CRDS, crd, field_manager=FIELD_MANAGER), f"applying CRD {name}")
        names.append(name)
    wait(
        lambda: all(_established(client, n) for n in names),
        INSTALL_DEADLINE,
        f"{what}'s CRDs to be established",
    )


def _established(client: Client, name: str) -> bool:
    crd = client.get(CRDS, name)
    return any(
        c["type"] == "Established" and c["status"] == "True"
        for c in (crd.get("status") or {}).get("conditions") or []  # null until the API server sets them
    )


def ensure_namespace(client: Client, name: str) -> None:
    client.apply(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        field_manager=FIELD_MANAGER,
    )


def webhook_client_config(spec: ClusterSpec, path: str, port: int) -> dict[str, Any]:
    """A webhook's clientConfig on 127.0.0.1, trusting the cluster CA."""
    ca = base64.b64encode((spec.pki_dir / "ca.crt").read_bytes()).decode()
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}


def _every_path(path: str) -> bool:
    return True


def apply_webhooks(
    client: Client,
    spec: ClusterSpec,
    configs: Iterable[dict[str, Any]],
    port: int,
    *,
    keep: Callable[[str], bool] = _every_path,
    pod_selector: dict[str, Any] | None = None,
) -> None:
    """Webhook configurations as an upstream install writes them (each webhook calling its
    Service), each webhook whose path `keep` accepts served on 127.0.0.1:`port` instead; the pod
    webhooks of a controller-runtime controller (paths ending `--v1-pod`) get `pod_selector` (the
    scope the upstream install gives them), so they see no other pods."""
    for cfg in configs:
        hooks = []
        for hook in cfg["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if not keep(path):
                continue
            hook["clientConfig"] = webhook_client_config(spec, path, port)
            if pod_selector is not None and path.endswith("--v1-pod"):
                hook.update(pod_selector)
            hooks.append(hook)
        cfg["webhooks"] = hooks
        client.apply(WEBHOOK_KINDS[cfg["kind"]], cfg, field_manager=FIELD_MANAGER)


def wait_webhooks_answer(
    client: Client, resource: Resource, probe: dict[str, Any], timeout: float, what: str
) -> None:
    """Until a dry-run create of `probe` goes through `what`'s mutating and validating webhooks
    (the controller's process being up is not enough: the API server must reach its webhooks)."""

    def ok() -> bool:
        try:
            client.request("POST", resource.path(), body=probe, params={"dryRun": "All"})
            return True
        except ApiError:
            return False

    wait(ok, timeout, f"{what}'s webhooks to answer")


def install_upstream(
    client: Client,
    spec: ClusterSpec,
    directory: Path,
    crd_files: str,
    what: str,
    webhook_port: int,
    *,
    keep: Callable[[str], bool],
    pod_selector: dict[str, Any],
    converted: Collection[str] = (),
) -> None:
    """Upstream controller `what` from its own manifests in `directory` (as hack/build-upstream.sh
    copies them from its module): its CRDs (the files matching `crd_files`; those named in
    `converted`, by plural, converted by its webhook, as its own kustomization patches them),
    established, and its webhook configurations (`webhooks.yaml`, named `<what in lower
    case>-...`) served on 127.0.0.1:`webhook_port`."""
    crds = read_crds(directory, crd_files, what)
    apply_crds(
        client, spec, crds, what, conversion_port=webhook_port if converted else None, converted=converted
    )
    configs = [cfg for cfg in yaml.safe_load_all((directory / "webhooks.yaml").read_text()) if cfg]
    for cfg in configs:
        cfg["metadata"]["name"] = f"{what.lower()}-{cfg['metadata']['name']}"
    apply_webhooks(client, spec, configs, webhook_port, keep=keep, pod_selector=pod_selector)


def delete_webhooks(client: Client, name: str) -> None:
    """The validating and mutating webhook configurations named `name`, if there are any."""
    for res in WEBHOOK_KINDS.values():
        with contextlib.suppress(ApiError):  # 404: none registered
            client.delete(res, name)


_KINDS: dict[tuple[str, str], Resource] = {
    ("v1", "Namespace"): NAMESPACES,
    ("v1", "Node"): NODES,
    ("v1", "Pod"): Resource("v1", "pods"),
    ("v1", "Service"): Resource("v1", "services"),
    ("batch/v1", "Job"): Resource("batch/v1", "jobs"),
    ("apps/v1", "Deployment"): Resource("apps/v1", "deployments"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): Resource(
        "rbac.authorization.k8s.io/v1", "clusterroles", namespaced=False
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): Resource(
        "rbac.authorization.k8s.io/v1", "clusterrolebindings", namespaced=False
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): CRDS,
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): Resource(
        "admissionregistration.k8s.io/v1", "mutatingadmissionpolicies", namespaced=False
    ),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): Resource(
        "admissionregistration.k8s.io/v1", "mutatingadmissionpolicybindings", namespaced=False
    ),
    ("gangplugin.io/v1alpha1", "GangPolicy"): Resource(
        "gangplugin.io/v1alpha1", "gangpolicies", namespaced=False
    ),
}


def resource_for(obj: dict[str, Any]) -> Resource:
    """The API path of an object: core kinds by table, Kueue's by their plural."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    if (api_version, kind) in _KINDS:
        return _KINDS[(api_version, kind)]
    if api_version.startswith("kueue.x-k8s.io/"):
        plural = kind.lower() + ("es" if kind.endswith("s") else "s")  # WorkloadPriorityClass
        return Resource(api_version, plural, namespaced=kind in ("LocalQueue", "Workload"))
    if api_version == "v1":  # namespaced core kinds
        return Resource("v1", kind.lower() + "s")
    raise ClusterError(f"{kind} ({api_version}) is not a kind the local cluster applies")


def apply_file(client: Client, path: Path) -> list[dict[str, Any]]:
    """Server-side apply every document of a YAML file (kinds this cluster knows)."""
    return [
        persist(
            partial(client.apply, resource_for(doc), doc, field_manager=FIELD_MANAGER),
            f"applying {doc['kind']} {doc['metadata']['name']} from {path.name}",
        )
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
