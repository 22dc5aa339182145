"""bench/ is a folder of scripts, not a package: its helpers import each other as top-level
modules (`_peers`, `_cluster`), as the scripts do when run from the checkout."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
