"""The local cluster: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
Kueue and kwok, built from pinned sources and run as plain processes (DESIGN.md §5)."""
