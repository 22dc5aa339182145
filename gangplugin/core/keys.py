"""Unknown keys are errors, not silence: a misspelt annotation key (`gangplugin.io/required-toplogy`)
would drop the requirement it was meant to set, and a gang placed across UltraServers loses its
NVLink bandwidth without a word. Keys under our prefix, and under Kueue's podset topology prefix,
are checked against the names that exist; any other is reported with the closest known one."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gangplugin.core.names import (
    BIND_MODE_LABEL,
    BLOCK_END_ANNOTATION,
    CHECKPOINTABLE_ANNOTATION,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    GROUP,
    MAX_RUNTIME_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_DOMAINS_ANNOTATION,
    SLICE_PREFERRED_TOPOLOGY_ANNOTATION,
    SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
)

#: The keys of ours a pod template may carry: what a user sets, and what gangplugin itself puts
#: on a gang's pods (a template copied from a running pod keeps them).
POD_TEMPLATE_KEYS = frozenset(
    {
        REQUIRED_TOPOLOGY_ANNOTATION,
        PREFERRED_TOPOLOGY_ANNOTATION,
        MAX_RUNTIME_ANNOTATION,
        CHECKPOINTABLE_ANNOTATION,
        SLICE_SIZE_ANNOTATION,
        SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
        SLICE_PREFERRED_TOPOLOGY_ANNOTATION,
        SLICE_DOMAINS_ANNOTATION,
        GANG_LABEL,
        GANG_SIZE_ANNOTATION,
        BIND_MODE_LABEL,
        BLOCK_END_ANNOTATION,
    }
)
KUEUE_PODSET_PREFIX = "kueue.x-k8s.io/podset-"
#: Kueue's podset keys (v0.17 to v0.19: `apis/kueue/v1beta2/topology_types.go` and the jobs').
KUEUE_PODSET_KEYS = frozenset(
    f"{KUEUE_PODSET_PREFIX}{name}"
    for name in (
        "required-topology",
        "preferred-topology",
        "unconstrained-topology",
        "slice-required-topology",
        "slice-required-topology-constraints",
        "slice-size",
        "group-name",
        "replica-sizes",
    )
)
_CHECKED = ((f"{GROUP}/", POD_TEMPLATE_KEYS), (KUEUE_PODSET_PREFIX, KUEUE_PODSET_KEYS))


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word `word` most likely misspells, if one is close enough."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, known: Collection[str]) -> str:
    """`; did you mean X` for the closest known word, else the known words."""
    near = closest(word, known)
    return f"; did you mean {near}" if near else f"; known: {', '.join(sorted(known))}"


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key under a checked prefix that names nothing, and the known key it is closest to."""

    key: str
    suggestion: str | None
    field: str = "metadata.annotations"  # where on the pod template it is

    def __str__(self) -> str:
        hint = f": did you mean {self.suggestion}?" if self.suggestion else ""
        return f"unknown key {self.key}{hint}"


def unknown_keys(keys: Iterable[str], field: str = "metadata.annotations") -> tuple[UnknownKey, ...]:
    """The keys under our prefix or Kueue's podset prefix that no known name matches, sorted."""
    out = []
    for key in sorted(set(keys)):
        for prefix, known in _CHECKED:
            if key.startswith(prefix) and key not in known:
                # Names compared without the prefix they share, or any key would look close.
                near = closest(key.removeprefix(prefix), [k.removeprefix(prefix) for k in known])
                out.append(UnknownKey(key, None if near is None else prefix + near, field))
    return tuple(out)
