"""The local cluster's GenericWorkload opt-in: off by default; on, the feature gate on
kube-apiserver, kube-controller-manager and kube-scheduler and the PodGroup API served; kept by
a `restart` from another shell through the state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangplugin.localcluster.cluster import GENERIC_WORKLOAD_API, GENERIC_WORKLOAD_GATE, LocalCluster

GATE, API = GENERIC_WORKLOAD_GATE, GENERIC_WORKLOAD_API


def _flags(cluster: LocalCluster) -> dict[str, set[str]]:
    cluster.state_dir.mkdir(parents=True, exist_ok=True)  # kube-scheduler's config is written there
    procs = [cluster.process(n) for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    return {p.name: {a for a in p.argv if a in (GATE, API)} for p in procs if p}


def test_off_by_default_and_on_for_all_three_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GANGPLUGIN_GENERIC_WORKLOAD", raising=False)
    off = LocalCluster(state_dir=tmp_path / "off")
    assert not off.generic_workload and not any(_flags(off).values())
    on = LocalCluster(state_dir=tmp_path / "on", generic_workload=True)
    assert _flags(on) == {
        "kube-apiserver": {GATE, API},
        "kube-controller-manager": {GATE},
        "kube-scheduler": {GATE},
    }
    monkeypatch.setenv("GANGPLUGIN_GENERIC_WORKLOAD", "1")
    assert LocalCluster(state_dir=tmp_path / "env").generic_workload


def test_a_restart_from_another_shell_keeps_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GANGPLUGIN_GENERIC_WORKLOAD", raising=False)
    started = LocalCluster(state_dir=tmp_path, generic_workload=True)
    started.stop_process("kube-scheduler")  # records the options, as every start and stop does
    assert LocalCluster(state_dir=tmp_path).generic_workload
    monkeypatch.setenv("GANGPLUGIN_GENERIC_WORKLOAD", "0")  # the environment, said, wins
    assert not LocalCluster(state_dir=tmp_path).generic_workload
