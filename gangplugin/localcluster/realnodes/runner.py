"""One real node's process: `unshare --mount --propagation private -- python -m
gangplugin.localcluster.realnodes.runner <node.json>` (the component starts it so).

In its own mount namespace it puts the node's directories over the paths the kubelet, containerd
and the CNI plugins keep fixed (/run, /var/lib, /var/log), and the kernel settings the kubelet
checks over /proc/sys; it moves itself into the node's `runtime` cgroup (so do containerd, the
shims it starts and the kubelet); then starts containerd, loads the images, serves the GPU device
plugin and starts the kubelet, and waits. TERM stops the node: the kubelet, its pods, containerd,
then whatever is left in the node's cgroups. A node stopped otherwise (SIGKILL: a power cut) is
cleaned up from outside by `cgroups.kill`. Each boot starts from an empty /run, as a machine's."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import IO

from gangplugin.localcluster.realnodes import cgroups, deviceplugin
from gangplugin.localcluster.realnodes.configs import NodeRun

SOCKET_TIMEOUT = 60.0
STOP_GRACE = 10.0
# Written when the node stops by itself (a program of it failed), with why: `up` says so at once
# rather than waiting for the node to be Ready.
EXITED = "exited"


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    out: IO[bytes] = log.open("ab")
    with out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def boot(run: NodeRun) -> None:
    """The node's cgroup and mount namespace: a fresh /run, the node's directories mounted."""
    (run.directory / "booted").unlink(missing_ok=True)
    (run.directory / EXITED).unlink(missing_ok=True)
    run.socket.unlink(missing_ok=True)
    cgroups.enter(f"{run.cgroup}/{cgroups.RUNTIME}", os.getpid())
    runtime = run.binds["/run"]
    shutil.rmtree(runtime, ignore_errors=True)
    runtime.mkdir(parents=True)
    for host, mine in run.binds.items():
        subprocess.run(["mount", "--bind", str(mine), host], check=True)


def archived(archive: Path) -> tuple[str, str] | None:
    """The name and manifest digest an OCI archive holds (None: not an OCI layout)."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            index = json.load(member) if member else {}
        (manifest,) = index["manifests"]
        return manifest["annotations"]["org.opencontainers.image.ref.name"], manifest["digest"]
    except (OSError, KeyError, ValueError, tarfile.TarError):
        return None


def held(run: NodeRun) -> set[tuple[str, str]]:
    """The (name, digest) of every image the node's containerd holds."""
    out = subprocess.run(
        [run.ctr, "--address", str(run.socket), "-n", "k8s.io", "images", "ls"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {(f[0], f[2]) for f in (line.split() for line in out.splitlines()[1:]) if len(f) > 2}


def load_images(run: NodeRun, stopping: threading.Event) -> bool:
    """Every image archive into containerd's k8s.io namespace (the CRI's), unpacked for it, but
    those it holds already (its store outlives the cluster: `down` keeps it); False when told to
    stop meanwhile, or when an import failed (said why)."""
    have = held(run)
    for archive in run.images:
        if archived(archive) in have:
            continue
        t0 = time.monotonic()
        ctr = subprocess.Popen(
            [run.ctr, "--address", str(run.socket), "-n", "k8s.io", "images", "import", str(archive)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        while ctr.poll() is None:
            if stopping.wait(0.2):
                ctr.kill()
                ctr.wait()
                return False
        if ctr.returncode != 0:
            output = ctr.stdout.read().decode(errors="replace") if ctr.stdout else ""
            fail(run, f"loading {archive} failed ({ctr.returncode}): {output}")
            return False
        say(f"loaded {archive.name} in {time.monotonic() - t0:.1f}s")
    return True


def stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fail(run: NodeRun, message: str) -> None:
    say(message)
    (run.directory / EXITED).write_text(message)


def run_node(run: NodeRun) -> int:
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    boot(run)
    logs = {
        name: run.log_dir / f"real-node-{run.name}-{name}.log" for name in ("containerd", "kubelet", "gpus")
    }
    containerd = spawn(list(run.containerd), logs["containerd"])
    deadline = time.monotonic() + SOCKET_TIMEOUT
    while not run.socket.exists():
        if containerd.poll() is not None or time.monotonic() > deadline or stopping.is_set():
            fail(run, f"containerd did not start; {logs['containerd']}:\n{tail(logs['containerd'])}")
            stop(containerd)
            return 1
        time.sleep(0.1)
    say("containerd serves")
    (run.directory / "booted").touch()  # the supervisor's health check: the next node may boot
    if not load_images(run, stopping):
        stop(containerd)
        cgroups.kill(run.cgroup, spare=os.getpid())
        return 1
    plugin = threading.Thread(
        target=deviceplugin.serve, args=(run.name, run.gpus, stopping, logs["gpus"]), daemon=True
    )
    plugin.start()
    kubelet = spawn(list(run.kubelet), logs["kubelet"])
    say(f"kubelet started (pid {kubelet.pid})")
    status = 0
    while not stopping.wait(0.5):
        for name, proc in (("containerd", containerd), ("kubelet", kubelet)):
            if proc.poll() is not None:
                fail(run, f"{name} exited with status {proc.returncode}; {logs[name]}:\n{tail(logs[name])}")
                status = 1
                stopping.set()
    say("stopping the node")
    stop(kubelet)
    cgroups.kill(f"{run.cgroup}/kubepods")
    stop(containerd)
    cgroups.kill(run.cgroup, spare=os.getpid())
    plugin.join(timeout=3)
    return status


def main() -> None:
    sys.exit(run_node(NodeRun.read(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
