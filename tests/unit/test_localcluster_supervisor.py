"""The local cluster's process supervisor, on real (small) processes: start detached and wait
for health, the state file another shell reads, stop, the end of the log of one that dies,
zombies and reused pids."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.supervisor import Process, Supervisor, alive, port_free, read_state
from tests.support.kube import wait_for
from tests.support.processes import http_server


def _quiet(_message: str) -> None:
    pass


def test_started_processes_are_seen_from_another_shell_and_stopped_newest_first(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, _quiet, options={"ports": 26000})
    sup.start(http_server("first", tmp_path))
    sup.start(http_server("second", tmp_path))
    pids = sup.running()
    assert list(pids) == ["first", "second"]
    assert all(os.getpgid(pid) == pid for pid in pids.values()), "each in a process group of its own"
    state = read_state(tmp_path)
    assert state["processes"] == pids and state["options"] == {"ports": 26000}
    assert state["commands"]["first"]["argv"][:3] == [sys.executable, "-m", "http.server"]
    assert (tmp_path / "logs" / "first.log").exists()

    other_shell = Supervisor(tmp_path, _quiet)
    assert other_shell.is_running()
    said: list[str] = []
    Supervisor(tmp_path, said.append).stop_all()
    assert [m.split()[1] for m in said] == ["second", "first"]
    assert not any(alive(pid) for pid in pids.values())
    assert not sup.state_file.exists() and sup.running() == {}


def test_one_process_stops_and_is_forgotten_the_rest_runs(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, _quiet)
    sup.start(http_server("a", tmp_path))
    sup.start(http_server("b", tmp_path))
    a = sup.running()["a"]
    Supervisor(tmp_path, _quiet).stop("a", signal.SIGTERM)
    assert not alive(a)
    assert list(sup.running()) == ["b"] and sup.is_running()
    sup.stop_all()


def test_a_process_that_exits_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, _quiet)
    argv = (
        sys.executable,
        "-c",
        "import sys; print('no such flag:', sys.argv[1]); sys.exit(3)",
        str(tmp_path),
    )
    with pytest.raises(ClusterError) as err:
        sup.start(Process("broken", argv, health=lambda: False))
    assert "broken exited with status 3 while starting" in str(err.value)
    assert f"no such flag: {tmp_path}" in str(err.value)


def test_a_command_line_that_does_not_name_the_state_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="names nothing under"):
        Supervisor(tmp_path, _quiet).start(Process("stray", ("sleep", "60"), health=lambda: True))
    assert read_state(tmp_path) == {}


def test_a_reused_pid_is_not_ours_and_is_left_alone(tmp_path: Path) -> None:
    # The recorded pid now belongs to another program (this test's own process).
    (tmp_path / "state.json").write_text(json.dumps({"processes": {"etcd": os.getpid()}}))
    sup = Supervisor(tmp_path, _quiet)
    assert sup.running() == {} and not sup.is_running()
    sup.stop("etcd")
    sup.stop_all()
    assert alive(os.getpid())


def test_a_zombie_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split()[2] == "Z", 30, "the child to exit")
    os.kill(child.pid, 0)  # the kernel still has it (not reaped) ...
    assert not alive(child.pid)  # ... but nothing of it runs or holds a port
    child.wait()
    assert not alive(child.pid)


def test_port_free() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not port_free(port)
    assert port_free(port)
