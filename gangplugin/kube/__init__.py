"""Kubernetes I/O: client setup, watch caches, CRD types, object conversion."""
