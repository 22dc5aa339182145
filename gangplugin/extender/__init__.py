"""kube-scheduler extender: filter, prioritize and the gang bind barrier."""
