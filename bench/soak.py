"""A soak with faults: a seeded random stream of gangs for N minutes on the local cluster (two
`gangplugin serve` replicas, the GenericWorkload gate on, so every bind mode runs) while a fault
injector kills, restarts, fails nodes and sends bad input, and an independent observer checks
that nothing is lost (tests/soak/; docs/operations.md "The soak" says what each violation means).

Run: .venv/bin/python bench/soak.py --minutes 30 --seed 1 [-o json]
(its own cluster, state .local/bench-soak, ports GANGPLUGIN_PORT_BASE or 32000; started and
stopped here). Exits 1 when the observer saw a violation; SIGUSR1 prints every thread's stack.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: tests.soak

from gangplugin.localcluster.cluster import REPO
from tests.soak.run import SoakConfig, run_soak, soak_cluster, text_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long the stream runs (default 30)")
    ap.add_argument("--seed", type=int, default=1, help="the stream's and the faults' seed (default 1)")
    ap.add_argument("--faults", type=int, help="faults to inject, at least (default 2 a minute, at least 12)")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    args = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: every thread's stack, on stderr
    log = (lambda m: print(m, file=sys.stderr)) if args.output == "json" else print
    base = int(os.environ.get("GANGPLUGIN_PORT_BASE", "32000"))
    faults = args.faults if args.faults is not None else max(12, round(2 * args.minutes))
    with soak_cluster(REPO / ".local" / "bench-soak", base, args.seed, log, keep=args.keep) as (
        cluster,
        proxy,
    ):
        report = run_soak(cluster, proxy, SoakConfig(args.minutes, args.seed, faults), log)
    if args.output == "json":
        keys = ("faults", "gangs", "violations", "p50RunningSeconds", "p95RunningSeconds")
        print(
            json.dumps(
                {k: report[k] for k in keys} | {"detail": {k: v for k, v in report.items() if k not in keys}},
                indent=2,
            )
        )
    else:
        print(text_report(report))
    sys.exit(1 if report["violations"] else 0)


if __name__ == "__main__":
    main()
