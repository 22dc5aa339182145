"""The session runs the Kueue it says it runs: the full suite on the newest supported version,
the compatibility set (`-m compat`, `make test`'s second session) on the oldest."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import E2ECluster, e2e_kueue_version, e2e_local_cluster


@pytest.mark.compat
def test_kueue_reports_the_version_the_session_runs(cluster: E2ECluster) -> None:
    assert cluster.local, "which Kueue runs is read from the local cluster's Kueue log (KUBECONFIG unset)"
    log = e2e_local_cluster().state_dir / "logs" / "kueue.log"
    # Kueue logs its build's version once, as it starts (cmd/kueue/main.go, "Initializing").
    started = [
        entry
        for line in log.read_text().splitlines()
        if line.startswith("{") and (entry := json.loads(line)).get("msg") == "Initializing"
    ]
    assert started, f"no 'Initializing' line in {log}"
    assert started[-1]["gitVersion"] == e2e_kueue_version(), started[-1]
