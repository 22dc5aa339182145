"""gangplugin: gang scheduling, topology-aware placement and reserved-capacity quotas for Kueue."""

__version__ = "0.1.0"
