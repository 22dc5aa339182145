"""The console as a browser meets it: no page without a token the API server accepts; each
page shows only what its user may read (a SubjectAccessReview per read and write); a policy edit
is one request made as the user, refused whole with the field named; the cookie is HttpOnly,
Secure and SameSite=Strict."""

from __future__ import annotations

import asyncio

import orjson

from gangplugin.console.live import Changes, stream
from gangplugin.console.model import Topic
from gangplugin.kube.client import PODS, WORKLOADS
from tests.support.caches import owned, pod, workload
from tests.support.console_world import ADMIN, NOBODY, READER, World, standard

US = "topology.k8s.aws/ultraserver-id"
PAGES = ("/map", "/gangs", "/quota", "/policies", "/gangs/team-a/job-a")


def world_with_a_gang() -> World:
    world = World()
    standard(world)
    world.put(
        WORKLOADS, owned(workload("job-a", 2, check="Ready", admitted=True, pinned={US: "us-1"}), name="a")
    )
    world.put(
        PODS, pod("a-0", "job-a", node="us1-0", ready=True), pod("a-1", "job-a", node="us1-1", ready=True)
    )
    return world


def test_no_token_no_page() -> None:
    world = world_with_a_gang()
    with world.browser() as browser:
        for path in PAGES:
            r = browser.get(path, follow_redirects=False)
            assert (r.status_code, r.headers["location"]) == (303, f"/login?next={path}"), path
        r = browser.get("/map/view", headers={"HX-Request": "true"})
        assert (r.status_code, r.headers["HX-Redirect"]) == (401, "/login")
        assert browser.get("/events").status_code == 401  # a stream is no page to send elsewhere
        assert browser.get("/login").status_code == 200
        assert browser.get("/static/console.css").status_code == 200  # no data in it


def test_a_token_the_api_server_refuses_signs_in_nobody() -> None:
    world = world_with_a_gang()
    with world.browser() as browser:
        r = browser.post("/login", data={"token": "forged", "next": "/map"}, follow_redirects=False)
        assert r.status_code == 401 and "did not accept" in r.text
        assert "gangplugin-console-token" not in r.headers.get("set-cookie", "")
    with world.browser("forged") as browser:
        r = browser.get("/map", follow_redirects=False)
        assert r.headers["location"].startswith("/login?why=expired")


def test_sign_in_sets_a_strict_cookie() -> None:
    world = world_with_a_gang()
    with world.browser() as browser:
        r = browser.post("/login", data={"token": ADMIN, "next": "/gangs"}, follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, "/gangs")
        cookie = r.headers["set-cookie"].lower()
        for part in ("httponly", "secure", "samesite=strict", "path=/"):
            assert part in cookie, cookie
        # somewhere else than the console is never a target
        r = browser.post("/login", data={"token": ADMIN, "next": "//evil.test/"}, follow_redirects=False)
        assert r.headers["location"] == "/map"


def test_a_user_with_no_rights_sees_nothing() -> None:
    world = world_with_a_gang()
    with world.browser(NOBODY) as browser:
        for path in PAGES:
            r = browser.get(path)
            assert r.status_code in (200, 403), path
            for secret in (
                "job-a",
                "us1-0",
                "Job/a",
                'data-queue="training"',
                "team-a/training",
                "Ready within",
            ):
                assert secret not in r.text, (path, secret)
            assert "You may not see this: nobody may not" in r.text, path
    assert all(r["user"] == "nobody" for r in world.api.reviews)


def test_a_reader_sees_the_namespaces_it_may_list_and_nothing_of_others() -> None:
    world = world_with_a_gang()
    world.api.rights["reader"] = {("list", "nodes", ""), ("list", "workloads", "team-b")}
    with world.browser(READER) as browser:
        page = browser.get("/map").text
        assert 'data-node="us1-0"' in page and "job-a" not in page
        assert "a gang of a namespace you may not see: 1 pod" in page
        assert "You may not see this" in browser.get("/gangs").text  # team-a is not theirs
        assert browser.get("/gangs/team-a/job-a").status_code == 403
    world.api.rights["reader"].add(("list", "workloads", "team-a"))
    world.api.rights["reader"].add(("get", "workloads", "team-a"))
    with world.browser(READER) as browser:
        assert "team-a/job-a (Job/a): 1 pod" in browser.get("/map").text
        gangs = browser.get("/gangs").text
        assert 'data-gang="team-a/job-a"' in gangs and "Only the namespaces" in gangs
        assert browser.get("/policies").status_code == 403


def test_pages_of_an_admin() -> None:
    world = world_with_a_gang()
    with world.browser(ADMIN) as browser:
        assert browser.get("/map").status_code == 200
        gangs = browser.get("/gangs?namespace=team-a").text
        assert 'data-gang="team-a/job-a"' in gangs and 'hx-get="/gangs/view?namespace=team-a"' in gangs
        assert 'data-gang="team-a/job-a"' not in browser.get("/gangs?namespace=team-b").text
        gang = browser.get("/gangs/team-a/job-a").text
        assert 'data-pod="a-0"' in gang and "Running in UltraServer us-1" not in gang  # core's words:
        assert "Running in topology.k8s.aws/ultraserver-id=us-1: all 2 pods Ready." in gang
        assert browser.get("/gangs/team-a/nothing").status_code == 404
        quota = browser.get("/quota").text
        assert 'data-queue="training"' in quota
        policies = browser.get("/policies").text
        assert 'data-policy="default"' in policies and 'hx-get="/policies/default/edit"' in policies
        r = browser.get("/map")
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_a_policy_edit_is_one_patch_made_as_the_user() -> None:
    world = world_with_a_gang()
    world.api.answer_write = (
        200,
        {
            "apiVersion": "gangplugin.io/v1alpha1",
            "kind": "GangPolicy",
            "metadata": {"name": "default", "resourceVersion": "6"},
            "spec": {"readyTimeout": "7m"},
        },
    )
    with world.browser(ADMIN) as browser:
        form = browser.get("/policies/default/edit").text
        assert 'name="resourceVersion" value="5"' in form
        r = browser.post(
            "/policies/default",
            data={"resourceVersion": "5", "spec.readyTimeout": "7m"},
            headers={"Origin": "https://console.test", "HX-Request": "true"},
        )
        assert r.status_code == 200 and "Saved." in r.text
    (write,) = world.api.writes
    assert write.method == "PATCH" and write.url.path == "/apis/gangplugin.io/v1alpha1/gangpolicies/default"
    assert write.headers["authorization"] == f"Bearer {ADMIN}"  # the user's own token
    assert write.headers["content-type"] == "application/merge-patch+json"
    assert orjson.loads(write.content) == {
        "metadata": {"resourceVersion": "5"},
        "spec": {"readyTimeout": "7m"},
    }


def test_a_refused_edit_names_the_field_and_keeps_what_was_typed() -> None:
    world = world_with_a_gang()
    message = (
        'GangPolicy.gangplugin.io "default" is invalid: spec.readyTimeout: Invalid value: "5 minutes": '
        "spec.readyTimeout in body should match '^([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$'"
    )
    world.api.answer_write = (422, {"kind": "Status", "reason": "Invalid", "message": message, "code": 422})
    with world.browser(ADMIN) as browser:
        r = browser.post(
            "/policies/default",
            data={"resourceVersion": "5", "spec.readyTimeout": "5 minutes"},
            headers={"Origin": "https://console.test"},
        )
    assert r.status_code == 422
    assert 'data-error-field="spec.readyTimeout"' in r.text and 'class="invalid"' in r.text
    assert 'value="5 minutes"' in r.text and "Not saved" in r.text
    assert len(world.api.writes) == 1


def test_a_cookie_write_from_another_site_is_refused() -> None:
    world = world_with_a_gang()
    with world.browser(ADMIN) as browser:
        r = browser.post(
            "/policies/default", data={"spec.readyTimeout": "1m"}, headers={"Origin": "https://evil.test"}
        )
        assert r.status_code == 401 and "another site" in r.text
    assert world.api.writes == []


def test_a_user_who_may_not_edit_gets_no_form_and_cannot_write() -> None:
    world = world_with_a_gang()
    world.api.rights["reader"] = {("list", "gangpolicies", "")}
    with world.browser(READER) as browser:
        page = browser.get("/policies").text
        assert 'data-policy="default"' in page and "Read-only" in page and "/edit" not in page
        assert browser.get("/policies/default/edit").status_code == 403
        # the write itself is the API server's to refuse: it is sent as the reader
        world.api.answer_write = (
            403,
            {"kind": "Status", "reason": "Forbidden", "message": "forbidden", "code": 403},
        )
        r = browser.post(
            "/policies/default", data={"spec.readyTimeout": "1m"}, headers={"Origin": "https://console.test"}
        )
        assert r.status_code == 422 and "forbidden" in r.text
    assert world.api.writes[0].headers["authorization"] == f"Bearer {READER}"


def test_the_stream_names_changed_topics_once_per_burst() -> None:
    async def run(resumed: bool) -> list[str]:
        changes = Changes(asyncio.get_running_loop())
        events = stream(changes, resumed, coalesce=0.05, keepalive=60)
        lines = [await anext(events)]  # connected, and subscribed
        if not resumed:
            for topic in (Topic.GANGS, Topic.MAP, Topic.GANGS):  # from another thread, as handlers do
                await asyncio.to_thread(changes.publish, topic)
        lines += [await anext(events) for _ in range(2 if not resumed else len(Topic))]
        await events.aclose()
        assert changes.subscribers() == 0
        return lines

    connected, first, second = asyncio.run(run(False))
    assert connected.startswith("retry: ")
    assert (first, second) == (
        "id: gangs\nevent: gangs\ndata: gangs\n\n",
        "id: map\nevent: map\ndata: map\n\n",
    )
    # a browser that lost its stream is told every topic when it is back: it missed what changed
    resumed = asyncio.run(run(True))[1:]
    assert sorted(line.split("\n")[1] for line in resumed) == sorted(f"event: {t.value}" for t in Topic)
