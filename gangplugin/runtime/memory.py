"""Long-lived state and CPython's cycle collector.

A full (generation 2) collection walks every container object the process holds, whichever
thread it interrupts. `serve` holds, for its whole life, the watch caches (every Node and Pod
as JSON) and the admission pass's capacity snapshots: at 5,000 nodes, the snapshot alone is
~50,000 objects and a full collection of them takes 30-50 ms on the 2-core development machine
(`bench/preemption.py`), landing on whatever runs then, e.g. a victim search. Frozen
(`gc.freeze`), they are skipped by every later collection. What dies later is still freed by
reference counting; only reference cycles among frozen objects would stay (JSON and snapshots
make none), so garbage is collected first.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect what is garbage now, then exempt every object still alive from later collections.
    Call right after building state that lives as long as the process."""
    gc.collect()
    gc.freeze()
