"""The keeper starts again, as kubelet would, what exits of a local cluster: at once the first
time, then after a backoff that doubles; never what was stopped on purpose. On real (small)
processes, with the keeper's clock given."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from gangplugin.localcluster.keeper import FIRST_BACKOFF, MAX_BACKOFF, RESET_AFTER, Backoff, Keeper
from gangplugin.localcluster.supervisor import Supervisor, alive, read_state
from tests.support.kube import wait_for
from tests.support.processes import http_server


def test_backoff_is_kubelets_at_once_then_doubling_to_five_minutes_reset_after_ten() -> None:
    b, waits = Backoff(), []
    for _ in range(8):
        wait, b = b.after_exit(ran=5.0)
        waits.append(wait)
    assert waits == [0.0, FIRST_BACKOFF, 20.0, 40.0, 80.0, 160.0, MAX_BACKOFF, MAX_BACKOFF]
    wait, b = b.after_exit(ran=RESET_AFTER)  # ran ten minutes: starts over
    assert wait == 0.0 and b.after_exit(ran=1.0)[0] == FIRST_BACKOFF


def _crash(sup: Supervisor) -> int:
    pid = sup.running()["server"]
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), 30, f"pid {pid} to exit")
    return pid


def test_what_exits_is_started_again_with_backoff_and_counted(tmp_path: Path) -> None:
    lines: list[str] = []
    sup = Supervisor(tmp_path, lines.append)
    proc = http_server("server", tmp_path)
    sup.start(proc)
    keeper = Keeper(tmp_path, lines.append)
    try:
        keeper.tick(100.0)  # sees it running
        first = _crash(sup)
        keeper.tick(101.0)
        again = sup.running()["server"]
        assert again != first, "started again at once the first time"
        wait_for(proc.health, 30, "the restarted server to answer")
        state = read_state(tmp_path)
        assert state["restarts"]["server"]["count"] == 1
        assert any(f"server (pid {first}) exited after 1s; starting it again at once" in ln for ln in lines)
        assert "--- keeper" in (tmp_path / "logs" / "server.log").read_text()

        _crash(sup)
        keeper.tick(102.0)  # ran 1 s: backoff
        assert "server" not in sup.running()
        keeper.tick(102.0 + FIRST_BACKOFF - 1)
        assert "server" not in sup.running()
        keeper.tick(102.0 + FIRST_BACKOFF)
        assert "server" in sup.running()
        assert read_state(tmp_path)["restarts"]["server"]["count"] == 2
    finally:
        sup.stop_all()


def test_what_was_stopped_on_purpose_stays_stopped(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, lambda _m: None)
    sup.start(http_server("server", tmp_path))
    keeper = Keeper(tmp_path, lambda _m: None)
    try:
        keeper.tick(100.0)
        sup.stop("server", signal.SIGTERM)
        keeper.tick(101.0)
        assert sup.running() == {} and "restarts" not in read_state(tmp_path)
    finally:
        sup.stop_all()


def test_down_stops_the_keeper_first(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, lambda _m: None)
    sup.start(http_server("server", tmp_path))
    sup.keep((sys.executable, "-m", "gangplugin.localcluster.keeper", str(tmp_path)))
    keeper = sup.keeper()
    assert keeper is not None and sup.is_running()
    sup.stop_all()
    assert not alive(keeper) and sup.running() == {}
    assert not (tmp_path / "state.json").exists()
