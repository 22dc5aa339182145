"""A derived value is made again after a change, but at most once per max(floor, factor x its
cost); a change inside that interval gets the value already made and a reminder for its end."""

from __future__ import annotations

import threading

from gangplugin.console.derived import Derived


def test_made_again_only_after_a_change_and_not_sooner_than_its_interval() -> None:
    now = [100.0]
    made: list[float] = []
    reminded = threading.Event()

    def make() -> int:
        made.append(now[0])
        now[0] += 0.5  # costs half a second
        return len(made)

    d = Derived(make, reminded.set, floor=1.0, factor=4.0, clock=lambda: now[0])
    assert d.get() == 1 and d.get() == 1  # no change: kept
    d.changed()
    now[0] += 0.1
    assert d.get() == 1  # inside 4 x 0.5 s: the value made, and a reminder set
    assert reminded.wait(5)
    now[0] += 2.0
    assert d.get() == 2 and made == [100.0, 102.6]
    assert d.get() == 2
