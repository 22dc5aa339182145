"""The Helm chart (deploy/helm/gangplugin), checked with the real helm the build caches:
`helm lint`, golden `helm template` renderings for a few values sets (tests/unit/helm/values/ ->
tests/unit/helm/golden/), what values must refuse, the certificates it generates, the scheduler's
version, that every metric its alerts and dashboard read exists, and that the kustomize base is
the chart's rendering.

The goldens change with the chart on purpose: after changing it, run
`GANGPLUGIN_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_helm_chart.py` and review the diff.
Generated keys and certificates differ per rendering and read `<generated>` in the goldens.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from prometheus_client import REGISTRY

import gangplugin.runtime.metrics  # noqa: F401  # registers every metric
from gangplugin.localcluster.cluster import REPO
from tests.support.manifests import CHART, KUBE_VERSION, helm, run_helm, template

HERE = Path(__file__).parent / "helm"
VALUES = sorted((HERE / "values").glob("*.yaml"))
GENERATED = re.compile(r"^(\s+(?:tls\.crt|tls\.key|ca\.crt|caBundle): ).+$", re.M)


def objects(*flags: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(template(*flags)) if o]


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


@pytest.mark.parametrize("values", VALUES, ids=[v.stem for v in VALUES])
def test_lint(values: Path) -> None:
    out = run_helm("lint", "--strict", str(CHART), "-f", str(values), "--kube-version", KUBE_VERSION)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("values", VALUES, ids=[v.stem for v in VALUES])
def test_rendering_matches_its_golden(values: Path) -> None:
    rendered = GENERATED.sub(r"\1<generated>", template("-f", str(values)))
    golden = HERE / "golden" / values.name
    if os.environ.get("GANGPLUGIN_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"{golden} is missing: GANGPLUGIN_UPDATE_GOLDEN=1 writes it"
    assert rendered == golden.read_text(), (
        f"`helm template -f {values.relative_to(REPO)}` differs from {golden.relative_to(REPO)}: "
        "review, then GANGPLUGIN_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_helm_chart.py"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--set", "gangPolicy.create=true", "--set", "gangPolicy.bindMode=Extender"),
            "gangPolicy.bindMode: Extender needs the second scheduler: set scheduler.enabled=true",
        ),
        (
            ("--set", "gangPolicy.bindMode=Strict"),
            'gangPolicy.bindMode: "Strict" is not Ungate, Extender or PodGroup',
        ),
        (("--set", "certificates.mode=self"), 'certificates.mode: "self" is not certManager or generate'),
        (("--set", "podGate=cel"), 'podGate: "cel" is not auto, policy or webhook'),
    ],
)
def test_values_it_cannot_use_fail_naming_the_field(flags: tuple[str, ...], message: str) -> None:
    out = run_helm("template", "gangplugin", str(CHART), "--kube-version", KUBE_VERSION, *flags)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("kube_version", "tag"),
    [("v1.30.14-eks-931bdca", "v1.30.14"), ("1.31.4", "v1.31.4"), ("v1.37.2", "v1.37.2")],
)
def test_second_scheduler_runs_the_clusters_own_version(kube_version: str, tag: str) -> None:
    scheduler = ("--set", "scheduler.enabled=true", "--show-only", "templates/scheduler.yaml")
    out = run_helm("template", "gangplugin", str(CHART), *scheduler, "--kube-version", kube_version)
    assert out.returncode == 0, out.stderr
    deploy = find([o for o in yaml.safe_load_all(out.stdout) if o], "Deployment", "gangplugin-scheduler")
    assert (
        deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        == f"registry.k8s.io/kube-scheduler:{tag}"
    )
    pinned = objects("--set", "scheduler.enabled=true", "--set", "scheduler.image.tag=v1.32.9")
    image = find(pinned, "Deployment", "gangplugin-scheduler")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert image == "registry.k8s.io/kube-scheduler:v1.32.9"


def test_no_second_scheduler_unless_asked() -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in objects()}
    assert not any("scheduler" in name for _, name in names), names
    assert ("Deployment", "gangplugin") in names


def _cert(pem_b64: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(pem_b64))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    key = ca.public_key()
    try:
        if isinstance(key, rsa.RSAPublicKey):
            assert cert.signature_hash_algorithm is not None
            key.verify(
                cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm
            )
        else:
            assert isinstance(key, ec.EllipticCurvePublicKey) and cert.signature_hash_algorithm is not None
            key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    except Exception:
        return False
    return cert.issuer == ca.subject


def test_generated_certificates_chain_as_cert_managers_would() -> None:
    objs = objects("--set", "certificates.mode=generate", "--set", "scheduler.enabled=true")
    secret = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "Secret"}
    ca, client_ca = (
        _cert(secret["gangplugin-ca"]["tls.crt"]),
        _cert(secret["gangplugin-extender-client-ca"]["tls.crt"]),
    )
    serving = _cert(secret["gangplugin-serving-tls"]["tls.crt"])
    assert _signed_by(serving, ca) and not _signed_by(serving, client_ca)
    assert _cert(secret["gangplugin-serving-tls"]["ca.crt"]) == ca
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(sans.get_values_for_type(x509.DNSName))
    assert {
        "gangplugin-extender.gangplugin-system.svc",
        "gangplugin-webhook.gangplugin-system.svc",
        "localhost",
    } <= names
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # The scheduler's client certificate: the only one the extender's CA signs.
    assert _signed_by(_cert(secret["gangplugin-scheduler-client-tls"]["tls.crt"]), client_ca)
    assert not _signed_by(_cert(secret["gangplugin-scheduler-client-tls"]["tls.crt"]), ca)
    # The webhooks trust the serving certificate's CA; nothing asks cert-manager for anything.
    hooks = [h for o in objs if o["kind"].endswith("WebhookConfiguration") for h in o["webhooks"]]
    assert hooks and {_cert(h["clientConfig"]["caBundle"]) for h in hooks} == {ca}
    assert not any(o["apiVersion"].startswith("cert-manager.io/") for o in objs)
    assert not any("cert-manager.io/inject-ca-from" in (o["metadata"].get("annotations") or {}) for o in objs)


def test_default_gangpolicy_carries_the_bind_mode_and_runs_after_the_pods() -> None:
    objs = objects("--set", "gangPolicy.create=true", "--set", "admissionCheck.create=true")
    policy = find(objs, "GangPolicy", "default")
    assert policy["spec"] == {"bindMode": "Ungate"}
    assert policy["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    check = find(objs, "AdmissionCheck", "gang")
    assert check["spec"] == {
        "controllerName": "gangplugin.io/gang",
        "parameters": {"apiGroup": "gangplugin.io", "kind": "GangPolicy", "name": "default"},
    }


def _metric_names() -> set[str]:
    """Every sample name gangplugin exports (histograms' _bucket/_sum/_count, counters' _total)."""
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("gangplugin_"):
            suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",)}.get(
                family.type, ("",)
            )
            names |= {family.name + s for s in suffixes}
    return names


def test_alerts_and_dashboard_read_only_metrics_that_exist() -> None:
    objs = objects("-f", str(HERE / "values" / "production.yaml"))
    rules = find(objs, "PrometheusRule", "gangplugin")["spec"]["groups"][0]["rules"]
    dashboard = json.loads(find(objs, "ConfigMap", "gangplugin-dashboard")["data"]["gangplugin.json"])
    exprs = [r["expr"] for r in rules] + [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bgangplugin_[a-z0-9_]+", e)}
    assert used and used <= _metric_names(), used - _metric_names()
    alerts = {r["alert"] for r in rules}
    for alert in (
        "LeaderMissing",
        "GangsWaitingTooLong",
        "DecisionSlow",
        "RequeuesHigh",
        "NodeReplacementImpossible",
        "APIRequestsFailing",
    ):
        assert f"Gangplugin{alert}" in alerts
    titles = {p["title"] for p in dashboard["panels"]}
    for panel in (
        "Waiting gangs by reason",
        "Admission decision latency",
        "Requeues and deactivations per hour",
        "Node replacements per hour",
        "Plan quota (nominalQuota from TrainingPlans)",
        "API server requests per second",
    ):
        assert panel in titles
    monitor = find(objs, "ServiceMonitor", "gangplugin")
    service = find(objs, "Service", "gangplugin")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    selected = [
        o
        for o in objs
        if o["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= (o["metadata"].get("labels") or {}).items()
    ]
    assert selected == [service], "the ServiceMonitor scrapes each replica once"


def test_kustomize_base_is_the_charts_rendering(tmp_path: Path) -> None:
    script = str(REPO / "hack" / "render-manifests.py")
    out = subprocess.run(
        [sys.executable, script, "--helm", str(helm()), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    committed = REPO / "deploy" / "manifests"
    fresh = {p.relative_to(tmp_path).as_posix(): p.read_text() for p in tmp_path.rglob("*.yaml")}
    ours = {
        p.relative_to(committed).as_posix(): p.read_text()
        for p in committed.rglob("*.yaml")
        if p.relative_to(committed).as_posix() != "base/namespace.yaml"
    }
    assert sorted(fresh) == sorted(ours), "run `make manifests` and commit deploy/manifests/"
    stale = [name for name in fresh if fresh[name] != ours[name]]
    assert stale == [], f"{stale} differ from the chart's rendering: run `make manifests` and commit them"


def test_a_single_replica_gets_no_pdb_that_would_block_every_drain() -> None:
    def pdbs(*flags: str) -> set[str]:
        return {o["metadata"]["name"] for o in objects(*flags) if o["kind"] == "PodDisruptionBudget"}

    scheduler = ("--set", "scheduler.enabled=true")
    assert pdbs(*scheduler) == {"gangplugin", "gangplugin-scheduler"}
    assert pdbs(*scheduler, "--set", "replicas=1") == {"gangplugin-scheduler"}
    assert pdbs(*scheduler, "--set", "scheduler.replicas=1") == {"gangplugin"}


def test_the_console_runs_serves_components_and_console_behind_its_service() -> None:
    from gangplugin.server.main import DEFAULT_COMPONENTS

    objs = objects("--set", "console.enabled=true")
    (container,) = find(objs, "Deployment", "gangplugin")["spec"]["template"]["spec"]["containers"]
    assert f"--components={','.join((*DEFAULT_COMPONENTS, 'console'))}" in container["args"]
    assert {"name": "console", "containerPort": 8444, "protocol": "TCP"} in container["ports"]
    service = find(objs, "Service", "gangplugin-console")
    assert service["spec"]["ports"][0]["targetPort"] == "console"
    find(objs, "ClusterRole", "gangplugin-console-viewer")
    manager = objects("--set", "console.enabled=true", "--set", "multikueue.manager=true")
    (container,) = find(manager, "Deployment", "gangplugin")["spec"]["template"]["spec"]["containers"]
    assert "--components=multikueue,api,webhook,console" in container["args"]
    off = objects()
    assert not [o for o in off if "console" in o["metadata"]["name"]]
    (container,) = find(off, "Deployment", "gangplugin")["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith(("--components", "--console"))]


MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


@pytest.mark.parametrize(
    ("flags", "policy"),
    [
        ((), False),  # auto, and the cluster serves no policies (helm template's own view)
        (("--api-versions", MAP_API), True),  # auto on Kubernetes >= 1.36
        (("--set", "podGate=policy"), True),
        (("--set", "podGate=webhook", "--api-versions", MAP_API), False),
    ],
)
def test_the_pod_gate_is_the_policy_where_served_else_the_webhook(
    flags: tuple[str, ...], policy: bool
) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects(*flags)}
    assert (("MutatingAdmissionPolicy", "gangplugin-placement-gate") in kinds) is policy
    assert (("MutatingAdmissionPolicyBinding", "gangplugin-placement-gate") in kinds) is policy
    assert (("MutatingWebhookConfiguration", "gangplugin") in kinds) is not policy
    assert ("ValidatingWebhookConfiguration", "gangplugin") in kinds
