"""Whose CPU a part spent: a process's time read from /proc, differenced over the part."""

from __future__ import annotations

import os
import subprocess
import sys

from _peers import cpu


def test_a_busy_child_shows_its_cpu_and_a_gone_one_is_left_out() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\ninput()",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        before = cpu.sample({"child": child.pid})
        assert before["child"] >= 0.0 and cpu.BENCH in before
        while (cpu.seconds(child.pid) or 0.0) < 0.25:
            pass  # the child's busy loop, seen from here
        spent = cpu.difference(before, cpu.sample({"child": child.pid}))
        assert spent["child"] > 0.0
    finally:
        child.communicate(b"\n")
    assert cpu.seconds(child.pid) is None
    assert "child" not in cpu.sample({"child": child.pid})


def test_difference_counts_a_restarted_process_from_zero_and_sorts_busiest_first() -> None:
    spent = cpu.difference(
        {"kueue": 50.0, "etcd": 1.0, cpu.BENCH: 2.0}, {"kueue": 3.0, "etcd": 4.0, cpu.BENCH: 2.5}
    )
    assert list(spent) == ["etcd", "kueue", cpu.BENCH]
    assert spent == {"etcd": 3.0, "kueue": 3.0, cpu.BENCH: 0.5}


def test_line_names_the_cores_and_every_process() -> None:
    text = cpu.line({"kube-apiserver": 5.0, "gangplugin": 2.25}, wall=10.0, cores=2)
    assert text == "7.2 of 20.0 CPU s (2 cores x 10.0 s): kube-apiserver 5.0, gangplugin 2.2"


def test_own_process_is_read() -> None:
    assert (cpu.seconds(os.getpid()) or 0.0) > 0.0
