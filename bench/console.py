"""The web console at HyperPod scale: a local cluster of N kwok nodes (default 5,000; GB200
UltraServers under three network layers and a P5 pool, `_cluster.hyperpod_shape`) with 30% of
them running gangs (pods created bound), and what the console costs there.

Run: .venv/bin/python bench/console.py [--nodes 5000] [--reps 5] [--parts ab] [--keep]
(state .local/bench-console, ports GANGPLUGIN_PORT_BASE or 30000; Debian's Chromium, as the
e2e tests drive it).

(a) memory: `gangplugin serve` restarted alternately without and with the console (the same
    components otherwise); its resident memory (VmRSS) once its caches synced and, with the
    console, the map served twice; what the console adds, in MiB and as a ratio to serve
    without it, per pair of runs.
(b) render time: Chromium loads the map page (every node) and, as the baseline, the gang policy
    page (a few lines) of the same console: navigation start to the first frame painted after
    the load event; and a live update of the map (its region fetched and swapped, as a
    server-sent event triggers it) to the next frame. The server's own part: time to first byte.
    Beside each wall time, the CPU it cost: Chromium's renderer (its ProcessTime, from the
    DevTools protocol) and `gangplugin serve` (/proc); on a busy machine they say more about the
    page than the wall time does.
Each figure is the median (min-max) of --reps repetitions, printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _cluster
import httpx
import yaml
from _cluster import spread
from scale import proc_status

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangplugin.kube.client import Client
from gangplugin.localcluster import nodes
from gangplugin.localcluster.cluster import REPO, LocalCluster, Ports
from gangplugin.server.main import DEFAULT_COMPONENTS
from tests.support.browser import chromium

STATE = "bench-console"
WITHOUT = ",".join(DEFAULT_COMPONENTS)
WITH = ",".join((*DEFAULT_COMPONENTS, "console"))
# After the load event, two animation frames: the first frame painted with the page in it.
PAINTED = """() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  done({ttfb: nav.responseStart, painted: performance.now(),
        nodes: document.querySelectorAll('span.node[data-node]').length});
})))"""
# A live update: the map's region fetched again and swapped, then the next frame.
SWAPPED = """() => new Promise(done => {
  const t0 = performance.now();
  document.body.addEventListener('htmx:afterSettle', () => requestAnimationFrame(() =>
    done(performance.now() - t0)), {once: true});
  htmx.ajax('GET', '/map/view', {target: '#live', swap: 'outerHTML'});
})"""


def start(shape: dict[str, Any], components: str) -> LocalCluster:
    """The local cluster `.local/bench-console` with the nodes of `shape` (ports from
    GANGPLUGIN_PORT_BASE). It starts with one UltraServer's worth of them; the rest are created
    once it runs, with kwok started again at the node lease the local cluster gives that shape.
    Created during the start, as `make up` creates them, 5,000 node writes beside the CRDs being
    established made the start miss its deadlines on the shared, loaded machine."""
    folder = Path(tempfile.mkdtemp())
    small, full = folder / "small.yaml", folder / "full.yaml"
    small.write_text(yaml.safe_dump(_cluster.hyperpod_shape(20)))
    full.write_text(yaml.safe_dump(shape))
    state, ports = REPO / ".local" / STATE, Ports(int(os.environ.get("GANGPLUGIN_PORT_BASE", "30000")))
    served = components.split(",")
    LocalCluster(state, ports, log=lambda _m: None, shape=small, gangplugin_components=served).up()
    cluster = LocalCluster(state, ports, log=lambda _m: None, shape=full, gangplugin_components=served)
    cluster.restart("kwok")
    client = Client.from_kubeconfig(cluster.kubeconfig)
    try:
        nodes.create(client, full, lambda _m: None)
    finally:
        client.close()
    return cluster


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000, help="cluster size (default 5000)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each measurement (default 5)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    ap.add_argument("--parts", default="ab", help="which of (a) memory and (b) render time to run")
    return ap.parse_args()


def rss_mib(pid: int) -> float:
    return proc_status(pid)[1]


def settled_rss(pid: int, quiet: float = 5.0, within: float = 2.0, limit: float = 120.0) -> float:
    """VmRSS once two samples `quiet` seconds apart differ by less than `within` MiB."""
    deadline = time.monotonic() + limit
    last = rss_mib(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = rss_mib(pid)
        if abs(now - last) < within:
            return now
        last = now
    return last


def admin_token(client: Client) -> str:
    """A token of the local cluster's console user (deploy/local/console-admin.yaml)."""
    reply = client.request(
        "POST",
        "/api/v1/namespaces/gangplugin-system/serviceaccounts/console-admin/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200},
        },
    )
    return str(reply["status"]["token"])


def console_url(cluster: LocalCluster) -> str:
    return f"https://127.0.0.1:{cluster.ports.gangplugin_console()}"


def memory(cluster: LocalCluster, token: str, reps: int) -> None:
    print("(a) gangplugin serve's resident memory without and with the console")
    added, ratios = [], []
    for rep in range(reps):
        sizes = {}
        for name, components in (("without", WITHOUT), ("with", WITH)):
            cluster.restart("gangplugin", args=(f"--components={components}",))
            pid = cluster.running_processes()["gangplugin"]
            if components == WITH:
                for _ in range(2):
                    r = httpx.get(
                        f"{console_url(cluster)}/map",
                        headers={"Authorization": f"Bearer {token}"},
                        verify=ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt")),
                        timeout=120,
                    )
                    r.raise_for_status()
            sizes[name] = settled_rss(pid)
        added.append(sizes["with"] - sizes["without"])
        ratios.append(sizes["with"] / sizes["without"])
        print(f"    rep {rep + 1}: without {sizes['without']:.0f} MiB, with {sizes['with']:.0f} MiB")
    mib, ratio = spread(added, "{:.1f}".format), spread(ratios, "{:.3f}".format)
    print(f"  the console adds {mib} MiB; with/without {ratio}")
    cluster.restart("gangplugin", args=(f"--components={WITH}",))


def cpu_seconds(pid: int) -> float:
    return proc_status(pid)[2]


def render(cluster: LocalCluster, token: str, reps: int) -> None:
    """Wall time to the first frame painted, and what it cost in CPU (see the module's (b))."""
    print("(b) Chromium: navigation start -> first frame painted after load (ms); CPU ms spent")
    url = console_url(cluster)
    serve = cluster.running_processes()["gangplugin"]
    seen: dict[str, list[float]] = {}
    nodes = 0
    with chromium() as context:
        context.set_extra_http_headers({"Authorization": f"Bearer {token}"})
        page = context.new_page()
        devtools = context.new_cdp_session(page)
        devtools.send("Performance.enable")

        def renderer() -> float:
            found = devtools.send("Performance.getMetrics")["metrics"]
            return float(next(m["value"] for m in found if m["name"] == "ProcessTime"))

        def measure(name: str, act: Any) -> Any:
            browser, server = renderer(), cpu_seconds(serve)
            got = act()
            seen.setdefault(f"{name}: renderer CPU", []).append(1000 * (renderer() - browser))
            seen.setdefault(f"{name}: gangplugin CPU", []).append(1000 * (cpu_seconds(serve) - server))
            return got

        for _ in range(reps):
            for name, path in (("baseline /policies", "/policies"), ("map /map", "/map")):

                def load(path: str = path) -> dict[str, Any]:
                    page.goto(f"{url}{path}", wait_until="load", timeout=300_000)
                    got: dict[str, Any] = page.evaluate(PAINTED)
                    return got

                got = measure(name, load)
                seen.setdefault(name, []).append(got["painted"])
                seen.setdefault(f"{name}: first byte", []).append(got["ttfb"])
                nodes = max(nodes, int(got["nodes"]))
            swapped = measure("map live update", lambda: float(page.evaluate(SWAPPED)))
            seen.setdefault("map live update", []).append(swapped)
    for name, samples in seen.items():
        print(f"  {name:<40} {spread(samples, '{:.0f}'.format)}")
    base = statistics.median(seen["baseline /policies"])
    ratios = [s / base for s in seen["map /map"]]
    print(f"  map / baseline (wall) {spread(ratios, '{:.1f}'.format)}; {nodes} nodes drawn")


def main() -> None:
    args = parse()
    os.environ.setdefault("GANGPLUGIN_PORT_BASE", "30000")
    shape = _cluster.hyperpod_shape(args.nodes)
    t0 = time.monotonic()
    cluster = start(shape, WITH)
    try:
        client = Client.from_kubeconfig(cluster.kubeconfig)
        gpus = _cluster.fill_running_gangs(client, shape, 0.3)
        print(
            f"{args.nodes} nodes, {gpus} of {_cluster.total_gpus(shape)} GPUs in running gangs "
            f"(cluster up in {time.monotonic() - t0:.0f} s)"
        )
        # gangplugin lists the nodes and pods at its start, as after any restart (it handled
        # them one event at a time while they were created, on the loaded machine it lost its
        # Lease doing so: see docs/console.md)
        cluster.restart("gangplugin", args=(f"--components={WITH}",))
        token = admin_token(client)
        if "b" in args.parts:
            render(cluster, token, args.reps)
        if "a" in args.parts:
            memory(cluster, token, args.reps)
    finally:
        if not args.keep:
            cluster.down(quiet=True)


if __name__ == "__main__":
    main()
