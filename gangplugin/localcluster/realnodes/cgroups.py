"""A real node's cgroups (cgroup v1, as this machine has): `<pool>/<node>` is the kubelet's
cgroupRoot (its pods go under `kubepods/`), and the node's own programs (its runner, containerd
with the shims it starts, the kubelet) run in `<pool>/<node>/runtime`. So every process of a node
is under one path: what a node's memory is, and what powering it off kills (the shims leave
containerd's process group, and containers keep running when their shim dies)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
RUNTIME = "runtime"
# The hierarchy whose tree lists every process (each process is in exactly one cgroup of it).
PIDS = "pids"


def hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (not the v2 `unified` one): the kubelet checks its
    cgroupRoot in each, the named `systemd` one included."""
    if not (ROOT / "memory").is_dir():
        return []
    return sorted(p for p in ROOT.iterdir() if p.is_dir() and not p.is_symlink() and p.name != "unified")


def create(path: str) -> None:
    """`path` in every hierarchy; a new cpuset level gets its parent's cpus and mems (v1 leaves
    them empty, and no process can join a cpuset without them)."""
    for hierarchy in hierarchies():
        current = hierarchy
        for part in path.strip("/").split("/"):
            parent, current = current, current / part
            if current.is_dir():
                continue
            current.mkdir()
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (current / knob).write_text((parent / knob).read_text())


def weigh(path: str, cpus: int) -> None:
    """Give `path` the CPU weight of `cpus` busy processes. A cgroup of the cpu controller is one
    scheduling entity beside each process of its parent: a pool's cgroup at the default weight
    (1,024, one process's) gave all its nodes, their kubelets, runtimes and pods together the
    share of one process on a machine busy with others' (an image took minutes to load)."""
    (ROOT / "cpu" / path.strip("/") / "cpu.shares").write_text(str(1024 * cpus))


def enter(path: str, pid: int) -> None:
    """Move `pid` into `path` in every hierarchy (its children follow it)."""
    create(path)
    for hierarchy in hierarchies():
        (hierarchy / path.strip("/") / "cgroup.procs").write_text(str(pid))


def pids(path: str) -> set[int]:
    """Every process under `path`, its sub-cgroups included."""
    top = ROOT / PIDS / path.strip("/")
    found: set[int] = set()
    if not top.is_dir():
        return found
    for directory, _dirs, _files in os.walk(top):
        with contextlib.suppress(OSError):  # a cgroup removed while walking
            found.update(int(p) for p in (Path(directory) / "cgroup.procs").read_text().split())
    return found


def kill(path: str, spare: int | None = None, timeout: float = 15.0) -> None:
    """SIGKILL every process under `path` (but `spare`) until none is left (a dying process may
    fork meanwhile), or `timeout`."""
    deadline = time.monotonic() + timeout
    while (left := pids(path) - {spare}) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def remove(path: str) -> None:
    """Remove `path` and everything under it from every hierarchy (its processes must be gone;
    one that is still exiting keeps its cgroup busy for a moment)."""
    for hierarchy in hierarchies():
        top = hierarchy / path.strip("/")
        if not top.is_dir():
            continue
        for directory, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            for _ in range(50):
                try:
                    Path(directory).rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a process still leaving
                    time.sleep(0.1)
