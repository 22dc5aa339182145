"""Who a caller is and what it may do, as Kubernetes decides it for kubectl: a TokenReview says
whose a bearer token is, a SubjectAccessReview whether that identity may do a verb on a
resource. The gRPC API and the console ask the same questions through one `AccessReviews`.

Answers are cached briefly (`ttl`) keyed by the token's hash (and the identity and attributes),
so a page that asks about twenty namespaces, a watch or a burst of calls costs one review each,
and a revoked token stops working within `ttl`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from gangplugin.kube.client import JSON, ApiError, Client

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Identity:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


class ReviewUnavailable(Exception):
    """The API server could not be asked (unreachable, or it refused the review itself)."""


class AccessReviews:
    """TokenReview + SubjectAccessReview against the API server, with a short cache."""

    def __init__(
        self, client: Client, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client, self.ttl, self.clock = client, ttl, clock
        self._lock = threading.Lock()
        self._cache: dict[Any, tuple[float, Any]] = {}

    def _cached(self, key: Any, compute: Callable[[], Any]) -> Any:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        value = compute()  # outside the lock: a slow review must not hold up other callers
        with self._lock:
            if len(self._cache) > 4096:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            self._cache[key] = (now + self.ttl, value)
        return value

    def _post(self, path: str, body: JSON) -> JSON:
        try:
            return self.client.request("POST", path, body=body)
        except (ApiError, httpx.HTTPError) as err:
            log.warning("review %s failed: %s", path, err)
            raise ReviewUnavailable(f"cannot check the caller with the API server: {err}") from None

    def identity(self, token: str) -> Identity | None:
        """Whose `token` is (None: the API server does not accept it); ReviewUnavailable when
        the API server cannot be asked."""
        digest = hashlib.sha256(token.encode()).hexdigest()

        def review() -> Identity | None:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
            status = self._post(TOKEN_REVIEWS, body).get("status") or {}
            if not status.get("authenticated"):
                return None
            user = status.get("user") or {}
            return Identity(
                str(user.get("username", "")),
                str(user.get("uid", "")),
                tuple(user.get("groups") or ()),
                {str(k): list(v) for k, v in (user.get("extra") or {}).items()},
            )

        result: Identity | None = self._cached(("token", digest), review)
        return result

    def allowed(self, who: Identity, attrs: JSON) -> tuple[bool, str]:
        """Whether `who` may do what the resourceAttributes `attrs` say, and the authorizer's
        reason; ReviewUnavailable when the API server cannot be asked."""
        key = ("sar", who.username, who.uid, tuple(sorted(attrs.items())))

        def review() -> tuple[bool, str]:
            spec: JSON = {"user": who.username, "groups": list(who.groups), "resourceAttributes": attrs}
            if who.uid:
                spec["uid"] = who.uid
            if who.extra:
                spec["extra"] = who.extra
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
            status = self._post(SUBJECT_ACCESS_REVIEWS, body).get("status") or {}
            return bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or "")

        result: tuple[bool, str] = self._cached(key, review)
        return result
