"""A real browser for the console's end-to-end tests: Debian's Chromium, headless, driven by
Playwright (never `playwright install`: the pinned pip package drives the system's Chromium).

Started as root is: no sandbox, no GPU, and none of Chromium's own network traffic (component
updates, sync, QUIC), which a closed network refuses; a new empty profile each time. The console's
certificate is signed by the cluster's own CA, which Chromium does not know: the context skips
certificate checks (the console's TLS itself is what the tests reach it through).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, sync_playwright

from gangplugin.localcluster.cluster import Ports
from tests.support.cluster import e2e_port_base

CHROMIUM = Path(os.environ.get("GANGPLUGIN_CHROMIUM", "/usr/bin/chromium"))
FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def console_url() -> str:
    """The session cluster's console: GANGPLUGIN_CONSOLE_URL, else the local cluster's replica 1."""
    return os.environ.get("GANGPLUGIN_CONSOLE_URL") or (
        f"https://127.0.0.1:{Ports(base=e2e_port_base()).gangplugin_console()}"
    )


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[BrowserContext]:
    if not CHROMIUM.exists():
        raise AssertionError(
            f"{CHROMIUM} is missing: apt-get install -y chromium chromium-driver (.ci/run does), "
            "or point GANGPLUGIN_CHROMIUM at a Chromium"
        )
    profile = tempfile.mkdtemp(prefix="gangplugin-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=list(FLAGS),
                ignore_https_errors=True,
                viewport={"width": width, "height": height},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def signed_out(context: BrowserContext) -> Page:
    """A new page with nobody signed in. The pages of an earlier user are closed first: a live
    page whose cookie is gone is sent to the sign-in form by its next refresh, which would cut
    short a navigation of the same page."""
    for old in context.pages:
        old.close()
    context.clear_cookies()
    return context.new_page()


def sign_in(context: BrowserContext, token: str, path: str = "/map") -> Page:
    """A new page signed in with `token` through the sign-in form."""
    page = signed_out(context)
    page.goto(f"{console_url()}{path}")
    page.fill("textarea[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_load_state("domcontentloaded")
    return page
