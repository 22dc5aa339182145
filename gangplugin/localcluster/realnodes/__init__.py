"""The local cluster's real nodes (GANGPLUGIN_WITH=real-nodes): real kubelets, each with its own
containerd, runc and CNI bridge, in a mount namespace of its own, a fake-GPU device plugin each,
and the host's Service routing (kube-proxy) and cluster DNS (CoreDNS, a Deployment on them).

`pool` plans the nodes (names, labels, addresses, ports, directories) from their
LocalClusterShape; `network` and `cgroups` hold the host state a pool makes and removes;
`configs` writes each node's containerd, CNI and kubelet files; `runner` is a node's process;
`deviceplugin` its GPU plugin over the kubelet's device-plugin API; `images` builds the images the
nodes load. `components/real_nodes.py` is the component that starts all of it.
"""
