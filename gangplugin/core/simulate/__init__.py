"""The capacity simulator: a job trace replayed over virtual time on a cluster shape (pure).

Every decision comes from the code the controllers run, over one `Snapshot` built once and kept
current with `charge`/`release` (bind/unbind), never rebuilt per event:

- Kueue reserves quota in priority order, then arrival order (BestEffortFIFO); without
  TrainingPlans quota is unlimited, with them it is `queue_quota` of the plans at that instant
  (GPUs);
- each admission pass decides the quota-reserved gangs in the order of `admission_queue`, each
  through the admission check's own gate (`core.gate`: Sequential mode, `gang_drain` where
  plans feed the queue, placement `place` with the GangPolicy's spares, off the domains held
  for other gangs' preemptions and reserved for other gangs, `core.reservation`), and admits
  with `charge`; a gang that has waited the GangPolicy's `reservation.afterWaiting` gets a
  domain reserved, and the jobs' declared run times (`max_runtime`) say who may backfill it;
- where the simulated ClusterQueue preempts (`Settings.preemption`, Kueue's `spec.preemption`;
  Kueue's default never does), a gang that does not fit preempts as the check does: victims
  from `find_victims`, evicted whole after the pass (each resumes later with the run time it
  had left) and requeued, their domain held for the preemptor for its readyTimeout;
- pods become Ready `startup_seconds` after admission; a gang slower than the readiness timeout
  (`watch`) is requeued with `requeue_decision`'s backoff or deactivated after its limit;
- a running gang that would outlive its block is evicted at the termination start (`gang_drain`)
  and requeued; it resumes from its checkpoint with the run time it had left.

Policies differ only in where a gang goes: `gangplugin` (ours), `gangplugin-no-reservation`
(ours without reservation, shown when the GangPolicy reserves), `best-fit` (no spares, no
climbing above the preferred level, close to Kueue's TAS BestFit), `first-fit` (topology
blind: the first nodes by name with room) and, on small clusters, `optimal` (each pass admits
the packing optimum of the first `MAX_GANGS` waiting gangs, `core/optimal.py`, with our spares;
it ignores Sequential mode). `gangplugin` and `best-fit` preempt; `first-fit` and `optimal`,
packing baselines, never do. The replay is deterministic: events at one instant are applied in
the order they were scheduled, then one admission pass runs (a pass that preempted is followed
by another at the same instant, once the victims are gone).

The modules: `model` (jobs, settings, outcomes), `ways` (the compared policies), `events`
(named events in time order), `replay` (`Replayer`, the event loop), `state` (a job's
bookkeeping, the admitted jobs as preemption reads them), `stranded` (GPUs left too small).
"""

from gangplugin.core.simulate.model import (
    CLUSTER_QUEUE,
    GPU,
    NAMESPACE,
    Job,
    Outcome,
    Replay,
    Sample,
    Settings,
    percentile,
    scaled,
)
from gangplugin.core.simulate.replay import Replayer, replay
from gangplugin.core.simulate.ways import NO_RESERVATION, POLICIES, first_fit

__all__ = [
    "CLUSTER_QUEUE",
    "GPU",
    "NAMESPACE",
    "NO_RESERVATION",
    "POLICIES",
    "Job",
    "Outcome",
    "Replay",
    "Replayer",
    "Sample",
    "Settings",
    "first_fit",
    "percentile",
    "replay",
    "scaled",
]
