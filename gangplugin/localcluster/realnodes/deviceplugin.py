"""A real node's `nvidia.com/gpu`: a device plugin over the kubelet's device-plugin API (v1beta1,
gRPC on unix sockets in /var/lib/kubelet/device-plugins/), with fake devices. The kubelet counts
them into the node's capacity, gives each container the devices it asked for through `Allocate`
(never one device to two containers), and the container sees them as NVIDIA_VISIBLE_DEVICES, as
with NVIDIA's plugin. The path is the real one; only the devices are not.

The kubelet removes every plugin socket when it starts, and plugins register again: `serve`
watches for that and does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from gangplugin.localcluster.realnodes.gen import deviceplugin_pb2 as pb
from gangplugin.localcluster.realnodes.gen import deviceplugin_pb2_grpc as rpc

RESOURCE = "nvidia.com/gpu"
API_VERSION = "v1beta1"
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = PLUGIN_DIR / "kubelet.sock"
ENDPOINT = "gangplugin-gpu.sock"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def device_ids(node: str, count: int) -> list[str]:
    return [f"{node}-gpu{i}" for i in range(count)]


class FakeGpus(rpc.DevicePluginServicer):
    def __init__(self, node: str, count: int, stop: threading.Event) -> None:
        self.devices = [pb.Device(ID=i, health="Healthy") for i in device_ids(node, count)]
        self._stop = stop

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        yield pb.ListAndWatchResponse(devices=self.devices)
        # The devices never change; the stream stays open while the kubelet holds it.
        while context.is_active() and not self._stop.wait(1.0):
            pass

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        known = {d.ID for d in self.devices}
        responses = []
        for container in request.container_requests:
            unknown = [d for d in container.devices_ids if d not in known]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices {unknown}")
            responses.append(pb.ContainerAllocateResponse(envs={VISIBLE: ",".join(container.devices_ids)}))
        return pb.AllocateResponse(container_responses=responses)

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        return pb.PreferredAllocationResponse()

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


def _register() -> None:
    with grpc.insecure_channel(f"unix://{KUBELET_SOCKET}") as channel:
        rpc.RegistrationStub(channel).Register(
            pb.RegisterRequest(version=API_VERSION, endpoint=ENDPOINT, resource_name=RESOURCE),
            timeout=10,
        )


def serve(node: str, count: int, stop: threading.Event, log: Path) -> None:
    """Serve `count` fake GPUs of `node` and keep them registered with the kubelet until `stop`;
    run in a thread of the node's runner (in the node's mount namespace)."""
    socket = PLUGIN_DIR / ENDPOINT
    with log.open("a") as out:
        while not stop.is_set():
            if not KUBELET_SOCKET.exists():
                stop.wait(0.5)
                continue
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            rpc.add_DevicePluginServicer_to_server(FakeGpus(node, count, stop), server)
            socket.unlink(missing_ok=True)
            server.add_insecure_port(f"unix://{socket}")
            server.start()
            kubelet = KUBELET_SOCKET.stat().st_ino
            try:
                _register()
            except grpc.RpcError as err:  # the kubelet not serving yet: again in a moment
                print(f"{time.strftime('%H:%M:%S')} registration failed: {err.code()}", file=out, flush=True)
                server.stop(grace=0)
                stop.wait(1.0)
                continue
            print(
                f"{time.strftime('%H:%M:%S')} registered {count} x {RESOURCE} of {node}", file=out, flush=True
            )
            # Until the kubelet comes back (a new kubelet.sock) or removes our socket.
            while not stop.wait(1.0):
                try:
                    if KUBELET_SOCKET.stat().st_ino != kubelet or not socket.exists():
                        break
                except FileNotFoundError:
                    break
            server.stop(grace=1)
