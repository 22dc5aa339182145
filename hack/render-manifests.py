#!/usr/bin/env python3
"""Render the kustomize base (deploy/manifests/base) and the second scheduler's Component
(deploy/manifests/components/scheduler) from the Helm chart, its one source: `make manifests`.

    hack/render-manifests.py [--helm PATH] [--out DIR]

The base is `helm template` of the chart with its default values (cert-manager certificates, no
second scheduler) in namespace gangplugin-system, CRDs included, one file per template; the
Component holds what `scheduler.enabled=true` adds, and nothing else may differ. Helm's own labels
go (kustomize, not Helm, manages these objects). tests/unit/test_manifests.py renders into a
temporary folder and fails unless the committed files are the same.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "gangplugin"
NAMESPACE = "gangplugin-system"
# kubelet fails to pull this tag, naming it: an overlay sets the cluster's version (install.md).
SCHEDULER_TAG = "set-to-the-cluster-version"
# The oldest Kubernetes the chart supports (its kubeVersion); nothing rendered here depends on it.
OLDEST = ("--kube-version", "1.30.0")
# The base gates gang pods with the webhook (any version); a Component swaps in the policy.
WEBHOOK_GATE = ("--set", "podGate=webhook")
POLICY_FILE, WEBHOOK_FILE = "pod-gate.yaml", "webhook.yaml"
HEADER = (
    "# Generated from deploy/helm/gangplugin by `make manifests` (hack/render-manifests.py); do not edit.\n"
)
HELM_ONLY = re.compile(r"^\s+(helm\.sh/chart|app\.kubernetes\.io/managed-by): .*\n", re.M)
SOURCE = re.compile(r"^# Source: gangplugin/(templates|crds)/(.+)$", re.M)


def render(helm: str, *flags: str) -> dict[str, list[str]]:
    """The chart's documents, by the file they came from (`crds/x.yaml` or `x.yaml`)."""
    out = subprocess.run(
        [helm, "template", "gangplugin", str(CHART), "-n", NAMESPACE, "--include-crds", *OLDEST, *flags],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        sys.exit(f"render-manifests: helm template failed: {out.stderr.strip()}")
    files: dict[str, list[str]] = {}
    for doc in out.stdout.split("\n---\n"):
        m = SOURCE.search(doc)
        if m is None:
            continue
        body = HELM_ONLY.sub("", doc[m.end() + 1 :]).strip("\n")
        if body and not all(ln.startswith("#") for ln in body.splitlines()):
            name = f"crds/{m[2]}" if m[1] == "crds" else m[2]
            files.setdefault(name, []).append(body + "\n")
    return files


def write(directory: Path, files: dict[str, str], keep: tuple[str, ...] = ()) -> None:
    """The folder holds `files` (and `keep`) and nothing else: a template removed goes too."""
    for old in sorted(directory.rglob("*.yaml")) if directory.exists() else []:
        if old.relative_to(directory).as_posix() not in keep:
            old.unlink()
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def join(docs: list[str]) -> str:
    return HEADER + "---\n".join(docs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = Path(os.environ.get("GANGPLUGIN_CACHE", Path.home() / ".cache" / "gangplugin"))
    parser.add_argument("--helm", default=str(cache / "bin" / "helm"), help="default: the build's cache")
    parser.add_argument("--out", type=Path, default=REPO / "deploy" / "manifests")
    args = parser.parse_args()
    base = render(args.helm, *WEBHOOK_GATE)
    with_scheduler = render(
        args.helm,
        *WEBHOOK_GATE,
        "--set",
        "scheduler.enabled=true",
        "--set",
        f"scheduler.image.tag={SCHEDULER_TAG}",
    )
    added: list[str] = []
    for name, docs in with_scheduler.items():
        old = base.get(name, [])  # helm orders by kind: the new ones may come between
        if sorted(old) != sorted(d for d in docs if d in old):
            sys.exit(f"render-manifests: scheduler.enabled changes {name}, not only adds to it")
        added += [d for d in docs if d not in old]
    names = sorted(base)
    resources = [
        "namespace.yaml",
        *(n for n in names if n.startswith("crds/")),
        *(n for n in names if not n.startswith("crds/")),
    ]
    kustomization = HEADER + (
        "# gangplugin next to an existing Kueue: `kubectl apply --server-side -k deploy/manifests/base`.\n"
        "# Needs cert-manager. The second scheduler (bindMode Extender only) is the Component\n"
        "# ../components/scheduler. No `namespace:` field: the scheduler's Component adds a RoleBinding\n"
        "# that must live in kube-system; every object names its namespace itself.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources:\n" + "".join(f"- {n}\n" for n in resources)
    )
    base_files = {"kustomization.yaml": kustomization, **{n: join(d) for n, d in base.items()}}
    write(args.out / "base", base_files, keep=("namespace.yaml",))
    component = HEADER + (
        "# The second scheduler (gangplugin-scheduler), for bindMode Extender: add it to an overlay's\n"
        "# `components:` and set its image to the cluster's own version (docs/install.md):\n"
        "#   images: [{name: registry.k8s.io/kube-scheduler, newTag: v1.33.5}]\n"
        "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
        "kind: Component\n"
        "resources:\n"
        "- scheduler.yaml\n"
    )
    write(
        args.out / "components" / "scheduler",
        {"kustomization.yaml": component, "scheduler.yaml": join(added)},
    )
    write(
        args.out / "components" / "pod-gate-policy",
        pod_gate_policy(base, render(args.helm, "--set", "podGate=policy")),
    )
    return 0


def pod_gate_policy(base: dict[str, list[str]], with_policy: dict[str, list[str]]) -> dict[str, str]:
    """The Component that gates gang pods with the MutatingAdmissionPolicy instead of the webhook
    (podGate policy): the policy added, the mutating webhook configuration deleted; nothing else
    of the base may differ."""
    policy = with_policy.pop(POLICY_FILE)
    gone = [d for d in base[WEBHOOK_FILE] if d not in with_policy[WEBHOOK_FILE]]
    if (
        with_policy != {**base, WEBHOOK_FILE: [d for d in base[WEBHOOK_FILE] if d not in gone]}
        or len(gone) != 1
    ):
        sys.exit("render-manifests: podGate=policy changes more than the pod gate")
    kind = yaml.safe_load(gone[0])
    component = HEADER + (
        "# Gang pods gated by a MutatingAdmissionPolicy, in the API server, instead of gangplugin's\n"
        "# mutating webhook (Kubernetes >= 1.36: admissionregistration.k8s.io/v1): add it to an\n"
        "# overlay's `components:` (docs/install.md).\n"
        "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
        "kind: Component\n"
        "resources:\n"
        f"- {POLICY_FILE}\n"
        "patches:\n"
        "- patch: |-\n"
        "    $patch: delete\n"
        f"    apiVersion: {kind['apiVersion']}\n"
        f"    kind: {kind['kind']}\n"
        "    metadata:\n"
        f"      name: {kind['metadata']['name']}\n"
    )
    return {"kustomization.yaml": component, POLICY_FILE: join(policy)}


if __name__ == "__main__":
    sys.exit(main())
