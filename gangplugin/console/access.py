"""Who is looking, and what they may see and change: as the gRPC API decides it (`kube.access`:
the bearer token's TokenReview, a SubjectAccessReview per read and write), never by anything
the console keeps of its own.

A browser sends its token once, at login; the console keeps it in an HttpOnly, Secure,
SameSite=Strict cookie of the browser's (no session in the server: any replica serves any
request), and asks the API server about it on every request (the answers are cached for
seconds). A tool may send `Authorization: Bearer <token>` instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gangplugin.core.names import GROUP
from gangplugin.kube.access import AccessReviews, Identity

KUEUE = "kueue.x-k8s.io"
COOKIE = "gangplugin-console-token"
#: How long a browser keeps the token (the token's own expiry ends it sooner).
COOKIE_SECONDS = 8 * 3600


@dataclass(frozen=True, slots=True)
class Grant:
    """What one read or write needs, as kubectl would need it."""

    verb: str
    group: str
    resource: str

    def describe(self) -> str:
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}"


SEE_NODES = Grant("list", "", "nodes")
SEE_GANGS = Grant("list", KUEUE, "workloads")
GET_GANG = Grant("get", KUEUE, "workloads")
SEE_EVENTS = Grant("list", "", "events")
SEE_QUEUES = Grant("list", KUEUE, "clusterqueues")
SEE_PLANS = Grant("list", GROUP, "trainingplans")
SEE_POLICIES = Grant("list", GROUP, "gangpolicies")
EDIT_POLICY = Grant("patch", GROUP, "gangpolicies")


@dataclass(frozen=True, slots=True)
class Namespaces:
    """The namespaces a user may read something in: every one, or these."""

    every: bool
    some: frozenset[str] = frozenset()

    def __contains__(self, namespace: object) -> bool:
        return self.every or namespace in self.some


class Viewer:
    """One request's user: who the token says, and each question put to the API server."""

    def __init__(self, identity: Identity, token: str, reviews: AccessReviews) -> None:
        self.identity, self.token, self._reviews = identity, token, reviews

    @property
    def name(self) -> str:
        return self.identity.username

    def may(self, grant: Grant, namespace: str = "", name: str = "") -> bool:
        attrs: dict[str, str] = {"verb": grant.verb, "group": grant.group, "resource": grant.resource}
        if namespace:
            attrs["namespace"] = namespace
        if name:
            attrs["name"] = name
        return self._reviews.allowed(self.identity, attrs)[0]

    def namespaces(self, grant: Grant, among: Iterable[str]) -> Namespaces:
        """Where the user may do `grant`: everywhere (one review), else each of `among` asked."""
        if self.may(grant):
            return Namespaces(every=True)
        return Namespaces(every=False, some=frozenset(ns for ns in set(among) if self.may(grant, ns)))

    def refusal(self, grant: Grant, namespace: str = "") -> str:
        where = f" in namespace {namespace}" if namespace else ""
        return f"{self.name} may not {grant.describe()}{where}"
