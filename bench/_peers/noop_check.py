"""The floor of Kueue's AdmissionCheck contract: a check controller that decides nothing and
answers Ready at once. The bench's `kueue-noop-check` system runs it (as a process of its own,
as gangplugin's controller is one) in place of gangplugin's, so the hops a check costs (Kueue
lists it, the controller writes Ready, Kueue writes Admitted) are measured with no decision in
them, on the same run as gangplugin and Kueue TAS.

It watches every Workload; one whose entry of CHECK is Pending while its quota is reserved gets
the entry Ready (server-side apply of that entry alone, as gangplugin's check writes it), from
a pool of writers so that no write waits for another. It also keeps the AdmissionCheck Active.

Run (from bench/): python -m _peers.noop_check KUBECONFIG, until SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _peers.watch import follow
from gangplugin.kube.client import WORKLOADS, ApiError, Client
from gangplugin.kube.resources import ADMISSION_CHECKS

CONTROLLER = "bench.gangplugin.io/noop"
CHECK = "bench-noop"
FIELD_MANAGER = "bench-noop-check"
WRITERS = 8


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def waiting(obj: dict[str, Any]) -> bool:
    """Whether the Workload waits for this check: its entry Pending, its quota reserved."""
    status = obj.get("status") or {}
    reserved = any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return reserved and any(
        c.get("name") == CHECK and c.get("state") == "Pending" for c in status.get("admissionChecks") or []
    )


class NoopCheck:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.answered: set[str] = set()  # Workloads whose Ready is written and not yet seen
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(WRITERS)
        self._local = threading.local()

    def _client(self) -> Client:
        """One client per writer thread (a connection shared by threads breaks under load)."""
        client: Client | None = getattr(self._local, "client", None)
        if client is None:
            base = self.client
            client = self._local.client = Client(base.server, base.ssl_context, base.credentials)
        return client

    def see(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        with self.lock:
            if kind == "DELETED" or not waiting(obj):
                self.answered.discard(key)  # Ready seen (or gone): a later Pending is answered again
                return
            if key in self.answered:
                return
            self.answered.add(key)
        self.pool.submit(self.ready, meta["namespace"], meta["name"])

    def ready(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "status": {
                "admissionChecks": [
                    {"name": CHECK, "state": "Ready", "message": "no-op", "lastTransitionTime": _now()}
                ]
            },
        }
        try:
            self._client().request(
                "PATCH",
                WORKLOADS.path(namespace, name) + "/status",
                body=body,
                content_type="application/apply-patch+yaml",
                params={"fieldManager": FIELD_MANAGER, "force": "true"},
            )
        except ApiError as err:
            if err.status != 404:
                print(f"noop-check: {namespace}/{name}: {err}", file=sys.stderr, flush=True)
                with self.lock:
                    self.answered.discard(f"{namespace}/{name}")  # its next event asks again

    def activate(self) -> None:
        """The AdmissionCheck's Active condition, as a check controller keeps it."""
        cond = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "the bench's no-op check answers Ready at once",
            "lastTransitionTime": _now(),
        }
        self.client.patch(ADMISSION_CHECKS, CHECK, {"status": {"conditions": [cond]}}, subresource="status")


def main() -> None:
    client = Client.from_kubeconfig(sys.argv[1])
    check = NoopCheck(client)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + 120
    while True:  # the bench creates the AdmissionCheck after starting this
        try:
            check.activate()
            break
        except ApiError as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    thread = threading.Thread(target=follow, args=(client, WORKLOADS, "", check.see, stop), daemon=True)
    thread.start()
    stop.wait()


if __name__ == "__main__":
    main()
