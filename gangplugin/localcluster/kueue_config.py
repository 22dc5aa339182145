"""Kueue's Configuration: what gangplugin needs in it is one file, the patch it ships
(`deploy/admission/kueue-config.yaml`), added to a Configuration by `merge`. Admins merge it into
theirs (docs/install.md); the local cluster merges it into its own local settings, so the
shipped patch is what every local cluster and e2e test runs."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from gangplugin.localcluster.upstream import REPO

SHIPPED_PATCH = REPO / "deploy" / "admission" / "kueue-config.yaml"


def shipped_patch() -> dict[str, Any]:
    patch: dict[str, Any] = yaml.safe_load(SHIPPED_PATCH.read_text())
    return patch


def merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `patch` added, neither changed: maps merge key by key, lists are unioned
    (`base`'s items, then the patch's it lacks: `integrations.frameworks` keeps every framework
    of both), and any other value of the patch replaces `base`'s (the patch's settings hold)."""
    out = copy.deepcopy(dict(base))
    for key, value in patch.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, Mapping):
            out[key] = merge(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            out[key] = old + [copy.deepcopy(v) for v in value if v not in old]
        else:
            out[key] = copy.deepcopy(value)
    return out
