"""The soak: a seeded random stream of gangs on the local cluster while a fault injector breaks
things, checked by an independent observer (bench/soak.py runs it for N minutes,
tests/e2e/test_soak.py for a few).

- `observer`: the invariants, as a pure state machine over what the API showed (imports nothing
  of gangplugin: tests/unit/test_soak_observer.py scans its imports);
- `apiwatch`: the observer's own small API client (httpx), which lists and watches pods,
  Workloads and nodes into it and samples the RSS of the `gangplugin serve` processes;
- `stream`: the seeded gangs (sizes from the Kalos trace's shape) and the thread submitting them;
- `faults`: the seeded fault plan and the injector that carries it out;
- `queues`: the GangPolicies, AdmissionChecks, ClusterQueues and TrainingPlan the soak runs on;
- `run`: one soak from start to drain, and its report.
"""
