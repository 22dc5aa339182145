"""The components `gangplugin serve` can run, one line each (as KAI registers its actions and
plugins): a name and how it is made from the settings tree. Adding a component is its module
(a class with `needs_leader`, `setup` and `start`: `runtime.components.Component`) and its line."""

from __future__ import annotations

from collections.abc import Callable

from gangplugin.admission.component import Admission
from gangplugin.api.component import Api
from gangplugin.console.component import WebConsole
from gangplugin.extender.component import Extender
from gangplugin.extender.ungater_component import UngaterComponent
from gangplugin.multikueue.component import MultiKueue
from gangplugin.plans.component import Plans
from gangplugin.runtime.components import Component
from gangplugin.server.settings import ServeSettings
from gangplugin.webhook.component import Webhook

REGISTRY: dict[str, Callable[[ServeSettings], Component]] = {
    "admission": lambda s: Admission(),
    "extender": lambda s: Extender(s.extender, s.reservations),
    "ungater": lambda s: UngaterComponent(s.reservations),
    "plans": lambda s: Plans(),
    "api": lambda s: Api(s.api),
    "webhook": lambda s: Webhook(s.webhook),
    "multikueue": lambda s: MultiKueue(s.multikueue),
    "console": lambda s: WebConsole(s.console),
}
# What `serve` runs unless told: every component but the MultiKueue dispatcher, which only a
# manager cluster runs (it has no nodes; its gangs run in worker clusters), and the web console,
# which serves people and is turned on where wanted (the chart's console.enabled).
DEFAULT_COMPONENTS = tuple(c for c in REGISTRY if c not in ("multikueue", "console"))
