"""What the console's application and its pages share: the templates, the headers every
response carries, the console's parts a request reaches, and the shape of a page handler."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from gangplugin.console.access import Viewer
from gangplugin.console.live import Changes
from gangplugin.console.source import ConsoleSource
from gangplugin.kube.access import AccessReviews
from gangplugin.kube.client import Client

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")
# Inline style attributes carry the gangs' colours and the bars' widths; no inline script runs.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Console:
    """What the pages read and ask: the source of what they show, the API server's reviews of
    who may see it, and a client whose `as_user` writes as the user."""

    source: ConsoleSource
    reviews: AccessReviews
    client: Client
    changes: Changes


def console_of(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


#: A page's handler: the request, its user, and (for a POST) the form's fields. It runs in a
#: worker thread (it reads the read model and may ask the API server), never on the server's loop.
Handler = Callable[[Request, Viewer, dict[str, str]], Response]
