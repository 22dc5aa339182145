"""The jobs Kueue integrates, as raw objects -> the gang Kueue would make of them.

Each kind's podsets are derived as Kueue v0.17's integration for it derives them
(`pkg/controller/jobs/<kind>/`): the same podset names, counts, order and pod templates, with the
templates' annotations (ours and Kueue's topology ones) read as the Workload's topology request.
So `gangctl place` on a job answers what the gang check will decide for the Workload Kueue makes
of it. The admission controller reads Workloads (`records.gang_from_k8s`); a Workload file is
taken here too.

Fields are paths in the files they came from: `where` and `runtime_where` (e.g. "job.yaml: ")
prefix every field of the job and of a TrainJob's runtime, so a problem in either names its file.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.core.names import KUEUE_PREFERRED_TOPOLOGY_ANNOTATION, KUEUE_REQUIRED_TOPOLOGY_ANNOTATION
from gangplugin.core.placement import Gang, PodSet
from gangplugin.kube import records
from gangplugin.kube.records import _list, _map  # the package's field-checked access

#: Kueue's limit on a Workload's podsets (`spec.podSets` MaxItems).
MAX_PODSETS = 8


@dataclass(frozen=True, slots=True)
class JobKind:
    """A kind as kubectl names it (`KIND[.GROUP]/NAME`) and as ownerReferences carry it."""

    kind: str
    group: str
    versions: tuple[str, ...]
    plural: str
    short_names: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.kind.lower(), self.plural, *self.short_names)

    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" for v in self.versions)


JOB = JobKind("Job", "batch", ("v1",), "jobs")
JOBSET = JobKind("JobSet", "jobset.x-k8s.io", ("v1alpha2",), "jobsets")
PYTORCHJOB = JobKind("PyTorchJob", "kubeflow.org", ("v1",), "pytorchjobs")
TRAINJOB = JobKind("TrainJob", "trainer.kubeflow.org", ("v1alpha1",), "trainjobs")
LEADERWORKERSET = JobKind(
    "LeaderWorkerSet", "leaderworkerset.x-k8s.io", ("v1",), "leaderworkersets", ("lws",)
)
RAYJOB = JobKind("RayJob", "ray.io", ("v1",), "rayjobs")
RAYCLUSTER = JobKind("RayCluster", "ray.io", ("v1",), "rayclusters")
#: The kinds whose Workloads Kueue makes (and owns them: the Workload's ownerReference).
JOB_KINDS = (JOB, JOBSET, PYTORCHJOB, TRAINJOB, LEADERWORKERSET, RAYJOB, RAYCLUSTER)
WORKLOAD = JobKind(
    "Workload",
    "kueue.x-k8s.io",
    ("v1beta1", "v1beta2"),
    "workloads",
    ("kwl", "kueueworkload", "kueueworkloads"),
)


def kind_named(text: str) -> JobKind | None:
    """The kind `text` names as kubectl takes it: singular, plural or short name, any case,
    optionally `.group` (`job`, `jobs.batch`, `lws`, `pytorchjob.kubeflow.org`)."""
    name, _, group = text.lower().partition(".")
    for kind in (*JOB_KINDS, WORKLOAD):
        if name in kind.names and group in ("", kind.group):
            return kind
    return None


def closest_kind(text: str) -> str | None:
    names = [n for k in (*JOB_KINDS, WORKLOAD) for n in k.names]
    close = difflib.get_close_matches(text.lower().partition(".")[0], names, n=1)
    return close[0] if close else None


@dataclass(frozen=True, slots=True)
class PodSetSource:
    """Where a podset came from: the path of its pod template and of its pod count."""

    template: str
    count: str


@dataclass(frozen=True, slots=True)
class JobGang:
    """The gang, and each podset's source (by podset index) to name fields in the files."""

    gang: Gang
    sources: tuple[PodSetSource, ...]

    def field(self, core_field: str) -> str:
        """A field the core names on the gang (`podSets[1].template.metadata...`, `podSets[1].count`)
        as the path in the file it came from."""
        head, sep, rest = core_field.partition("].")
        if core_field.startswith("podSets[") and sep and head[8:].isdigit():
            i = int(head[8:])
            if i < len(self.sources):
                if rest == "count":
                    return self.sources[i].count
                if rest.startswith("template"):
                    return self.sources[i].template + rest.removeprefix("template")
        return core_field


@dataclass(frozen=True, slots=True)
class _Raw:
    name: str
    count: object
    template: object
    template_field: str
    count_field: str


def _count(value: object, field: str, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(field, f"{value!r} is not a whole number >= 0")
    return value


def _kueue_topology(template: object, field: str) -> Mapping[str, Any]:
    """The topology request Kueue builds from the template's `kueue.x-k8s.io/podset-*-topology`
    annotations (ours, and Kueue's slice ones, are read from the template itself)."""
    meta = _map(_map(template, field).get("metadata"), f"{field}.metadata")
    ann = _map(meta.get("annotations"), f"{field}.metadata.annotations")
    request = {
        "required": ann.get(KUEUE_REQUIRED_TOPOLOGY_ANNOTATION),
        "preferred": ann.get(KUEUE_PREFERRED_TOPOLOGY_ANNOTATION),
    }
    return {k: v for k, v in request.items() if v}


def _gang(raws: list[_Raw], name: str, where: str) -> JobGang:
    """The podsets Kueue would put in the Workload; podsets of no pods are left out (they hold
    nothing), and a job of no pods at all is an error."""
    podsets: list[PodSet] = []
    sources: list[PodSetSource] = []
    seen: dict[str, str] = {}
    for raw in raws:
        if raw.count == 0:
            continue
        if raw.name in seen:
            raise InputError(raw.template_field, f"podset name {raw.name!r} is also {seen[raw.name]}'s")
        seen[raw.name] = raw.template_field
        topology = _kueue_topology(raw.template, raw.template_field)
        podsets.append(
            records.podset_from_template(
                raw.name, raw.count, raw.template, raw.template_field, raw.count_field, topology
            )
        )
        sources.append(PodSetSource(raw.template_field, raw.count_field))
    if not podsets:
        raise InputError(f"{where}spec", "the job has no pods (every pod count is 0)")
    if len(podsets) > MAX_PODSETS:
        raise InputError(
            f"{where}spec", f"{len(podsets)} podsets; a Kueue Workload holds at most {MAX_PODSETS}"
        )
    return JobGang(Gang(tuple(podsets), name), tuple(sources))


# -- the kinds ----------------------------------------------------------------------------------


def _job_count(job_spec: Mapping[str, Any], field: str) -> int:
    """A Job's pods at once: parallelism (default 1), fewer when completions is smaller."""
    parallelism = _count(job_spec.get("parallelism"), f"{field}.parallelism")
    completions = _count(job_spec.get("completions"), f"{field}.completions", parallelism)
    return min(parallelism, completions)


def _job(spec: Mapping[str, Any], p: str) -> list[_Raw]:
    count = _job_count(spec, f"{p}spec")
    return [_Raw("main", count, spec.get("template"), f"{p}spec.template", f"{p}spec.parallelism")]


def _replicated_jobs(
    jobs: object,
    field: str,
    counts: Mapping[int, int] | None = None,
    count_fields: Mapping[int, str] | None = None,
) -> list[_Raw]:
    """A JobSet's podsets (`field`: the path of its replicatedJobs): one per replicatedJob,
    replicas x its Job's pods (`counts` overrides the pods of the Job at an index, as the
    trainer sets them)."""
    counts, count_fields = counts or {}, count_fields or {}
    out = []
    for i, rj in enumerate(_list(jobs, field)):
        f = f"{field}[{i}]"
        m = _map(rj, f)
        name = m.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{f}.name", "each replicatedJob needs a name")
        job_spec = _map(_map(m.get("template"), f"{f}.template").get("spec"), f"{f}.template.spec")
        replicas = _count(m.get("replicas"), f"{f}.replicas")
        per = counts[i] if i in counts else _job_count(job_spec, f"{f}.template.spec")
        count_field = count_fields.get(i) or (
            f"{f}.replicas" if per == 1 else f"{f}.template.spec.parallelism"
        )
        template = job_spec.get("template")
        out.append(_Raw(name, replicas * per, template, f"{f}.template.spec.template", count_field))
    if not out:
        raise InputError(field, "lists no replicatedJobs")
    return out


def _jobset(spec: Mapping[str, Any], p: str) -> list[_Raw]:
    return _replicated_jobs(spec.get("replicatedJobs"), f"{p}spec.replicatedJobs")


def _replica_specs(spec: Mapping[str, Any], p: str, field: str, order: tuple[str, ...]) -> list[_Raw]:
    """A Kubeflow training-operator job: one podset per replica type in Kueue's order, named in
    lower case, `replicas` (default 1) pods each. Type names are matched in any case, as the
    operator's defaulting writes them in CamelCase."""
    specs = _map(spec.get(field), f"{p}spec.{field}")
    by_type = {str(k).lower(): (str(k), v) for k, v in specs.items()}
    unknown = sorted(set(by_type) - {t.lower() for t in order})
    if unknown:
        raise InputError(f"{p}spec.{field}.{by_type[unknown[0]][0]}", f"is not one of {', '.join(order)}")
    out = []
    for rtype in order:
        if rtype.lower() not in by_type:
            continue
        key, value = by_type[rtype.lower()]
        f = f"{p}spec.{field}.{key}"
        m = _map(value, f)
        out.append(
            _Raw(
                rtype.lower(),
                _count(m.get("replicas"), f"{f}.replicas"),
                m.get("template"),
                f"{f}.template",
                f"{f}.replicas",
            )
        )
    if not out:
        raise InputError(f"{p}spec.{field}", f"lists no replica type ({', '.join(order)})")
    return out


def _pytorchjob(spec: Mapping[str, Any], p: str) -> list[_Raw]:
    return _replica_specs(spec, p, "pytorchReplicaSpecs", ("Master", "Worker"))


def _leaderworkerset(spec: Mapping[str, Any], p: str) -> list[_Raw]:
    """One group (Kueue makes one Workload per group of `replicas`): a leader and size-1 workers,
    or `size` pods in podset "main" without a leaderTemplate."""
    f = f"{p}spec.leaderWorkerTemplate"
    lwt = _map(spec.get("leaderWorkerTemplate"), f)
    size = _count(lwt.get("size"), f"{f}.size")
    if "workerTemplate" not in lwt:
        raise InputError(f"{f}.workerTemplate", "is required")
    if lwt.get("leaderTemplate") is None:
        return [_Raw("main", size, lwt["workerTemplate"], f"{f}.workerTemplate", f"{f}.size")]
    if size < 1:
        raise InputError(f"{f}.size", "must be at least 1: the leader is one of the group's pods")
    return [
        _Raw("leader", 1, lwt["leaderTemplate"], f"{f}.leaderTemplate", f"{f}.size"),
        _Raw("worker", size - 1, lwt["workerTemplate"], f"{f}.workerTemplate", f"{f}.size"),
    ]


def _ray_cluster(cluster: Mapping[str, Any], f: str) -> list[_Raw]:
    """A Ray cluster's podsets: "head" (one pod), then each worker group by its name in lower case,
    replicas (default 1) x numOfHosts pods."""
    head = _map(cluster.get("headGroupSpec"), f"{f}.headGroupSpec")
    if "template" not in head:
        raise InputError(f"{f}.headGroupSpec.template", "is required")
    out = [_Raw("head", 1, head["template"], f"{f}.headGroupSpec.template", f"{f}.headGroupSpec")]
    for i, wg in enumerate(_list(cluster.get("workerGroupSpecs"), f"{f}.workerGroupSpecs")):
        g = f"{f}.workerGroupSpecs[{i}]"
        m = _map(wg, g)
        name = m.get("groupName")
        if not isinstance(name, str) or not name:
            raise InputError(f"{g}.groupName", "each worker group needs a groupName")
        hosts = _count(m.get("numOfHosts"), f"{g}.numOfHosts")
        count = _count(m.get("replicas"), f"{g}.replicas") * max(hosts, 1)
        out.append(_Raw(name.lower(), count, m.get("template"), f"{g}.template", f"{g}.replicas"))
    return out


def _raycluster(spec: Mapping[str, Any], p: str) -> list[_Raw]:
    return _ray_cluster(spec, f"{p}spec")


#: KubeRay's submitter Job pod when the RayJob gives no submitterPodTemplate (Kueue counts it).
_SUBMITTER = {
    "spec": {
        "containers": [
            {
                "name": "ray-job-submitter",
                "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi"},
                    "requests": {"cpu": "500m", "memory": "200Mi"},
                },
            }
        ],
        "restartPolicy": "Never",
    }
}


def _rayjob(spec: Mapping[str, Any], p: str) -> list[_Raw]:
    """The Ray cluster the RayJob creates, and its submitter pod in the default K8sJobMode."""
    if spec.get("rayClusterSpec") is None:
        raise InputError(
            f"{p}spec.rayClusterSpec",
            "is required: Kueue queues a RayJob by the cluster it creates (not one it selects)",
        )
    out = _ray_cluster(_map(spec["rayClusterSpec"], f"{p}spec.rayClusterSpec"), f"{p}spec.rayClusterSpec")
    if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
        template = spec.get("submitterPodTemplate") or _SUBMITTER
        out.append(_Raw("submitter", 1, template, f"{p}spec.submitterPodTemplate", f"{p}spec.submissionMode"))
    return out


# -- TrainJob: its pods come from its runtime ---------------------------------------------------

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
_TRAINER, _INITIALIZERS = "trainer", ("dataset-initializer", "model-initializer")
_NODE = "node"  # the trainer's container, and an MPI runtime's node Job
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


def _check_runtime(trainjob: Mapping[str, Any], runtime: object, p: str, rp: str) -> Mapping[str, Any]:
    ref = _map(_map(trainjob.get("spec"), f"{p}spec").get("runtimeRef"), f"{p}spec.runtimeRef")
    want_kind = ref.get("kind") or "ClusterTrainingRuntime"
    want = f"{want_kind} {ref.get('name')!r}"
    if runtime is None:
        raise InputError(
            "--runtime",
            f"a TrainJob's pods come from its runtime: give the {want} its spec.runtimeRef names "
            f"(kubectl get {str(want_kind).lower()} {ref.get('name')} -o yaml)",
        )
    rt = _map(runtime, f"{rp}(document)")
    kind, name = rt.get("kind"), _map(rt.get("metadata"), f"{rp}metadata").get("name")
    if kind not in RUNTIME_KINDS or rt.get("apiVersion") not in TRAINJOB.api_versions():
        raise InputError(
            f"{rp}kind", f"expected a {' or '.join(RUNTIME_KINDS)} of {TRAINJOB.api_versions()[0]}"
        )
    if (kind, name) != (want_kind, ref.get("name")):
        raise InputError("--runtime", f"is {kind} {name!r} but {p}spec.runtimeRef names {want}")
    return _map(rt.get("spec"), f"{rp}spec")


def _override(
    template: object, meta: Mapping[str, Any], spec: Mapping[str, Any], field: str
) -> dict[str, Any]:
    """A pod template with a TrainJob's override applied as the trainer merges it: labels,
    annotations and nodeSelector merged, tolerations added, affinity replaced."""
    tm = dict(_map(template, field))
    tmeta = dict(_map(tm.get("metadata"), f"{field}.metadata"))
    for key in ("labels", "annotations"):
        if meta.get(key):
            tmeta[key] = {**_map(tmeta.get(key), f"{field}.metadata.{key}"), **_map(meta[key], key)}
    tspec = dict(_map(tm.get("spec"), f"{field}.spec"))
    if spec.get("nodeSelector"):
        tspec["nodeSelector"] = {
            **_map(tspec.get("nodeSelector"), f"{field}.spec.nodeSelector"),
            **spec["nodeSelector"],
        }
    if spec.get("tolerations"):
        tspec["tolerations"] = [
            *_list(tspec.get("tolerations"), f"{field}.spec.tolerations"),
            *spec["tolerations"],
        ]
    if spec.get("affinity") is not None:
        tspec["affinity"] = spec["affinity"]
    return {**tm, "metadata": tmeta, "spec": tspec}


def _overrides(
    trainjob_spec: Mapping[str, Any], p: str
) -> list[tuple[set[str], Mapping[str, Any], Mapping[str, Any]]]:
    """(target Job names, pod metadata, pod spec) of the TrainJob's `podTemplateOverrides`
    (Trainer v2.1) and `runtimePatches` (v2.2), in the order the trainer applies them."""
    out = []
    for i, o in enumerate(_list(trainjob_spec.get("podTemplateOverrides"), f"{p}spec.podTemplateOverrides")):
        f = f"{p}spec.podTemplateOverrides[{i}]"
        m = _map(o, f)
        targets = {
            str(_map(t, f"{f}.targetJobs").get("name")) for t in _list(m.get("targetJobs"), f"{f}.targetJobs")
        }
        out.append((targets, _map(m.get("metadata"), f"{f}.metadata"), _map(m.get("spec"), f"{f}.spec")))
    for i, patch in enumerate(_list(trainjob_spec.get("runtimePatches"), f"{p}spec.runtimePatches")):
        f = f"{p}spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec"
        tmpl = _map(_map(_map(patch, f).get("trainingRuntimeSpec"), f).get("template"), f)
        for j, rj in enumerate(_list(_map(tmpl.get("spec"), f).get("replicatedJobs"), f"{f}.replicatedJobs")):
            g = f"{f}.replicatedJobs[{j}]"
            pod = _map(_map(_map(_map(rj, g).get("template"), g).get("spec"), g).get("template"), g)
            name = str(_map(rj, g).get("name"))
            out.append(({name}, _map(pod.get("metadata"), g), _map(pod.get("spec"), g)))
    return out


def _trainjob(trainjob: Mapping[str, Any], p: str, runtime: object, rp: str) -> list[_Raw]:
    """The JobSet the trainer builds from the runtime, as Kueue's TrainJob integration reads it:
    the runtime's replicatedJobs in order; the trainer Job runs numNodes pods (the TrainJob's
    `trainer.numNodes`, else the runtime's `mlPolicy.numNodes`, else 1; MPI: the node Job, one
    fewer with runLauncherAsNode) with `resourcesPerNode` on its "node" container; initializer
    Jobs one pod each."""
    spec = _map(trainjob.get("spec"), f"{p}spec")
    rspec = _check_runtime(trainjob, runtime, p, rp)
    template = _map(_map(rspec.get("template"), f"{rp}spec.template").get("spec"), f"{rp}spec.template.spec")
    ml = _map(rspec.get("mlPolicy"), f"{rp}spec.mlPolicy")
    trainer = _map(spec.get("trainer"), f"{p}spec.trainer")
    mpi = _map(ml.get("mpi"), f"{rp}spec.mlPolicy.mpi") if ml.get("mpi") is not None else None
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode"))
    num_nodes = trainer.get("numNodes")
    if num_nodes is not None:
        num_nodes = _count(num_nodes, f"{p}spec.trainer.numNodes")
    base = f"{rp}spec.template.spec.replicatedJobs"
    counts: dict[int, int] = {}
    count_fields: dict[int, str] = {}
    jobs: list[dict[str, Any]] = []
    for i, rj in enumerate(_list(template.get("replicatedJobs"), base)):
        f = f"{base}[{i}]"
        m = dict(_map(rj, f))
        job_tmpl = _map(m.get("template"), f"{f}.template")
        labels = _map(
            _map(job_tmpl.get("metadata"), f"{f}.template.metadata").get("labels"),
            f"{f}.template.metadata.labels",
        )
        ancestor = labels.get(ANCESTOR_LABEL)
        job_spec = dict(_map(job_tmpl.get("spec"), f"{f}.template.spec"))
        count = _count(job_spec.get("parallelism"), f"{f}.template.spec.parallelism")
        if ancestor == _TRAINER and rspec.get("mlPolicy") is not None:
            count = _count(ml.get("numNodes"), f"{rp}spec.mlPolicy.numNodes")
            count_fields[i] = f"{rp}spec.mlPolicy.numNodes"
        if num_nodes is not None:
            if mpi is not None and m.get("name") == _NODE:
                count = max(num_nodes - 1, 1) if launcher_as_node else num_nodes
                count_fields[i] = f"{p}spec.trainer.numNodes"
            elif mpi is None and ancestor == _TRAINER:
                count = num_nodes
                count_fields[i] = f"{p}spec.trainer.numNodes"
        if ancestor == _TRAINER or ancestor in _INITIALIZERS:
            m["replicas"] = 1
        counts[i] = count
        pod = job_spec.get("template")
        if trainer.get("resourcesPerNode") and (
            ancestor == _TRAINER or (launcher_as_node and m.get("name") == _NODE)
        ):
            pod = _with_resources(pod, trainer["resourcesPerNode"], f"{f}.template.spec.template")
        for targets, meta, pod_spec in _overrides(spec, p):
            if m.get("name") in targets:
                pod = _override(pod, meta, pod_spec, f"{f}.template.spec.template")
        jobs.append({**m, "template": {**job_tmpl, "spec": {**job_spec, "template": pod}}})
    return _replicated_jobs(jobs, base, counts, count_fields)


def _with_resources(template: object, resources: object, field: str) -> dict[str, Any]:
    tm = dict(_map(template, field))
    tspec = dict(_map(tm.get("spec"), f"{field}.spec"))
    containers = _list(tspec.get("containers"), f"{field}.spec.containers")
    tspec["containers"] = [
        {**c, "resources": resources} if isinstance(c, Mapping) and c.get("name") == _NODE else c
        for c in containers
    ]
    return {**tm, "spec": tspec}


_DERIVE = {
    JOB.kind: _job,
    JOBSET.kind: _jobset,
    PYTORCHJOB.kind: _pytorchjob,
    LEADERWORKERSET.kind: _leaderworkerset,
    RAYJOB.kind: _rayjob,
    RAYCLUSTER.kind: _raycluster,
}


def gang_of(obj: object, *, where: str = "", runtime: object = None, runtime_where: str = "") -> JobGang:
    """The gang of a Kueue Workload or of a job of a kind Kueue integrates (`JOB_KINDS`); a
    TrainJob needs its `runtime` (the TrainingRuntime or ClusterTrainingRuntime it names)."""
    top = _map(obj, f"{where}(document)")
    kind, api = top.get("kind"), top.get("apiVersion")
    name = str(_map(top.get("metadata"), f"{where}metadata").get("name", ""))
    if kind == WORKLOAD.kind:
        try:
            gang = records.gang_from_k8s(top)
        except InputError as err:
            raise InputError(f"{where}{err.field}", err.problem) from None
        n = len(gang.podsets)
        p = f"{where}spec.podSets"
        return JobGang(gang, tuple(PodSetSource(f"{p}[{i}].template", f"{p}[{i}].count") for i in range(n)))
    job_kind = next((k for k in JOB_KINDS if k.kind == kind), None)
    if job_kind is None:
        kinds = ", ".join(k.kind for k in (WORKLOAD, *JOB_KINDS))
        raise InputError(
            f"{where}kind", f"{kind!r} is not a Kueue Workload or a job kind Kueue integrates ({kinds})"
        )
    if api not in job_kind.api_versions():
        raise InputError(f"{where}apiVersion", f"{api!r} is not {' or '.join(job_kind.api_versions())}")
    if job_kind is TRAINJOB:
        raws = _trainjob(top, where, runtime, runtime_where)
    else:
        if runtime is not None:
            raise InputError("--runtime", f"goes with a TrainJob, not a {kind}")
        raws = _DERIVE[job_kind.kind](_map(top.get("spec"), f"{where}spec"), where)
    return _gang(raws, name, where)
