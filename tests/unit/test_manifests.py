"""The in-cluster install (deploy/manifests, Dockerfile, `make image`), checked statically.

deploy/manifests/base and its Component components/scheduler are the Helm chart's rendering
(tests/unit/test_helm_chart.py ties them). They are rendered here by the real kubectl (kustomize)
the build puts in the binary cache, as an admin's overlay would: the base, the Component, and the
scheduler's image set to the cluster's version (the pinned Kubernetes here), with kubectl's
default load restrictions. tests/e2e/test_manifests.py sends the same rendering to a real API
server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gangplugin.core.names import BIND_MODE_LABEL, GANG_LABEL, LEADER_LABEL, PLACEMENT_GATE
from gangplugin.core.policy import PINNED_BIND_MODES, POD_GROUP_BIND_MODE
from gangplugin.localcluster.cluster import REPO
from gangplugin.server.main import serve
from tests.support.manifests import (
    BASE,
    POD_GATE_COMPONENT,
    SCHEDULER_COMPONENT,
    kustomize,
    overlay_of,
    render,
    versions,
)

CRDS = REPO / "deploy" / "helm" / "gangplugin" / "crds"


def find(kind: str, name: str) -> dict[str, Any]:
    """The one object of that kind and name (a generated ConfigMap's name has a hash suffix)."""
    matches = [
        o
        for o in render()
        if o["kind"] == kind
        and (
            o["metadata"]["name"] == name
            or (kind == "ConfigMap" and o["metadata"]["name"].startswith(f"{name}-"))
        )
    ]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def pod_spec(deployment: str) -> dict[str, Any]:
    spec: dict[str, Any] = find("Deployment", deployment)["spec"]["template"]["spec"]
    return spec


def serve_default(param: str) -> Any:
    return next(p.default for p in serve.params if p.name == param)


def scheduler_config() -> dict[str, Any]:
    cm = find("ConfigMap", "gangplugin-scheduler-config")
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return cfg


def test_base_has_every_part_of_the_install() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render()}
    for want in [
        ("Namespace", "gangplugin-system"),
        ("ServiceAccount", "gangplugin"),
        ("ServiceAccount", "gangplugin-scheduler"),
        ("ClusterRole", "gangplugin"),
        ("ClusterRoleBinding", "gangplugin"),
        ("Role", "gangplugin-leader-election"),
        ("Deployment", "gangplugin"),
        ("Deployment", "gangplugin-scheduler"),
        ("Service", "gangplugin-extender"),
        ("Service", "gangplugin"),
        ("PodDisruptionBudget", "gangplugin"),
        ("Issuer", "gangplugin-ca"),
        ("Certificate", "gangplugin-serving"),
        ("Issuer", "gangplugin-extender-client-ca"),
        ("Certificate", "gangplugin-scheduler-client"),
        ("NetworkPolicy", "gangplugin"),
        ("ValidatingWebhookConfiguration", "gangplugin"),
        ("MutatingWebhookConfiguration", "gangplugin"),
        ("Service", "gangplugin-webhook"),
    ]:
        assert want in kinds, f"{want} missing from the rendered base"
    # Namespaced objects name their namespace themselves (no kustomize `namespace:`).
    cluster_scoped = (
        "Namespace",
        "CustomResourceDefinition",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    )
    for obj in render():
        if obj["kind"] in cluster_scoped or obj["kind"].startswith("Cluster"):
            continue
        assert obj["metadata"].get("namespace") in ("gangplugin-system", "kube-system"), obj["metadata"]


def test_base_alone_installs_no_second_scheduler() -> None:
    objs = [o for o in yaml.safe_load_all(kustomize(BASE)) if o]
    assert ("Deployment", "gangplugin") in {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert not [o["metadata"]["name"] for o in objs if "scheduler" in o["metadata"]["name"]]
    # The Component's own image cannot be pulled: an overlay sets the cluster's version.
    component = [o for o in yaml.safe_load_all(kustomize_component_alone()) if o]
    (deploy,) = [o for o in component if o["kind"] == "Deployment"]
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.k8s.io/kube-scheduler:set-to-the-cluster-version"


def kustomize_component_alone() -> str:
    return kustomize(overlay_of("component", components=[SCHEDULER_COMPONENT]))


def test_crds_are_the_charts_and_all_of_them() -> None:
    """One source of truth: the base installs exactly the CRDs the chart and the local cluster install."""
    ours = {
        doc["metadata"]["name"]: doc["spec"]
        for path in CRDS.glob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }
    rendered = {o["metadata"]["name"]: o["spec"] for o in render() if o["kind"] == "CustomResourceDefinition"}
    assert rendered == ours


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_no_wildcards_in_any_role() -> None:
    roles = [o for o in render() if o["kind"] in ("ClusterRole", "Role")]
    assert len(roles) >= 3
    for role in roles:
        assert role["rules"], role["metadata"]["name"]
        for rule in role["rules"]:
            assert rule["verbs"] and rule["resources"], rule
            assert not any("*" in s for s in _strings(rule)), f"{role['metadata']['name']}: {rule}"
    # Bindings to the built-in scheduler roles are the only references outside the base.
    refs = {o["roleRef"]["name"] for o in render() if o["kind"] in ("ClusterRoleBinding", "RoleBinding")}
    assert refs - {r["metadata"]["name"] for r in roles} == {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "extension-apiserver-authentication-reader",
    }


def _granted() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the gangplugin ClusterRole grants."""
    rules = find("ClusterRole", "gangplugin")["rules"]
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_gangplugin_writes_nothing_it_only_reads() -> None:
    granted = _granted()
    for never in [
        ("", "secrets", "get"),
        ("", "nodes", "patch"),
        ("", "pods", "create"),
        ("kueue.x-k8s.io", "workloads", "update"),
        ("kueue.x-k8s.io", "workloads", "delete"),
        ("gangplugin.io", "gangpolicies", "patch"),
    ]:
        assert never not in granted, never


def test_gangplugin_may_create_and_resize_the_podgroups_of_podgroup_gangs() -> None:
    granted = _granted()
    # The ungater: the PodGroup, and the Workload that owns it (read for its uid).
    for verb in ("get", "create", "patch"):
        assert ("scheduling.k8s.io", "podgroups", verb) in granted
    assert ("kueue.x-k8s.io", "workloads", "get") in granted
    assert ("scheduling.k8s.io", "podgroups", "delete") not in granted  # the Workload's GC does it


def test_deployment_args_are_options_of_gangplugin_serve() -> None:
    spec = pod_spec("gangplugin")
    container = spec["containers"][0]
    assert container["args"][0] == "serve"
    options = {opt for p in serve.params for opt in p.opts}
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"][1:])
    for flag in flags:
        assert f"--{flag}" in options, f"`gangplugin serve` has no --{flag}"
    # Every listener serves TLS with the mounted serving certificate.
    for listener in ("extender", "grpc", "health"):
        assert Path(flags[f"{listener}-tls-cert"]).parent == Path(flags[f"{listener}-tls-key"]).parent
        assert flags[f"{listener}-tls-cert"] == flags["extender-tls-cert"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert flags["extender-bind"].endswith(f":{ports['extender']}")
    assert flags["grpc-bind"].endswith(f":{ports['grpc']}")
    assert flags["health-bind"].endswith(f":{ports['health']}")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert Path(flags["extender-tls-cert"]).parent == Path(mounts["tls"])
    tls = next(v for v in spec["volumes"] if v["name"] == "tls")
    serving = find("Certificate", "gangplugin-serving")
    assert tls["secret"]["secretName"] == serving["spec"]["secretName"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ports
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    # The leader election's identity and the pod it labels come from the downward API.
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    lease_role = find("Role", "gangplugin-leader-election")
    assert {"resourceNames": [serve_default("leader_election_id")]}.items() <= lease_role["rules"][1].items()


def test_two_replicas_hardened_and_covered_by_a_pdb() -> None:
    for name in ("gangplugin", "gangplugin-scheduler"):
        deploy = find("Deployment", name)
        spec = deploy["spec"]["template"]["spec"]
        assert deploy["spec"]["replicas"] == 2
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        labels = deploy["spec"]["template"]["metadata"]["labels"]
        pdb = find("PodDisruptionBudget", name)
        assert pdb["spec"]["minAvailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_services_reach_the_named_ports() -> None:
    container = pod_spec("gangplugin")["containers"][0]
    names = {p["name"] for p in container["ports"]}
    labels = find("Deployment", "gangplugin")["spec"]["template"]["metadata"]["labels"]
    grpc_svc = find("Service", "gangplugin")
    assert grpc_svc["spec"]["selector"].items() <= labels.items()
    extender = find("Service", "gangplugin-extender")
    # Only the leader runs the extender (all members of a gang must reach its bind barrier); it
    # labels its own pod with LEADER_LABEL.
    assert extender["spec"]["selector"] == {**labels, LEADER_LABEL: "true"}
    for svc in (grpc_svc, extender):
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names
    dns = find("Certificate", "gangplugin-serving")["spec"]["dnsNames"]
    for svc in (grpc_svc, extender):
        assert f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc" in dns


def test_scheduler_runs_in_cluster_yaml_against_the_extender_service() -> None:
    cfg = scheduler_config()
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["gangplugin-scheduler"]
    ext = cfg["extenders"][0]
    url = urlsplit(ext["urlPrefix"])
    service = find("Service", "gangplugin-extender")
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert url.hostname in find("Certificate", "gangplugin-serving")["spec"]["dnsNames"]
    # The CA file comes from the serving certificate's secret, mounted where caFile points.
    spec = pod_spec("gangplugin-scheduler")
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    ca_file = Path(ext["tlsConfig"]["caFile"])
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[str(ca_file.parent)])
    assert volume["secret"]["secretName"] == "gangplugin-serving-tls"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": ca_file.name}]
    config_flag = next(a for a in container["command"] if a.startswith("--config="))
    config_path = Path(config_flag.removeprefix("--config="))
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[str(config_path.parent)])
    assert volume["configMap"]["name"] == find("ConfigMap", "gangplugin-scheduler-config")["metadata"]["name"]
    # Its Lease is the one its Role lets it renew.
    lease = cfg["leaderElection"]
    role = find("Role", "gangplugin-scheduler-leader-election")
    assert role["metadata"]["namespace"] == lease["resourceNamespace"]
    assert role["rules"][0]["resourceNames"] == [lease["resourceName"]]


def _mounted_secret(deployment: str, path: str) -> dict[str, Any]:
    """The secret volume mounted (in the first container) at `path`'s folder."""
    spec = pod_spec(deployment)
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[str(Path(path).parent)])
    secret: dict[str, Any] = volume["secret"]
    return secret


def test_only_the_scheduler_can_call_the_extender() -> None:
    """Mutual TLS: the scheduler presents the client certificate of a CA that signs nothing
    else, and the extender trusts only that CA; a NetworkPolicy admits only the scheduler's
    pods to the extender port."""
    tls = scheduler_config()["extenders"][0]["tlsConfig"]
    client_cert = find("Certificate", "gangplugin-scheduler-client")["spec"]
    assert "client auth" in client_cert["usages"]
    for key in ("certFile", "keyFile"):
        secret = _mounted_secret("gangplugin-scheduler", tls[key])
        assert secret["secretName"] == client_cert["secretName"]
        item = {"tls.crt": "certFile", "tls.key": "keyFile"}
        assert {"key": next(k for k, v in item.items() if v == key), "path": Path(tls[key]).name} in secret[
            "items"
        ]
    issuer = find("Issuer", client_cert["issuerRef"]["name"])
    ca_secret = issuer["spec"]["ca"]["secretName"]
    signed_by_it = [
        o["metadata"]["name"]
        for o in render()
        if o["kind"] == "Certificate" and o["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    ]
    assert signed_by_it == ["gangplugin-scheduler-client"], "the client CA signs only the scheduler"
    assert ca_secret != find("Certificate", "gangplugin-serving")["spec"]["secretName"]
    args = pod_spec("gangplugin")["containers"][0]["args"]
    client_ca = next(a.split("=", 1)[1] for a in args if a.startswith("--extender-client-ca="))
    secret = _mounted_secret("gangplugin", client_ca)
    assert secret["secretName"] == ca_secret
    assert secret["items"] == [{"key": "ca.crt", "path": Path(client_ca).name}], "the CA's key stays out"

    policy = find("NetworkPolicy", "gangplugin")["spec"]
    labels = find("Deployment", "gangplugin")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    ports = {p["name"] for p in pod_spec("gangplugin")["containers"][0]["ports"]}
    scheduler_labels = find("Deployment", "gangplugin-scheduler")["spec"]["template"]["metadata"]["labels"]
    for rule in policy["ingress"]:
        named = {p["port"] for p in rule["ports"]}
        assert named <= ports
        if "extender" in named:
            assert named == {"extender"}
            [source] = rule["from"]
            assert set(source) == {"podSelector"}  # this namespace only
            assert source["podSelector"]["matchLabels"].items() <= scheduler_labels.items()
    assert sum("extender" in {p["port"] for p in r["ports"]} for r in policy["ingress"]) == 1
    opened = set().union(*({p["port"] for p in r["ports"]} for r in policy["ingress"]))
    assert opened == ports, "every other port stays reachable (API server, kubelet, gangctl)"


def test_images_match_the_pinned_versions() -> None:
    image = pod_spec("gangplugin-scheduler")["containers"][0]["image"]
    assert image == f"registry.k8s.io/kube-scheduler:{versions()['KUBERNETES_VERSION']}", "the overlay's tag"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert pod_spec("gangplugin")["containers"][0]["image"] == f"gangplugin:{project['version']}"


def test_dockerfile_builds_a_non_root_image_with_the_committed_grpc_code() -> None:
    text = (REPO / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    base = next(ln for ln in lines if ln.startswith("ARG PYTHON_IMAGE=")).split("=", 1)[1]
    assert base.startswith("python:3.11-") and not base.endswith(":latest")
    assert sum(ln.startswith("FROM ") for ln in lines) == 2, "multi-stage: build, then runtime"
    assert "grpcio-tools" not in text and "gangplugin.api.generate" not in text, "no generator in the image"
    user = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert user and user[-1].split(":")[0] not in ("0", "root")
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert "!gangplugin/" in ignored and not any("api/gen" in line for line in ignored), "gen/ goes in"


def test_make_image_without_an_engine_says_what_to_do(tmp_path: Path) -> None:
    # A PATH with only what the recipe needs besides docker and podman.
    for tool in ("sed", "bash"):
        found = shutil.which(tool)
        assert found, tool
        (tmp_path / tool).symlink_to(found)
    make = shutil.which("make")
    assert make
    out = subprocess.run(
        [make, "-s", "image"],
        cwd=REPO,
        env={**os.environ, "PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0
    assert "no Docker engine answers (docker info) and podman is not installed" in out.stderr, out.stderr
    assert "apt-get install podman runc" in out.stderr, out.stderr


def test_the_webhook_is_served_by_gangplugin_with_the_serving_certificate() -> None:
    (config,) = [o for o in render() if o["kind"] == "ValidatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["rules"][0]["resources"] == ["gangpolicies"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "gangplugin-system/gangplugin-serving"
    )
    service = hook["clientConfig"]["service"]
    (svc,) = [o for o in render() if o["kind"] == "Service" and o["metadata"]["name"] == service["name"]]
    (port,) = svc["spec"]["ports"]
    (deploy,) = [o for o in render() if o["kind"] == "Deployment" and o["metadata"]["name"] == "gangplugin"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--webhook-bind=0.0.0.0:{named[port['targetPort']]}" in container["args"]
    assert "--webhook-tls-cert=/etc/gangplugin/tls/tls.crt" in container["args"]
    (cert,) = [
        o for o in render() if o["kind"] == "Certificate" and o["metadata"]["name"] == "gangplugin-serving"
    ]
    assert f"{service['name']}.{service['namespace']}.svc" in cert["spec"]["dnsNames"]


def test_the_pod_webhook_gates_only_ungate_and_podgroup_gang_pods_at_creation() -> None:
    (config,) = [o for o in render() if o["kind"] == "MutatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    assert hook["objectSelector"] == {
        "matchExpressions": [
            {"key": "gangplugin.io/bind-mode", "operator": "In", "values": sorted(PINNED_BIND_MODES)}
        ]
    }
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["failurePolicy"] == "Fail" and hook["clientConfig"]["service"]["path"] == "/mutate-pods"
    (validating,) = [o for o in render() if o["kind"] == "ValidatingWebhookConfiguration"]
    service = validating["webhooks"][0]["clientConfig"]["service"]
    assert hook["clientConfig"]["service"]["name"] == service["name"]


def test_the_pod_gate_component_swaps_the_webhook_for_the_policy_on_the_same_pods() -> None:
    objs = [
        o
        for o in yaml.safe_load_all(
            kustomize(overlay_of("gate", resources=[BASE], components=[POD_GATE_COMPONENT]))
        )
        if o
    ]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("MutatingWebhookConfiguration", "gangplugin") not in kinds
    assert {
        ("MutatingAdmissionPolicy", "gangplugin-placement-gate"),
        ("MutatingAdmissionPolicyBinding", "gangplugin-placement-gate"),
    } <= kinds
    assert ("ValidatingWebhookConfiguration", "gangplugin") in kinds  # GangPolicies still validated
    (policy,) = [o for o in objs if o["kind"] == "MutatingAdmissionPolicy"]
    (webhook,) = find("MutatingWebhookConfiguration", "gangplugin")["webhooks"]
    match = policy["spec"]["matchConstraints"]
    # the same pods as the webhook: created, labelled with a pinned bind mode
    assert match["objectSelector"] == webhook["objectSelector"]
    rule = {k: v for k, v in webhook["rules"][0].items() if k != "scope"}
    assert match["resourceRules"] == [rule]
    assert policy["spec"]["failurePolicy"] == webhook["failurePolicy"] == "Fail"
    # CEL names the code's labels, gate and mode
    cel = yaml.safe_dump(policy["spec"])
    for name in (GANG_LABEL, BIND_MODE_LABEL, PLACEMENT_GATE, POD_GROUP_BIND_MODE):
        assert name in cel, name
    (binding,) = [o for o in objs if o["kind"] == "MutatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
