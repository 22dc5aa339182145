"""One rank of a distributed job: a rendezvous at rank 0 and an all-reduce over TCP, with the
standard library alone (the real nodes' worker image; docs/real-nodes.md says why not torch).

The environment is what Kubeflow's training-operator gives a PyTorchJob's pods: RANK, WORLD_SIZE,
MASTER_ADDR (the master's Service) and MASTER_PORT. Rank 0 listens there; every other rank
connects, says its rank, and waits until all WORLD_SIZE ranks have met (rank 0 sends the roster,
a `generation` number). Then, every STEP_SECONDS, rank 0 asks each rank for its value (its rank +
1), sums them and sends the sum back: each rank prints every step's sum, which is
WORLD_SIZE * (WORLD_SIZE + 1) / 2 when every rank took part. A rank that stops answering (its node
lost) ends the generation: rank 0 waits for a full roster again, the others reconnect, as an
elastic launcher restarts its workers; the process itself never restarts.

Readiness: GET :READY_PORT/ready answers 200 once the rank serves (rank 0 listening), and never
on the rank NEVER_READY_RANK names (a job's ranks share one pod template: a test picks one).
Every event is one JSON line on stdout with the wall-clock time `t`: start, met, step, lost.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
MASTER = os.environ.get("MASTER_ADDR", "localhost")
PORT = int(os.environ.get("MASTER_PORT", "23456"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "1"))
STEPS = int(os.environ.get("STEPS", "0"))  # 0: run until stopped
READY_PORT = int(os.environ.get("READY_PORT", "8080"))
NEVER_READY = os.environ.get("NEVER_READY_RANK") == str(RANK)
# A rank that says nothing for this long is gone (a lost node sends no reset).
TIMEOUT = float(os.environ.get("PEER_TIMEOUT", "10"))
ready = threading.Event()


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "rank": RANK, "t": time.time(), **fields}), flush=True)


class Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/ready" and ready.is_set() and not NEVER_READY
        self.send_response(200 if ok else 503)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: quiet
        pass


class Peer:
    """One newline-delimited JSON connection."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(TIMEOUT)
        self.sock, self.file = sock, sock.makefile("rb")

    def send(self, **message: Any) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def recv(self) -> dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise ConnectionError("peer closed the connection")
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def gather(listener: socket.socket) -> dict[int, Peer]:
    """Rank 0: accept ranks until all have come; a rank connecting again replaces itself. The
    waiting ones hear from rank 0 every second, so that they can tell it is alive."""
    peers: dict[int, Peer] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    while len(peers) < WORLD - 1:
        for _key, _ in sel.select(timeout=1.0):
            conn, _addr = listener.accept()
            peer = Peer(conn)
            try:
                rank = int(peer.recv()["rank"])
            except (OSError, ValueError, KeyError):
                peer.close()
                continue
            if rank in peers:
                peers[rank].close()
            peers[rank] = peer
        for rank, peer in list(peers.items()):
            try:
                peer.send(waiting=len(peers) + 1)
            except OSError:
                peer.close()
                del peers[rank]
    sel.close()
    return peers


def lead() -> None:
    listener = socket.create_server(("0.0.0.0", PORT), backlog=WORLD)
    ready.set()
    generation = 0
    while True:
        peers = gather(listener)
        emit("met", generation=generation, world=WORLD)
        try:
            for peer in peers.values():
                peer.send(met=generation)
            step = 0
            while STEPS == 0 or step < STEPS:
                for peer in peers.values():
                    peer.send(step=step)
                total = RANK + 1 + sum(int(peer.recv()["value"]) for peer in peers.values())
                for peer in peers.values():
                    peer.send(step=step, sum=total)
                emit("step", generation=generation, step=step, sum=total)
                step += 1
                time.sleep(STEP_SECONDS)
            return
        except (OSError, ValueError, KeyError) as err:
            emit("lost", generation=generation, error=repr(err))
            for peer in peers.values():
                peer.close()
            generation += 1


def follow() -> None:
    ready.set()
    while True:
        try:
            peer = Peer(socket.create_connection((MASTER, PORT), timeout=TIMEOUT))
        except OSError:  # rank 0 (or its name) not there yet
            time.sleep(1)
            continue
        generation = None
        try:
            peer.send(rank=RANK)
            while True:
                message = peer.recv()
                if "met" in message:
                    generation = message["met"]
                    emit("met", generation=generation, world=WORLD)
                elif "sum" in message:
                    emit("step", generation=generation, step=message["step"], sum=message["sum"])
                    if STEPS and message["step"] + 1 >= STEPS:
                        return
                elif "step" in message:
                    peer.send(value=RANK + 1)
        except (OSError, ValueError, KeyError) as err:
            emit("lost", generation=generation, error=repr(err))
            time.sleep(1)
        finally:
            peer.close()


def main() -> None:
    server = ThreadingHTTPServer(("0.0.0.0", READY_PORT), Ready)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    emit(
        "start",
        world=WORLD,
        pod=os.environ.get("POD_NAME"),
        node=os.environ.get("NODE_NAME"),
        gpus=os.environ.get("NVIDIA_VISIBLE_DEVICES"),
    )
    (lead if RANK == 0 else follow)()


if __name__ == "__main__":
    main()
    sys.exit(0)
