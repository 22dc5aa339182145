"""The generated gRPC modules (committed; `make proto` regenerates them from proto/)."""

from __future__ import annotations

from gangplugin.api.gen import gangs_pb2, gangs_pb2_grpc, plans_pb2, plans_pb2_grpc

__all__ = ["gangs_pb2", "gangs_pb2_grpc", "plans_pb2", "plans_pb2_grpc"]
