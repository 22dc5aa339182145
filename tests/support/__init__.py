"""The one home of what the tests, the benchmarks and the soak share; never a test module.

The suites (tests/unit, tests/e2e) hold only tests and their pytest fixtures, the soak
(tests/soak) is a program of its own, and everything they and bench/ share is here, imported the
same way everywhere: `from tests.support.<module> import ...` (pytest finds the package from the
checkout's root; a script in bench/ puts that root on sys.path first). The home imports none of
the suites; tests/unit/test_support_home.py holds those rules, and mypy checks the home strictly.

Objects and waiting, for every suite:
- `objects`: one builder per kind of object, as plain JSON (Jobs, pods, nodes, Workloads and their
  parts, GangPolicies, AdmissionChecks, queues, flavors, Topologies, TrainingPlans);
- `kube`: unique names, `wait_until`/`wait_for`, reading state back, `gang_queues`;
- `nodes`: a kwok node failed as a dead kubelet leaves it, and healed;
- `cli`: gangctl run as a separate process, its output read line by line;
- `manifests`: the install's manifests rendered by the real kubectl (kustomize) and helm.

The e2e suite's: `cluster` (the session's cluster), `gangs` (a gang's Job submitted and what came
of it), `preemption`, `jobkinds`, `multikueue`, `scrape` (/metrics), `leases`, `grpcauth`,
`containers` and `base_install` (the in-cluster install put to work).

The unit suite's fakes: `caches` (GangService and PlanService over caches fed plain objects),
`extender` (the extender's harness), `fakeapi`, `fakecluster`, `core` (core values).
"""
