"""The real nodes' rank program (deploy/real-nodes/images/worker/rank.py), run as processes on this
machine: ranks meet at rank 0 and all-reduce; a rank lost is noticed, and its replacement makes
the ranks meet again in a new generation; readiness as the probe sees it. On real nodes, as
PyTorchJob pods: tests/e2e/test_real_nodes.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

RANK = Path(__file__).resolve().parents[2] / "deploy" / "real-nodes" / "images" / "worker" / "rank.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Ranks:
    def __init__(self, tmp: Path, world: int, **env: str) -> None:
        self.tmp, self.world, self.env = tmp, world, env
        self.master = free_port()
        self.ready = [free_port() for _ in range(world)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.outs: dict[int, list[Path]] = {r: [] for r in range(world)}

    def start(self, rank: int, **extra: str) -> None:
        out = self.tmp / f"rank{rank}-{len(self.outs[rank])}.out"
        self.outs[rank].append(out)
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(self.world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.master),
            "READY_PORT": str(self.ready[rank]),
            **self.env,
            **extra,
        }
        with out.open("wb") as f:
            self.procs[rank] = subprocess.Popen([sys.executable, str(RANK)], env=env, stdout=f, stderr=f)

    def events(self, rank: int) -> list[dict[str, Any]]:
        return [json.loads(line) for out in self.outs[rank] for line in out.read_text().splitlines() if line]

    def kill(self, rank: int) -> None:
        self.procs[rank].kill()
        self.procs[rank].wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Callable[..., Ranks]]:
    made: list[Ranks] = []

    def make(world: int, **env: str) -> Ranks:
        made.append(Ranks(tmp_path, world, **env))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def steps(events: list[dict[str, Any]], generation: int) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "step" and e["generation"] == generation]


def test_every_rank_meets_and_each_step_sums_every_rank(ranks: Callable[..., Ranks]) -> None:
    r = ranks(4, STEPS="3", STEP_SECONDS="0.05")
    for rank in (3, 1, 0, 2):  # rank 0 need not come first: the others wait for it
        r.start(rank)
    for rank in range(4):
        assert r.procs[rank].wait(60) == 0
    for rank in range(4):
        events = r.events(rank)
        assert [e["event"] for e in events][:2] == ["start", "met"]
        assert [(e["step"], e["sum"]) for e in steps(events, 0)] == [(0, 10), (1, 10), (2, 10)]


def test_a_lost_rank_s_replacement_makes_every_rank_meet_again(ranks: Callable[..., Ranks]) -> None:
    r = ranks(3, STEP_SECONDS="0.1", PEER_TIMEOUT="2")
    for rank in range(3):
        r.start(rank)
    until(lambda: all(steps(r.events(rank), 0) for rank in range(3)), "every rank's first step")
    r.kill(2)  # no answer from it again: rank 0 ends the generation; rank 1 is told so
    until(lambda: any(e["event"] == "lost" for e in r.events(0)), "rank 0 to notice")
    r.start(2)
    for rank in range(3):
        new = until(lambda rank=rank: steps(r.events(rank), 1), f"rank {rank} in generation 1")
        assert new[0]["sum"] == 6
    assert any(e["event"] == "lost" for e in r.events(1))


def test_readiness_passes_once_a_rank_serves_and_never_on_the_never_ready_rank(
    ranks: Callable[..., Ranks],
) -> None:
    r = ranks(2, STEP_SECONDS="0.1", NEVER_READY_RANK="1")
    r.start(0)
    r.start(1)

    def status(rank: int) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{r.ready[rank]}/ready", timeout=2) as resp:
                code: int = resp.status
                return code
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return 0

    until(lambda: status(0) == 200, "rank 0 ready")
    until(lambda: steps(r.events(1), 0), "rank 1 stepping")  # it works, and says it is not ready
    assert status(1) == 503
