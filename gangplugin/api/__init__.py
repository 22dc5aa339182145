"""gRPC API: servicers over the core and the Kubernetes API (PlanService for now)."""
