"""The MultiKueue dispatcher: on a manager cluster, it nominates for each gang the worker cluster
where it fits whole now (Kueue's External dispatcher mode; the choice is `core.dispatch`)."""
