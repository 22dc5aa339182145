"""Kubernetes Events: how a controller tells a person about an object it cannot use."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from gangplugin.core.timeutil import format_time
from gangplugin.kube.client import EVENTS, JSON, ApiError, Client

log = logging.getLogger(__name__)


def record_event(client: Client, obj: JSON, kind: str, reason: str, message: str, component: str) -> None:
    """A Warning or Normal (`kind`) Event about `obj`; cluster-scoped objects' Events go to
    "default". Failing to record one is logged, never raised: it must not stop a reconcile."""
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    now = format_time(datetime.now(UTC).replace(microsecond=0))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        client.create(EVENTS, event, namespace)
    except ApiError as err:
        log.warning("could not record event %s on %s: %s", reason, meta["name"], err)
