"""The console's pages: the cluster map, the gangs and one gang, quota and plans, the gang
policies and their form. Each handler asks the API server what its user may read (and write),
builds its view model (`views.py`) from the source, and renders a whole page or, for the
`/view` path htmx asks for when the page's topic changed, only its live region."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gangplugin.console import web
from gangplugin.console.access import (
    EDIT_POLICY,
    GET_GANG,
    SEE_GANGS,
    SEE_NODES,
    SEE_PLANS,
    SEE_POLICIES,
    SEE_QUEUES,
    Grant,
    Viewer,
)
from gangplugin.console.gangs import timeline
from gangplugin.console.model import ClusterMap, MapDomain, PolicySettings, Topic
from gangplugin.console.policies import CHOICES, LABELS, NUMBERS, field_of, policy_patch, policy_settings
from gangplugin.console.views import (
    PHASE_CLASS,
    domain_text,
    gang_colours,
    gangs_page,
    map_page,
    plan_row,
    queue_box,
    time_axis,
    when,
)
from gangplugin.kube.client import EVENTS, ApiError
from gangplugin.kube.resources import GANG_POLICIES

Form = dict[str, str]


def now() -> datetime:
    return datetime.now(UTC)


def render(request: Request, name: str, context: Mapping[str, Any], status: int = 200) -> Response:
    """The page `name`, or only its live region (`_name`) when the path ends in /view."""
    fragment = request.url.path.endswith("/view")
    template = f"_{name}" if fragment and not name.startswith("_") else name
    return web.TEMPLATES.TemplateResponse(
        request, template, {"when": when, "now": now(), **context}, status_code=status
    )


def denied(
    request: Request, who: Viewer, name: str, grant: Grant, topic: Topic, namespace: str = ""
) -> Response:
    """The page's region saying what the user lacks (and nothing of what is there)."""
    return render(
        request, name, {"user": who.name, "refused": who.refusal(grant, namespace), "topic": topic}, 403
    )


def _namespaces(domains: Iterable[MapDomain]) -> set[str]:
    out: set[str] = set()
    for d in domains:
        out |= {g.namespace for n in d.nodes for g in n.gangs}
        out |= _namespaces(d.children)
    return out


def cluster_map(request: Request, who: Viewer, form: Form) -> Response:
    if not who.may(SEE_NODES):
        return denied(request, who, "map.html", SEE_NODES, Topic.MAP)
    source = web.console_of(request).source
    cmap: ClusterMap = source.cluster_map()
    seen = who.namespaces(SEE_GANGS, _namespaces(cmap.domains))
    colours = gang_colours((g.namespace, g.name) for g in source.gangs())
    page = map_page(cmap, seen, colours)
    return render(request, "map.html", {"user": who.name, "page": page, "topic": Topic.MAP})


def gangs(request: Request, who: Viewer, form: Form) -> Response:
    found = web.console_of(request).source.gangs()
    seen = who.namespaces(SEE_GANGS, {g.namespace for g in found})
    if not seen.every and not seen.some:
        return denied(request, who, "gangs.html", SEE_GANGS, Topic.GANGS)
    namespace = request.query_params.get("namespace", "")
    queue = request.query_params.get("queue", "")
    page = gangs_page(found, seen, namespace, queue)
    query = "&".join(f"{k}={v}" for k, v in (("namespace", namespace), ("queue", queue)) if v)
    return render(
        request,
        "gangs.html",
        {
            "user": who.name,
            "page": page,
            "query": f"?{query}" if query else "",
            "phase_class": PHASE_CLASS,
            "domain_text": domain_text,
            "colours": gang_colours((g.namespace, g.name) for g in found),
            "topic": Topic.GANGS,
        },
    )


def _events(request: Request, who: Viewer, namespace: str, workload: str) -> tuple[list[dict[str, Any]], str]:
    """The Events on the gang's Workload, read as the user (their RBAC decides); a note when
    they may not be read."""
    client = web.console_of(request).client.as_user(who.token)
    try:
        selector = f"involvedObject.kind=Workload,involvedObject.name={workload}"
        items = client.list(EVENTS, namespace, field_selector=selector)["items"]
        return list(items), ""
    except ApiError as err:
        return [], f"Its Events are not shown: {err}"
    finally:
        client.close()


def gang(request: Request, who: Viewer, form: Form) -> Response:
    ns, name = request.path_params["namespace"], request.path_params["name"]
    if not who.may(GET_GANG, ns, name):
        return denied(request, who, "gang.html", GET_GANG, Topic.GANGS, ns)
    detail = web.console_of(request).source.gang(ns, name)
    if detail is None:
        return render(
            request, "gang.html", {"user": who.name, "missing": f"{ns}/{name}", "topic": Topic.GANGS}, 404
        )
    events, note = _events(request, who, ns, detail.workload) if detail.workload else ([], "")
    return render(
        request,
        "gang.html",
        {
            "user": who.name,
            "gang": detail,
            "timeline": timeline(detail, events),
            "note": note,
            "phase_class": PHASE_CLASS,
            "domain_text": domain_text,
            "topic": Topic.GANGS,
        },
    )


def quota(request: Request, who: Viewer, form: Form) -> Response:
    source, at = web.console_of(request).source, now()
    queues = [queue_box(q, at) for q in source.queues(at)] if who.may(SEE_QUEUES) else None
    plans = None
    axis = None
    if who.may(SEE_PLANS):
        schedules = source.plans(at)
        axis = time_axis(schedules, at)
        plans = [plan_row(p, axis, at) for p in schedules]
    return render(
        request,
        "quota.html",
        {
            "user": who.name,
            "queues": queues,
            "queues_refused": who.refusal(SEE_QUEUES) if queues is None else "",
            "plans": plans,
            "axis": axis,
            "plans_refused": who.refusal(SEE_PLANS) if plans is None else "",
            "topic": Topic.QUOTA,
        },
    )


def policies(request: Request, who: Viewer, form: Form) -> Response:
    if not who.may(SEE_POLICIES):
        return denied(request, who, "policies.html", SEE_POLICIES, Topic.POLICIES)
    found = web.console_of(request).source.policies()
    editable = {p.name for p in found if who.may(EDIT_POLICY, name=p.name)}
    return render(
        request,
        "policies.html",
        {"user": who.name, "policies": found, "editable": editable, "topic": Topic.POLICIES},
    )


def _form(
    request: Request, who: Viewer, settings: PolicySettings, status: int = 200, **extra: Any
) -> Response:
    context = {
        "user": who.name,
        "policy": settings,
        "choices": CHOICES,
        "numbers": NUMBERS,
        "labels": LABELS,
        **extra,
    }
    return render(request, "_policy_form.html", context, status)


def edit_policy(request: Request, who: Viewer, form: Form) -> Response:
    """The form of one GangPolicy (only for a user who may change it)."""
    name = request.path_params["name"]
    if not who.may(EDIT_POLICY, name=name):
        return denied(request, who, "_policy_form.html", EDIT_POLICY, Topic.POLICIES)
    console = web.console_of(request)
    obj = console.source.policy_object(name)
    if obj is None:
        return render(request, "_policy_form.html", {"missing": name}, 404)
    source = console.source
    settings = next((p for p in source.policies() if p.name == name), None)
    return _form(request, who, settings or policy_settings(obj, [], []))


def save_policy(request: Request, who: Viewer, form: Form) -> Response:
    """One merge patch, as the user: the API server (its schema, then gangplugin's validating
    webhook) takes it whole or refuses it whole; a refusal is shown beside the field it names,
    with what the user typed, and nothing changed."""
    name = request.path_params["name"]
    console = web.console_of(request)
    obj = console.source.policy_object(name)
    if obj is None:
        return render(request, "_policy_form.html", {"missing": name}, 404)
    typed = {k: v for k, v in form.items() if k.startswith("spec.")}
    patch = policy_patch(typed, form.get("resourceVersion", ""))
    client = console.client.as_user(who.token)
    try:
        saved = client.patch(GANG_POLICIES, name, patch)
    except ApiError as err:
        shown = policy_settings(obj, [], [])
        values = tuple((f, typed.get(f.value, v)) for f, v in shown.values)
        if err.status == 409:
            message = "The GangPolicy changed since this form was opened; nothing was saved. Reload it."
        else:
            message = str(err).split(": ", 1)[-1]
        settings = PolicySettings(
            name=shown.name,
            resource_version=form.get("resourceVersion", ""),
            values=values,
            sentences=shown.sentences,
            problem=shown.problem,
            used_by=shown.used_by,
        )
        return _form(request, who, settings, error=message, error_field=field_of(message), status=422)
    finally:
        client.close()
    return _form(request, who, policy_settings(saved, [], []), saved=True)


ROUTES: list[tuple[str, web.Handler, list[str]]] = [
    ("/map", cluster_map, ["GET"]),
    ("/map/view", cluster_map, ["GET"]),
    ("/gangs", gangs, ["GET"]),
    ("/gangs/view", gangs, ["GET"]),
    ("/gangs/{namespace}/{name}", gang, ["GET"]),
    ("/gangs/{namespace}/{name}/view", gang, ["GET"]),
    ("/quota", quota, ["GET"]),
    ("/quota/view", quota, ["GET"]),
    ("/policies", policies, ["GET"]),
    ("/policies/view", policies, ["GET"]),
    ("/policies/{name}/edit", edit_policy, ["GET"]),
    ("/policies/{name}", save_policy, ["POST"]),
]
