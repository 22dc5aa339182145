"""The generated gRPC modules, with a clear message when they have not been generated."""

from __future__ import annotations

try:
    from gangplugin.api.gen import gangs_pb2, gangs_pb2_grpc, plans_pb2, plans_pb2_grpc
except ImportError as err:  # pragma: no cover - depends on the build step
    raise ImportError(
        "gangplugin's gRPC code is not generated: run `make proto` "
        "(or `python -m gangplugin.api.generate`) in the checkout"
    ) from err

__all__ = ["gangs_pb2", "gangs_pb2_grpc", "plans_pb2", "plans_pb2_grpc"]
