"""A TCP proxy in front of kube-apiserver that, while `slow` is set, holds every chunk a client
sends for 1-3 s before passing it on: each API call of a client that goes through it (TLS passes
through untouched, so its handshake is slowed too) takes 1-3 s longer. The soak points
`gangplugin serve`'s kubeconfig at it for the whole run, and its fault turns the delay on for a
while: a slow kube-apiserver, as a loaded etcd makes it, without slowing the other components."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from pathlib import Path

import yaml

PORT_OFFSET = 449  # beside kube-apiserver's 443, free in every local cluster's registry
DELAY = (1.0, 3.0)


class SlowProxy:
    def __init__(self, listen: int, upstream: int, seed: int) -> None:
        self.listen, self.upstream = listen, upstream
        self.slow = threading.Event()
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-slow-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the slow proxy did not listen on 127.0.0.1:{self.listen}")

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def kubeconfig(self, cluster_kubeconfig: Path, path: Path) -> Path:
        """`cluster_kubeconfig` with its server at this proxy (the certificate names 127.0.0.1)."""
        config = yaml.safe_load(cluster_kubeconfig.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://127.0.0.1:{self.listen}"
        path.write_text(yaml.safe_dump(config))
        return path

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.listen))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            self._pipe(client_r, up_w, delayed=True), self._pipe(up_r, client_w, delayed=False)
        )

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, delayed: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await src.read(65536):
                if delayed and self.slow.is_set():
                    await asyncio.sleep(self._rng.uniform(*DELAY))
                dst.write(chunk)
                await dst.drain()
        with contextlib.suppress(OSError):
            dst.close()
