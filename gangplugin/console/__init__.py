"""The console: `gangplugin serve --components ...,console` serves a web console of the cluster's
gangs (the map of UltraServers, gangs and why they wait, quota and plans, the GangPolicies) to
users the API server authenticates, showing each only what Kubernetes lets them read."""
