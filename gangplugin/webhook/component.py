"""`gangplugin serve --components webhook`: the admission webhooks, HTTPS, on every replica
(the API server may call any; nothing here is state). POST /validate takes an AdmissionReview
for GangPolicies (a ValidatingWebhookConfiguration); POST /mutate-pods one for the pods of
bindMode Ungate and PodGroup gangs, which it creates behind the placement gate (a
MutatingWebhookConfiguration). deploy/manifests/base/webhook.yaml holds both; `make up`
registers them for the local cluster."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

from gangplugin.core.errors import InputError
from gangplugin.kube.discovery import serves
from gangplugin.kube.resources import PODGROUPS, TOPOLOGIES
from gangplugin.runtime.asgi import App, BadRequest, Receive, Send, read_json, respond_json, serve_in_thread
from gangplugin.runtime.components import Runtime
from gangplugin.webhook.review import Validator, gang_policy_validator, gate_review, review

log = logging.getLogger(__name__)

PATH = "/validate"
MUTATE_PODS_PATH = "/mutate-pods"


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    bind: str = "0.0.0.0:9443"
    tls_cert: str | None = None
    tls_key: str | None = None


def make_app(validators: dict[str, Validator]) -> App:
    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path not in (PATH, MUTATE_PODS_PATH) or scope["method"] != "POST":
            message = f"the webhook serves POST {PATH} and POST {MUTATE_PODS_PATH}"
            await respond_json(send, 404, {"message": message})
            return
        try:
            body = await read_json(receive)
            if path == MUTATE_PODS_PATH:  # pure and quick: on the loop
                out = gate_review(body)
            else:  # validators may read the API (a Topology): off the loop, which keeps serving
                out = await asyncio.to_thread(review, body, validators)
        except (BadRequest, InputError) as err:
            await respond_json(send, 400, {"message": str(err)})
            return
        response = out["response"]
        if not response["allowed"]:
            log.info("refused: %s", response["status"]["message"])
        await respond_json(send, 200, out)

    return app


class Webhook:
    # Nothing here is state: every replica serves the API server's calls.
    needs_leader: bool = False

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings

    def setup(self, runtime: Runtime) -> None:
        """No watch caches: a GangPolicy write is rare, its Topology is read when it comes."""

    def start(self, runtime: Runtime) -> None:
        settings = self.settings
        if not settings.tls_cert:
            log.warning("webhook serving plain HTTP: the API server calls webhooks over HTTPS only")
        validators = {
            "GangPolicy": gang_policy_validator(
                lambda n: runtime.client.get_or_none(TOPOLOGIES, n), lambda: serves(runtime.client, PODGROUPS)
            )
        }
        app = functools.partial(make_app, validators)
        serve_in_thread("webhook", settings.bind, settings.tls_cert, settings.tls_key, app, runtime.fail)
