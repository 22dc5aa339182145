"""The console's web application (Starlette, ASGI; served by granian as the extender and the
webhook are): sign-in, the pages (`pages.py`), the live event stream, the static assets.

Every request but the sign-in page and the static assets needs a token the API server accepts;
each page asks the API server whether its user may read (and, for the policy form, write) what
it shows. Pages are rendered on the server (Jinja2); htmx swaps a page's live region when the
stream says its topic changed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gangplugin.console import pages
from gangplugin.console.access import COOKIE, COOKIE_SECONDS, Viewer
from gangplugin.console.live import stream
from gangplugin.console.web import HERE, SECURITY_HEADERS, TEMPLATES, Console, Handler, console_of
from gangplugin.kube.access import ReviewUnavailable

log = logging.getLogger(__name__)


def token_of(request: Request) -> str | None:
    """The bearer token of the request's header, else of the sign-in cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.cookies.get(COOKIE) or None


class SignIn(Exception):
    """The request has no token the API server accepts: the user signs in (again)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def viewer_of(request: Request) -> Viewer:
    """The request's user; SignIn when there is none, ReviewUnavailable when the API server
    cannot be asked."""
    token = token_of(request)
    if token is None:
        raise SignIn("Sign in with a Kubernetes token.")
    identity = console_of(request).reviews.identity(token)
    if identity is None:
        raise SignIn("The API server did not accept that token (TokenReview); it may have expired.")
    if request.method == "POST" and "authorization" not in request.headers and not same_origin(request):
        raise SignIn("That form came from another site; nothing was changed.")
    return Viewer(identity, token, console_of(request).reviews)


def same_origin(request: Request) -> bool:
    """A cookie-carrying write must come from the console's own pages (SameSite=Strict already
    keeps other sites' requests cookie-less; this holds for browsers that send no SameSite)."""
    origin = request.headers.get("origin")
    return origin is not None and urlsplit(origin).netloc == request.headers.get("host")


def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint that needs a user; without one, a page goes to the sign-in form and an
    htmx request tells the browser to go there."""

    async def endpoint(request: Request) -> Response:
        try:
            who = await run_in_threadpool(viewer_of, request)
        except SignIn as why:
            return to_sign_in(request, why.message)
        except ReviewUnavailable as err:
            return HTMLResponse(f"<p class=error>{err}</p>", status_code=503, headers=SECURITY_HEADERS)
        form = {k: str(v) for k, v in (await request.form()).items()} if request.method == "POST" else {}
        response: Response = await run_in_threadpool(handler, request, who, form)
        response.headers.update(SECURITY_HEADERS)
        return response

    return endpoint


def to_sign_in(request: Request, message: str) -> Response:
    if request.headers.get("hx-request"):
        return Response(status_code=401, headers={"HX-Redirect": "/login", **SECURITY_HEADERS})
    if request.method == "GET" and not request.url.path.startswith("/events"):
        why = "?why=expired" if token_of(request) else ""
        nxt = f"{'&' if why else '?'}next={request.url.path}"
        return RedirectResponse(f"/login{why}{nxt}", status_code=303, headers=SECURITY_HEADERS)
    return login_page(request, message, 401)


def login_page(request: Request, message: str = "", status: int = 200) -> Response:
    nxt = request.query_params.get("next", "/map")
    response = TEMPLATES.TemplateResponse(
        request,
        "login.html",
        {"message": message, "next": nxt if nxt.startswith("/") and not nxt.startswith("//") else "/map"},
        status_code=status,
    )
    response.headers.update(SECURITY_HEADERS)
    return response


async def login_form(request: Request) -> Response:
    expired = request.query_params.get("why") == "expired"
    return login_page(request, "Your token is no longer accepted; sign in again." if expired else "")


async def login(request: Request) -> Response:
    form = await request.form()
    token = str(form.get("token") or "").strip()
    nxt = str(form.get("next") or "/map")
    if not token:
        return login_page(request, "Paste a token.", 400)
    try:
        identity = await run_in_threadpool(console_of(request).reviews.identity, token)
    except ReviewUnavailable as err:
        return login_page(request, str(err), 503)
    if identity is None:
        return login_page(request, "The API server did not accept that token (TokenReview).", 401)
    target = nxt if nxt.startswith("/") and not nxt.startswith("//") else "/map"
    response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(
        COOKIE, token, max_age=COOKIE_SECONDS, httponly=True, secure=True, samesite="strict", path="/"
    )
    log.info("console: %s signed in", identity.username)
    return response


async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
    return response


def events(request: Request, who: Viewer, form: dict[str, str]) -> Response:
    """The page's live stream (a signed-in user's; it carries topic names only)."""
    changes = console_of(request).changes
    resumed = "last-event-id" in request.headers
    return StreamingResponse(
        stream(changes, resumed), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
    )


async def root(request: Request) -> Response:
    return RedirectResponse("/map", status_code=303)


def make_app(console: Console) -> Starlette:
    routes: list[Any] = [
        Route("/", root),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/events", signed_in(events)),
        *[Route(path, signed_in(handler), methods=methods) for path, handler, methods in pages.ROUTES],
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.console = console
    return app
