"""`LocalCluster`: start, restart and stop a local cluster; what tests, benchmarks and `make up` use.

It chooses the components (`components/`), writes the certificates and kubeconfig
(`credentials`), and has the supervisor (`supervisor`) run each component's process in the
registry's order (`components.base.Component` says what `up` calls when). Any failure during
`up` stops whatever had been started.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gangplugin.kube.client import Client
from gangplugin.localcluster import credentials, manifests, upstream
from gangplugin.localcluster.components import CONTROL_PLANE, DEFAULT, Component, choose
from gangplugin.localcluster.components.etcd import data_dir
from gangplugin.localcluster.components.gangplugin import GANGPLUGIN_NAMESPACE, Gangplugin
from gangplugin.localcluster.components.scheduler import KubeScheduler, extender_tls_config
from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.ports import Ports
from gangplugin.localcluster.spec import (
    GENERIC_WORKLOAD_API,
    GENERIC_WORKLOAD_ENV,
    GENERIC_WORKLOAD_GATE,
    ClusterSpec,
)
from gangplugin.localcluster.supervisor import Process, Supervisor, alive, port_free, read_state
from gangplugin.localcluster.upstream import REPO, cache_dir, jobset_version, versions

# Optional components to start too, comma-separated (`GANGPLUGIN_WITH=<name> make up`).
WITH_ENV = "GANGPLUGIN_WITH"
KUEUE_VERSION_ENV = "GANGPLUGIN_KUEUE_VERSION"
SHAPE_ENV = "GANGPLUGIN_SHAPE"
REPLICAS_ENV = "GANGPLUGIN_REPLICAS"
DEFAULT_REPLICAS = 2  # `gangplugin serve` processes, as the Helm chart installs it
SAMPLE_SHAPE = REPO / "deploy" / "local" / "cluster-shape.yaml"
# One request of `up`'s installs: large CRDs applied while kwok creates thousands of nodes, on a
# machine others load too, can take longer than a client's usual 30 s.
SETUP_REQUEST_TIMEOUT = 120.0


def _names(listed: str) -> list[str]:
    return [n.strip() for n in listed.split(",") if n.strip()]


class LocalCluster:
    """The local cluster rooted at `state_dir` (default GANGPLUGIN_STATE, else
    `<repo>/.local/cluster`), on `ports` (default GANGPLUGIN_PORT_BASE, else 21000).

    An option not given comes from the environment, else from what the cluster in `state_dir`
    was started with (a `restart` from another shell starts what `up` did), else its default:
    - `components`: the registry's defaults, plus the optional ones GANGPLUGIN_WITH names; etcd
      and kube-apiserver always run. ("kueue",) with "kube-controller-manager" is a control
      plane with Kueue: no nodes (no kwok), no gangplugin.
    - `kueue_version`: GANGPLUGIN_KUEUE_VERSION, else hack/versions.env's.
    - `generic_workload`: GANGPLUGIN_GENERIC_WORKLOAD=1 (off by default).
    - `shape`: the LocalClusterShape of its nodes: GANGPLUGIN_SHAPE, else the sample.
    - `gangplugin_components`: what `gangplugin serve` runs: GANGPLUGIN_COMPONENTS, else its
      defaults; `gangplugin_args`: more `serve` flags; `gangplugin_replicas`: how many `serve`
      processes elect a leader: GANGPLUGIN_REPLICAS, else 2 (as the Helm chart installs it).
    - `kueue_config`: settings merged into Kueue's Configuration last (a MultiKueue manager's
      `multiKueue`; `multikueue.py` starts a manager and its workers).
    """

    def __init__(
        self,
        state_dir: Path | None = None,
        ports: Ports | None = None,
        log: Callable[[str], None] = print,
        *,
        generic_workload: bool | None = None,
        components: Iterable[str] | None = None,
        kueue_version: str | None = None,
        shape: Path | None = None,
        gangplugin_components: Iterable[str] | None = None,
        gangplugin_args: Iterable[str] | None = None,
        kueue_config: Mapping[str, Any] | None = None,
        gangplugin_replicas: int | None = None,
    ) -> None:
        self.state_dir = (
            state_dir or Path(os.environ.get("GANGPLUGIN_STATE", REPO / ".local" / "cluster"))
        ).resolve()
        self.ports = ports or Ports.from_env()
        self._log = log
        recorded: dict[str, Any] = read_state(self.state_dir).get("options", {})
        env = os.environ
        if generic_workload is None:
            said = env.get(GENERIC_WORKLOAD_ENV)
            generic_workload = said == "1" if said is not None else bool(recorded.get("genericWorkload"))
        if components is None:
            extra = env.get(WITH_ENV)
            components = (
                [*DEFAULT, *_names(extra)] if extra is not None else recorded.get("components", DEFAULT)
            )
        kueue_version = kueue_version or env.get(KUEUE_VERSION_ENV) or recorded.get("kueueVersion")
        kueue_version = kueue_version or versions()["KUEUE_VERSION"]
        shape = shape or Path(env.get(SHAPE_ENV) or recorded.get("shape") or SAMPLE_SHAPE)
        if gangplugin_components is None and "GANGPLUGIN_COMPONENTS" not in env:
            gangplugin_components = recorded.get("gangpluginComponents")
        served = (
            tuple(gangplugin_components)
            if gangplugin_components is not None
            else self._gangplugin_components()
        )
        args = tuple(gangplugin_args if gangplugin_args is not None else recorded.get("gangpluginArgs", ()))
        kueue = dict(kueue_config if kueue_config is not None else recorded.get("kueueConfig", {}))
        replicas = gangplugin_replicas or int(
            env.get(REPLICAS_ENV) or recorded.get("gangpluginReplicas") or DEFAULT_REPLICAS
        )
        self._chosen = choose(components)
        names = tuple(c.name for c in self._chosen)
        self.spec = ClusterSpec(
            state_dir=self.state_dir,
            ports=self.ports,
            components=names,
            kueue_version=kueue_version,
            jobset_version=jobset_version(kueue_version),
            kueue_frameworks=tuple(dict.fromkeys(f for c in self._chosen for f in c.kueue_frameworks)),
            kueue_feature_gates=tuple(dict.fromkeys(g for c in self._chosen for g in c.kueue_feature_gates)),
            generic_workload=generic_workload,
            shape=shape,
            gangplugin_components=served if "gangplugin" in names else (),
            cache=cache_dir(),
            gangplugin_args=args,
            kueue_config=kueue,
            gangplugin_replicas=replicas,
        )
        self._supervisor = Supervisor(
            self.state_dir,
            log,
            options={
                "ports": self.ports.base,
                "components": [c.name for c in self._chosen[len(CONTROL_PLANE) :]],
                "kueueVersion": kueue_version,
                "genericWorkload": generic_workload,
                "shape": str(shape),
                "gangpluginComponents": list(served),
                "gangpluginArgs": list(args),
                "kueueConfig": kueue,
                "gangpluginReplicas": replicas,
            },
        )

    @staticmethod
    def _gangplugin_components() -> tuple[str, ...]:
        """What `gangplugin serve` runs: GANGPLUGIN_COMPONENTS, else what it runs by default and
        the web console (off by default in a cluster; on here, for the developer at the desk)."""
        from gangplugin.server.main import DEFAULT_COMPONENTS

        default = ",".join((*DEFAULT_COMPONENTS, "console"))
        return tuple(_names(os.environ.get("GANGPLUGIN_COMPONENTS", default)))

    # ---- where things are ----------------------------------------------------------------

    @property
    def components(self) -> tuple[str, ...]:
        return self.spec.components

    @property
    def generic_workload(self) -> bool:
        return self.spec.generic_workload

    @property
    def kubeconfig(self) -> Path:
        return self.spec.kubeconfig

    @property
    def pki_dir(self) -> Path:
        return self.spec.pki_dir

    @property
    def extender_clients_dir(self) -> Path:
        return self.spec.extender_clients_dir

    @property
    def log_dir(self) -> Path:
        return self._supervisor.log_dir

    @property
    def state_file(self) -> Path:
        return self._supervisor.state_file

    def extender_tls_config(self) -> dict[str, str]:
        return extender_tls_config(self.spec)

    # ---- processes -----------------------------------------------------------------------

    def running_processes(self) -> dict[str, int]:
        """Recorded processes that still run and are still ours (pids get reused)."""
        return self._supervisor.running()

    def is_running(self) -> bool:
        return self._supervisor.is_running()

    def up(self, *, build: bool = True) -> bool:
        """Start the cluster; False when it was already running (nothing started)."""
        if self.is_running():
            self._log(f"cluster already running (state in {self.state_dir}); `make down` stops it")
            self._keep()
            return False
        if self.running_processes():
            self._log("a previous cluster is half-running; stopping what is left of it")
            self.down()
        binaries = [b for c in self._chosen for b in c.binaries(self.spec)]
        if build:
            upstream.build(
                binaries, self._log, groups=tuple(dict.fromkeys(c.build_group for c in self._chosen))
            )
        upstream.check_binaries(binaries)
        self._check_ports()
        try:
            self._start_all()
        except BaseException:
            self._log("start failed; stopping everything that was started")
            self.down(quiet=True)
            raise
        self._keep()
        return True

    def _keep(self) -> None:
        """From now on a process that exits is started again, as kubelet would (`keeper.py`)."""
        self._supervisor.keep((sys.executable, "-m", "gangplugin.localcluster.keeper", str(self.state_dir)))

    def add(self, *names: str, build: bool = True) -> tuple[str, ...]:
        """Start the optional components `names` on this running cluster, as `up` would have
        with them: their installs and processes, then Kueue installed and started again with
        their integrations on. Returns the names it started (none when all of them run)."""
        new = [n for n in names if n not in self.components]
        if not new:
            return ()
        grown = LocalCluster(
            self.state_dir,
            self.ports,
            self._log,
            generic_workload=self.spec.generic_workload,
            components=[*self.components[len(CONTROL_PLANE) :], *new],
            kueue_version=self.spec.kueue_version,
            shape=self.spec.shape,
        )
        if not self.is_running():
            raise ClusterError(f"the cluster in {self.state_dir} is not running; `make up` first")
        added = [c for c in grown._chosen if c.name in new]
        binaries = [b for c in added for b in c.binaries(grown.spec)]
        if build:
            upstream.build(binaries, self._log, groups=tuple(dict.fromkeys(c.build_group for c in added)))
        upstream.check_binaries(binaries)
        # No check of their ports up front, as `up` makes: on a running cluster a client's
        # connection may hold one for a moment; the supervisor waits for each to be free.
        self.spec, self._chosen, self._supervisor = grown.spec, grown._chosen, grown._supervisor
        t0 = time.monotonic()
        # The supervisor records what already runs before it starts more.
        self._supervisor.stop("kueue")
        kueue = self._component("kueue")
        client = Client.from_kubeconfig(self.kubeconfig, timeout=SETUP_REQUEST_TIMEOUT)
        try:
            # As in `up`: every install at once, then each started in the registry's order.
            with ThreadPoolExecutor(len(added) + 1) as pool:
                installs = [pool.submit(comp.install, self.spec, client) for comp in (*added, kueue)]
                for comp, installed in zip((*added, kueue), installs, strict=True):
                    installed.result()
                    self._start(comp)
                    comp.started(self.spec, client, self._log)
        finally:
            client.close()
        self._log(f"added {', '.join(new)} in {time.monotonic() - t0:.1f}s")
        return tuple(new)

    def _check_ports(self) -> None:
        busy = [
            f"{name} ({port})"
            for comp in self._chosen
            for name, port in comp.listens(self.spec).items()
            if not port_free(port)
        ]
        if busy:
            raise ClusterError(
                f"port in use: {', '.join(busy)}; stop what holds it, or choose other ports with "
                f"GANGPLUGIN_PORT_BASE=<n> (now {self.ports.base})"
            )

    def _start_all(self) -> None:
        t0 = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        credentials.write(self.spec)
        control_plane, rest = self._chosen[: len(CONTROL_PLANE)], self._chosen[len(CONTROL_PLANE) :]
        for comp in control_plane:
            self._start(comp)
        client = Client.from_kubeconfig(self.kubeconfig, timeout=SETUP_REQUEST_TIMEOUT)
        try:
            # Every install at once, from the start: the API server establishes the CRDs of the
            # later components while the earlier ones start.
            with ThreadPoolExecutor(len(rest) or 1) as pool:
                installs = [pool.submit(comp.install, self.spec, client) for comp in rest]
                for comp, installed in zip(rest, installs, strict=True):
                    installed.result()
                    self._start(comp)
                    comp.started(self.spec, client, self._log)
        finally:
            client.close()
        self._log(f"cluster up in {time.monotonic() - t0:.1f}s; export KUBECONFIG={self.kubeconfig}")

    def _start(self, comp: Component) -> None:
        for proc in comp.processes(self.spec):
            self._supervisor.start(proc)

    def process(self, name: str) -> Process | None:
        """The process of component `name` (or "gangplugin-<n>", another gangplugin replica, or
        one of a component's several, "real-node-<node>") as `up` or `restart` starts it (None:
        nothing to run); for a test that runs it otherwise."""
        return self._named_process(name)

    def _named_process(
        self, name: str, *, extender: bool = True, args: tuple[str, ...] = (), lead: bool = True
    ) -> Process | None:
        try:
            comp = self._component(name, extender=extender, args=args, lead=lead)
        except ClusterError:
            for other in self._chosen:
                if (proc := other.process_named(self.spec, name)) is not None:
                    return proc
            raise
        return comp.process(self.spec)

    def _component(
        self, name: str, *, extender: bool = True, args: tuple[str, ...] = (), lead: bool = True
    ) -> Component:
        replica = name.removeprefix("gangplugin-")
        if name == "kube-scheduler":
            return KubeScheduler(extender=extender)
        if name == "gangplugin" or (name != replica and replica.isdigit()):
            return Gangplugin(replica=1 if name == "gangplugin" else int(replica), args=args, lead=lead)
        for comp in self._chosen:
            if comp.name == name:
                return comp
        raise ClusterError(f"{name} is not a component of this cluster; it runs {', '.join(self.components)}")

    def stop_process(self, name: str, kill: signal.Signals = signal.SIGKILL) -> None:
        """Signal one running process, wait (up to 15 s) until it is gone, and forget it."""
        self._supervisor.stop(name, kill)

    def restart(
        self,
        name: str,
        *,
        kill: signal.Signals = signal.SIGKILL,
        extender: bool = True,
        args: tuple[str, ...] = (),
        lead: bool = True,
    ) -> None:
        """Kill one running process (a component's name, or "gangplugin-<n>") and start it again
        (or start it, if it was not running); `extender` chooses kube-scheduler's configuration,
        `args` are more `gangplugin serve` flags, `lead=False` lets replica 1 come back as a
        follower (tests and benchmarks use these). "gangplugin" with `lead` rolls every replica,
        as a changed Deployment does: the others stop cleanly first (a leader among them
        releases the Lease), replica 1 comes back leading with `args`, then they start again
        with them too, as followers."""
        proc = self._named_process(name, extender=extender, args=args, lead=lead)
        if proc is None:
            raise ClusterError(f"{name} has nothing to run")
        others = self.gangplugin_replicas()[1:] if name == "gangplugin" and lead else ()
        for other in others:
            self._supervisor.stop(other, signal.SIGTERM)
        self._supervisor.stop(name, kill)
        self._supervisor.start(proc)
        for other in others:
            replica = self._component(other, args=args).process(self.spec)
            assert replica is not None
            self._supervisor.start(replica)

    def gangplugin_replicas(self) -> tuple[str, ...]:
        """The process names of `gangplugin serve`'s replicas, replica 1 ("gangplugin") first."""
        if not self.spec.gangplugin_components:
            return ()
        n = self.spec.gangplugin_replicas
        return ("gangplugin", *(f"gangplugin-{i}" for i in range(2, n + 1)))

    def keeper(self) -> int | None:
        """The keeper's pid while it runs (`keeper.py`)."""
        return self._supervisor.keeper()

    def recorded_processes(self) -> tuple[str, ...]:
        """Every process the cluster runs, in start order: running, or being started again."""
        return tuple(read_state(self.state_dir).get("processes", {}))

    def restarts(self) -> dict[str, dict[str, Any]]:
        """Per process the keeper started again: `count`, `lastExit` (UTC) and `lastLine` (the
        last line it wrote before it exited)."""
        found: dict[str, dict[str, Any]] = read_state(self.state_dir).get("restarts", {})
        return found

    def apply_file(self, client: Client, path: Path) -> list[dict[str, Any]]:
        """Server-side apply every document of a YAML file (kinds this cluster knows)."""
        return manifests.apply_file(client, path)

    def down(self, *, quiet: bool = False) -> None:
        """Stop every recorded process (TERM, then KILL) and forget the state."""
        self._supervisor.stop_all(quiet=quiet)
        for comp in self._chosen:
            comp.stopped(self.spec)
        # etcd's data goes with the cluster: the next `up` starts clean.
        shutil.rmtree(data_dir(self.spec), ignore_errors=True)


__all__ = [
    "GANGPLUGIN_NAMESPACE",
    "GENERIC_WORKLOAD_API",
    "GENERIC_WORKLOAD_GATE",
    "REPO",
    "ClusterError",
    "LocalCluster",
    "Ports",
    "alive",
    "cache_dir",
    "versions",
]
