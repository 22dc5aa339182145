"""A wait's deadline in seconds of an idle machine: on a loaded machine its seconds pass slower,
within a bound."""

from __future__ import annotations

import os

import pytest

from gangplugin.localcluster.probes import MAX_STRETCH, Deadline
from tests.support.fakeapi import Clock


def test_seconds_pass_slower_on_a_loaded_machine_and_the_wait_still_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cores = os.cpu_count() or 1
    load = [0.5 * cores]
    monkeypatch.setattr(os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    clock = Clock(100.0)
    deadline = Deadline(10, monotonic=clock)
    clock.t += 9.9
    assert not deadline.passed()  # idle: wall seconds
    clock.t += 0.1
    assert deadline.passed()

    load[0] = 4.0 * cores  # four times what the cores can run: a quarter as fast
    deadline = Deadline(10, monotonic=clock)
    clock.t += 39
    assert not deadline.passed()
    clock.t += 1
    assert deadline.passed()

    load[0] = 1000.0 * cores  # however loaded, it ends
    deadline = Deadline(10, monotonic=clock)
    clock.t += 10 * MAX_STRETCH
    assert deadline.passed()
