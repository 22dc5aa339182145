"""The web console in a real headless browser (Debian's Chromium, Playwright) against the real
cluster: the map shows a running gang in the UltraServer the gang check chose; a waiting gang's
explanation is the check's own; a node made NotReady turns red and its gang's replacement
appears without a reload; an edit with a bad duration shows the API server's (or the webhook's)
error by its field and changes nothing; a token with no rights sees nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page

from gangplugin.kube.client import NODES, Client
from gangplugin.kube.resources import GANG_POLICIES
from tests.support import grpcauth
from tests.support.browser import chromium, console_url, sign_in, signed_out
from tests.support.cluster import E2ECluster
from tests.support.gangs import US, check_of, running_gang, submit, workload
from tests.support.kube import wait_for, wait_until
from tests.support.nodes import fail_nodes, heal_nodes

#: Milliseconds a browser wait may take: the page follows the caches within seconds on an idle
#: machine; this only bounds a wait for something that must happen.
WAIT_MS = 120_000
RED = "rgb(210, 50, 45)"  # --bad in console.css: a NotReady node


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


@pytest.fixture(scope="module")
def admin(cluster: E2ECluster) -> str:
    return grpcauth.admin_token(cluster.client)


def node(page: Page, name: str) -> str:
    return f'span.node[data-node="{name}"]'


def in_ultraserver(ultraserver: str, name: str) -> str:
    return f'.domain.ultraserver[data-domain="UltraServer {ultraserver}"] span.node[data-node="{name}"]'


def title(page: Page, selector: str) -> str:
    return page.get_attribute(selector, "title") or ""


def test_the_map_shows_a_running_gang_in_the_ultraserver_the_check_chose(
    cluster: E2ECluster, namespace: str, gang_queue: Any, browser: BrowserContext, admin: str
) -> None:
    client = cluster.client
    job = submit(client, namespace, gang_queue(), 4)
    pods = running_gang(client, namespace, job, 4)
    wl = workload(client, namespace, job)
    chosen = check_of(wl)["podSetUpdates"][0]["nodeSelector"][US]
    gang = f"{namespace}/{wl['metadata']['name']} (Job/{job}): 1 pod"
    page = sign_in(browser, admin, "/map")
    colours = set()
    for p in pods:
        where = in_ultraserver(chosen, p["spec"]["nodeName"])
        # the node is drawn in the chosen UltraServer, in use by the gang (hover: its title)
        page.wait_for_function(
            "([sel, gang]) => { const e = document.querySelector(sel);"
            " return e && e.classList.contains('in-use') && e.title.includes(gang); }",
            arg=[where, gang],
            timeout=WAIT_MS,
        )
        colours.add(page.eval_on_selector(where, "e => getComputedStyle(e).backgroundColor"))
    assert len(colours) == 1, colours  # one colour per gang
    page.hover(in_ultraserver(chosen, pods[0]["spec"]["nodeName"]))
    room = page.text_content(f'.domain.ultraserver[data-domain="UltraServer {chosen}"] [data-room]') or ""
    assert room.startswith("room for a gang of "), room


def test_a_waiting_gangs_explanation_is_the_checks_own(
    cluster: E2ECluster, namespace: str, gang_queue: Any, browser: BrowserContext, admin: str
) -> None:
    client = cluster.client
    job = submit(client, namespace, gang_queue(), 19)  # more nodes than any UltraServer has
    name = workload(client, namespace, job)["metadata"]["name"]

    def pending_message() -> str | None:
        state = check_of(workload(client, namespace, job))
        return state.get("message") if state.get("state") == "Pending" and state.get("message") else None

    wait_for(pending_message, 120, "the gang check's Pending message")

    def shows_the_message(page: Page, selector: str) -> bool:
        # the check may rewrite its message meanwhile: the page shows the one the API holds
        message = pending_message()
        text = page.text_content(selector) if page.query_selector(selector) else ""
        return bool(message) and f"Gang check: {message}" in (text or "")

    page = sign_in(browser, admin, f"/gangs?namespace={namespace}")
    row = f'tr[data-gang="{namespace}/{name}"] td.why'
    wait_until(lambda: shows_the_message(page, row), 120, lambda: f"the row: {page.text_content('#live')}")
    page.goto(f"{console_url()}/gangs/{namespace}/{name}")
    explain = page.text_content("[data-explain]") or ""
    assert explain.startswith("Quota is reserved; the gang check holds it until the whole gang"), explain
    wait_until(
        lambda: shows_the_message(page, "[data-explain]"),
        120,
        lambda: f"the gang page: {page.text_content('[data-explain]')}",
    )


def test_a_node_made_not_ready_turns_red_and_its_gangs_replacement_appears_without_a_reload(
    cluster: E2ECluster, namespace: str, gang_queue: Any, browser: BrowserContext, admin: str
) -> None:
    client = cluster.client
    queue = gang_queue(nodeFailure="ReplaceFromSpare", sparesPerUltraServer=1, recoveryTimeout="5m")
    job = submit(client, namespace, queue, 4)
    pods = running_gang(client, namespace, job, 4)
    wl = workload(client, namespace, job)
    wait_for(lambda: workload(client, namespace, job)["status"].get("conditions"), 30, "conditions")
    chosen = check_of(wl)["podSetUpdates"][0]["nodeSelector"][US]
    before = {p["spec"]["nodeName"] for p in pods}
    victim = sorted(before)[0]
    gang = f"{namespace}/{wl['metadata']['name']}"
    page = sign_in(browser, admin, "/map")
    page.wait_for_selector(in_ultraserver(chosen, victim) + ".in-use", timeout=WAIT_MS)
    page.evaluate("window.__notReloaded = true")
    fail_nodes(client, victim)
    try:
        page.wait_for_selector(node(page, victim) + ".not-ready", timeout=WAIT_MS)
        assert page.eval_on_selector(node(page, victim), "e => getComputedStyle(e).backgroundColor") == RED
        # the pod of the failed node comes back on a spare of the same UltraServer
        replaced = page.wait_for_function(
            "([us, before, gang]) => [...document.querySelectorAll("
            ' `.domain.ultraserver[data-domain="UltraServer ${us}"] span.node.in-use`)]'
            " .filter(e => !before.includes(e.dataset.node) && e.title.includes(gang))"
            " .map(e => e.dataset.node)[0]",
            arg=[chosen, sorted(before), gang],
            timeout=WAIT_MS,
        ).json_value()
        assert replaced and replaced not in before
        assert page.evaluate("window.__notReloaded") is True  # followed the caches, no reload
        node_obj = client.get(NODES, replaced)
        assert node_obj["metadata"]["labels"][US] == chosen
    finally:
        heal_nodes(client, victim)


def _policy(client: Client, name: str) -> dict[str, Any]:
    return client.get(GANG_POLICIES, name)


def _edit(page: Page, policy: str, field: str, value: str) -> None:
    page.goto(f"{console_url()}/policies")
    page.click(f'[data-policy="{policy}"] button')
    page.wait_for_selector(f'form[data-form="{policy}"]', timeout=WAIT_MS)
    page.fill(f'form[data-form="{policy}"] [name="{field}"]', value)
    page.click(f'form[data-form="{policy}"] button[type=submit]')


def test_an_edit_with_a_bad_duration_shows_the_error_by_its_field_and_changes_nothing(
    cluster: E2ECluster, namespace: str, gang_queue: Any, browser: BrowserContext, admin: str
) -> None:
    client = cluster.client
    policy = gang_queue(readyTimeout="5m")  # the GangPolicy is named as its queue
    before = _policy(client, policy)
    page = sign_in(browser, admin, "/policies")

    _edit(page, policy, "spec.readyTimeout", "5 minutes")
    error = page.wait_for_selector('.error[data-error-field="spec.readyTimeout"]', timeout=WAIT_MS)
    assert error is not None and "spec.readyTimeout" in (error.text_content() or "")
    assert page.input_value(f'form[data-form="{policy}"] [name="spec.readyTimeout"]') == "5 minutes"
    assert _policy(client, policy)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    # a Topology that does not exist passes the schema: gangplugin's validating webhook refuses it
    _edit(page, policy, "spec.topologyName", "no-such-topology")
    error = page.wait_for_selector('.error[data-error-field="spec.topologyName"]', timeout=WAIT_MS)
    text = error.text_content() if error else ""
    assert "denied the request" in (text or "") and "no-such-topology" in (text or ""), text
    after = _policy(client, policy)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]

    # and a good edit is saved, as the signed-in user
    _edit(page, policy, "spec.readyTimeout", "7m")
    page.wait_for_selector(f'form[data-form="{policy}"] .saved', timeout=WAIT_MS)
    assert _policy(client, policy)["spec"]["readyTimeout"] == "7m"


def test_a_token_without_rights_sees_nothing(
    cluster: E2ECluster, namespace: str, gang_queue: Any, browser: BrowserContext
) -> None:
    client = cluster.client
    job = submit(client, namespace, gang_queue(), 2)
    running_gang(client, namespace, job, 2)
    name = workload(client, namespace, job)["metadata"]["name"]
    nodes = [n["metadata"]["name"] for n in client.list(NODES)["items"]]
    nobody = grpcauth.service_account_token(client, namespace, "nobody")
    page = sign_in(browser, nobody, "/map")
    for path in ("/map", "/gangs", f"/gangs/{namespace}/{name}", "/quota", "/policies"):
        page.goto(f"{console_url()}{path}")
        text = page.content()
        assert "You may not see this" in text, path
        assert f"system:serviceaccount:{namespace}:nobody may not" in text, path
        assert name not in text and job not in text, path
        assert not any(f'"{n}"' in text for n in nodes[:20]), path
    # a token the API server does not accept signs in nobody
    page = signed_out(browser)
    page.goto(f"{console_url()}/login")
    page.fill("textarea[name=token]", "not-a-token")
    page.click("button[type=submit]")
    page.wait_for_selector(".error", timeout=WAIT_MS)
    assert "did not accept" in (page.text_content(".error") or "")
    page.goto(f"{console_url()}/gangs")
    assert page.url.startswith(f"{console_url()}/login")
