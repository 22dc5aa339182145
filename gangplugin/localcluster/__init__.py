"""The local cluster: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler, Kueue,
JobSet, kwok and gangplugin, built from pinned sources and run as plain processes, one module per
component (docs/development.md, "The local cluster")."""
