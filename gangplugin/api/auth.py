"""Who may call the gRPC API: Kubernetes decides, as it does for kubectl.

A caller sends `authorization: Bearer <token>` (a ServiceAccount token, an exec plugin's token,
or any token the API server accepts) and a TokenReview says who it is; or, on the port that
requires client certificates (`--grpc-mtls-bind`, verified against the API server's client CA),
its certificate says it as it does to the API server: the common name is the user, each
organization a group. A SubjectAccessReview says whether that identity may do the verb on the
resource the call maps to (`RULES`). Reads need a token too, with
get/list/watch on workloads.kueue.x-k8s.io (gangs) or trainingplans.gangplugin.io (plans): a gang's
queue, pods and nodes are as private as the Workload itself. Only the health and reflection
services are open. The reviews themselves, and their short cache, are `kube.access`'s (the
console asks them too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from gangplugin.core.names import GROUP
from gangplugin.kube.access import AccessReviews, Identity, ReviewUnavailable
from gangplugin.kube.client import JSON

KUEUE_GROUP = "kueue.x-k8s.io"
#: Services anyone may call: load balancers probe health, tools list the schema.
OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")


@dataclass(frozen=True, slots=True)
class Access:
    """What a call needs: `verb` on `group`/`resource`, in the request's `namespace` field when
    `namespaced` (empty: all namespaces), on the object its `name_field` names (if any)."""

    verb: str
    group: str
    resource: str
    namespaced: bool = False
    name_field: str | None = None

    def attributes(self, request: Any) -> JSON:
        attrs: JSON = {"verb": self.verb, "group": self.group, "resource": self.resource}
        namespace = str(request.namespace) if self.namespaced else ""
        if namespace:
            attrs["namespace"] = namespace
        name = str(getattr(request, self.name_field)) if self.name_field else ""
        if name:
            attrs["name"] = name
        return attrs


_GANGS, _PLANS = "/gangplugin.v1.GangService/", "/gangplugin.v1.PlanService/"
RULES: dict[str, Access] = {
    _GANGS + "GetGang": Access("get", KUEUE_GROUP, "workloads", True, "name"),
    _GANGS + "ExplainGang": Access("get", KUEUE_GROUP, "workloads", True, "name"),
    _GANGS + "ListGangs": Access("list", KUEUE_GROUP, "workloads", True),
    _GANGS + "WatchGangs": Access("watch", KUEUE_GROUP, "workloads", True, "name"),
    # A search reads the free capacity the plans leave: listing plans is the right it needs.
    _PLANS + "SearchTrainingPlanOfferings": Access("list", GROUP, "trainingplans"),
    _PLANS + "ListTrainingPlans": Access("list", GROUP, "trainingplans"),
    _PLANS + "DescribeTrainingPlan": Access("get", GROUP, "trainingplans", False, "training_plan_name"),
    _PLANS + "CreateTrainingPlan": Access("create", GROUP, "trainingplans", False, "training_plan_name"),
}


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def bearer_token(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            raise Denied(
                grpc.StatusCode.UNAUTHENTICATED,
                "authorization metadata must read 'Bearer <token>'",
            )
    return None


def certificate_identity(auth_context: Any) -> Identity | None:
    """Who a verified client certificate names (gRPC puts it in the auth context only when the
    listener required one and it chained to the client CA), as kube-apiserver reads it."""
    pems = (auth_context or {}).get("x509_pem_cert") or []
    if not pems:
        return None
    subject = x509.load_pem_x509_certificate(pems[0]).subject
    names = [str(a.value) for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if not names or not names[0]:
        return None
    groups = [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return Identity(names[0], groups=(*groups, "system:authenticated"))


class Authorizer(AccessReviews):
    """The API's access rules (`RULES`) over the shared reviews; a review that cannot be made
    is UNAVAILABLE (the caller may retry)."""

    def _post(self, path: str, body: JSON) -> JSON:
        try:
            return super()._post(path, body)
        except ReviewUnavailable as err:
            raise Denied(grpc.StatusCode.UNAVAILABLE, str(err)) from None

    def check(self, method: str, metadata: Any, request: Any, peer: Identity | None = None) -> None:
        """Raise Denied unless the caller (its token, else `peer`: its client certificate's
        identity) may make this call."""
        if method.startswith(OPEN_PREFIXES):
            return
        rule = RULES.get(method)
        if rule is None:  # fail closed: a new method must get its rule
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, f"{method}: no access rule; nobody may call it")
        token = bearer_token(metadata)
        if token is None and peer is None:
            raise Denied(
                grpc.StatusCode.UNAUTHENTICATED,
                "send a Kubernetes token as metadata 'authorization: Bearer <token>', or a client "
                "certificate to the client-certificate port (gangctl sends what the kubeconfig user has)",
            )
        who = self.identity(token) if token is not None else peer
        if who is None:
            raise Denied(
                grpc.StatusCode.UNAUTHENTICATED, "the API server did not accept the token (TokenReview)"
            )
        attrs = rule.attributes(request)
        ok, reason = self.allowed(who, attrs)
        if not ok:
            scope = f" in namespace {attrs['namespace']}" if "namespace" in attrs else ""
            if rule.namespaced and "namespace" not in attrs:
                scope = " in all namespaces"
            target = f" {attrs['name']!r}" if "name" in attrs else ""
            raise Denied(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{who.username} cannot {rule.verb} {rule.resource}.{rule.group}{target}{scope}"
                + (f": {reason}" if reason else ""),
            )


if TYPE_CHECKING:  # generic only in grpc-stubs
    _Interceptor = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


class AuthInterceptor(_Interceptor):
    """Runs `Authorizer.check` before each handler, with the decoded request at hand."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        method = details.method
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        check = self.authorizer.check

        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                _guard(check, method, request, context)
                return inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                _guard(check, method, request, context)
                yield from inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(
                stream, handler.request_deserializer, handler.response_serializer
            )
        return handler  # no client-streaming methods exist; their rule would be added here


def _guard(
    check: Callable[[str, Any, Any, Identity | None], None],
    method: str,
    request: Any,
    ctx: grpc.ServicerContext,
) -> None:
    try:
        check(method, ctx.invocation_metadata(), request, certificate_identity(ctx.auth_context()))
    except Denied as err:
        ctx.abort(err.code, str(err))
