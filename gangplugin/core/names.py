"""Names shared by every part of gangplugin: API group, labels, annotations, controller names."""

from __future__ import annotations

GROUP = "gangplugin.io"
API_VERSION = f"{GROUP}/v1alpha1"

# Set on a gang's pods (through Kueue podSetUpdates, or by a user on plain pods).
GANG_LABEL = f"{GROUP}/gang"
GANG_SIZE_ANNOTATION = f"{GROUP}/gang-size"

# How an admitted gang's placement reaches its pods (GangPolicy `spec.bindMode`), stamped on
# its pods through podSetUpdates as a label, so the pod webhook's objectSelector can pick the
# Ungate and PodGroup pods and a person can list them. They are created behind PLACEMENT_GATE; the
# ungater pins each to its node (nodeSelector kubernetes.io/hostname) and removes the gate.
BIND_MODE_LABEL = f"{GROUP}/bind-mode"
PLACEMENT_GATE = f"{GROUP}/placement"

# Pod-template annotations a user may set.
REQUIRED_TOPOLOGY_ANNOTATION = f"{GROUP}/required-topology"
PREFERRED_TOPOLOGY_ANNOTATION = f"{GROUP}/preferred-topology"
MAX_RUNTIME_ANNOTATION = f"{GROUP}/max-runtime"
# "true": the job checkpoints, so a gang waiting for a domain reserved for it may have it
# evicted early (GangPolicy spec.reservation.maxCheckpointableEvictions, where Kueue's
# ClusterQueue rules allow preempting it).
CHECKPOINTABLE_ANNOTATION = f"{GROUP}/checkpointable"
# Slices: each consecutive group of `slice-size` pods of a podset inside one domain of the slice
# level; the gang-level annotations above then hold all slices together. Kueue's own
# podset-slice annotations are read the same way (a preferred slice level is ours only).
SLICE_SIZE_ANNOTATION = f"{GROUP}/slice-size"
SLICE_REQUIRED_TOPOLOGY_ANNOTATION = f"{GROUP}/slice-required-topology"
SLICE_PREFERRED_TOPOLOGY_ANNOTATION = f"{GROUP}/slice-preferred-topology"
# Written by the gang check (a podSetUpdate of a gang it admitted in slices, so its pods carry
# it): the domain of each slice at the slice level, in slice order ("us-3,us-7"). Its promise
# and the ungater's plan place the slices there first, so all three count them in one place.
SLICE_DOMAINS_ANNOTATION = f"{GROUP}/slice-domains"
KUEUE_SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
# Kueue's own topology request on a job's pod template (Kueue copies it to the Workload's
# podset topologyRequest, which the gang check reads as it reads ours).
KUEUE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
#: Every pod annotation that says where a gang's pods go.
TOPOLOGY_ANNOTATIONS = (
    REQUIRED_TOPOLOGY_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_SIZE_ANNOTATION,
    KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
)

# The AdmissionCheck controllerName Kueue routes our checks by.
ADMISSION_CHECK_CONTROLLER = f"{GROUP}/gang"

# Training plans: the ClusterQueue annotation recording which quotas plans manage (and the value
# each had before), and the pod annotation carrying the end (RFC 3339) of the block a gang runs
# on, set by the gang check through podSetUpdates so a trainer can checkpoint before it.
PLAN_QUOTA_ANNOTATION = f"{GROUP}/plan-quota"
BLOCK_END_ANNOTATION = f"{GROUP}/block-end-time"
# The reason (Events, eviction metrics) when the gang check requeues a gang for the next block.
PLAN_DRAINING_REASON = "PlanDraining"

# On the pod of the `gangplugin serve` replica that holds the leader Lease (in-cluster): the
# extender Service selects it, so kube-scheduler reaches the one replica running the extender.
LEADER_LABEL = f"{GROUP}/leader"

# The TrainingPlan condition that says its capacity feeds its ClusterQueue.
PLAN_ACCEPTED_CONDITION = "Accepted"
# The kubeconfig cluster extension that tells gangctl where gangplugin's gRPC API is:
# {server: host:port, client-certificate-server: host:port (for client-certificate users),
#  certificate-authority or certificate-authority-data: the CA of its serving certificate}.
GRPC_EXTENSION = f"{GROUP}/grpc"

# Preemption: on the preempting Workload, the domain held for it and the gangs it evicts (JSON;
# the state a restarted controller resumes from); the Evicted condition's reason on a victim,
# as Kueue's own preemption writes it.
PREEMPTION_ANNOTATION = f"{GROUP}/preemption"
# On a Workload the watchdog requeued after a timeout: until when (RFC 3339) its backoff lasts.
# The watchdog evicts it at once with Kueue's requeueState.requeueAt at that instant (Kueue keeps
# it out of the queue until then: no quota, no nodes); the check holds it back too, should it get
# quota sooner. A drain or a preemption requeues with no backoff.
BACKOFF_UNTIL_ANNOTATION = f"{GROUP}/backoff-until"
# On a Workload whose Kueue PodsReady says that its job runs, not that its pods are Ready
# (Kubeflow's kinds, PyTorchJob and MPIJob among them: Kueue reads the job's Running condition):
# when (RFC 3339) the watchdog first saw every pod of the gang Ready since its admission. It stands
# for PodsReady in the readiness watch of those gangs: with Kueue's, a rank whose readiness probe
# never passed was never timed out (seen on real nodes).
READY_AT_ANNOTATION = f"{GROUP}/ready-at"
PREEMPTED_REASON = "Preempted"
# Reservation for big gangs: on a gang that has waited longer than its GangPolicy's
# spec.reservation.afterWaiting, the domain reserved for it (JSON; the state a restarted
# controller resumes from). Only gangs that end before its expected start (or of higher
# priority) are admitted into that domain meanwhile.
RESERVATION_ANNOTATION = f"{GROUP}/reservation"
# The Warning Event (and check message) on a Workload held for an unknown key of ours on a pod
# template (core.keys).
UNKNOWN_KEY_REASON = "UnknownKey"
# The Warning Event (and check message) on a Workload whose gang can never start whole here
# (larger than every domain of its required level, or than the cluster).
NEVER_WHOLE_REASON = "CannotStartWhole"
# MultiKueue (on a manager cluster): the dispatcherName that hands the choice of a worker to
# gangplugin (Kueue's External dispatcher mode), and what it records on the manager's Workload
# (core.dispatch.DispatchRecord as JSON).
DISPATCHER_NAME = f"{GROUP}/dispatcher"
DISPATCH_ANNOTATION = f"{GROUP}/dispatch"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
