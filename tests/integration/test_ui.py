"""The inspection page (`bus.ui`) in headless Chromium, over the real bus: two handler
processes behind NATS. Playwright drives Debian's Chromium (`/usr/bin/chromium`, or
`MEMBUS_CHROMIUM`); it never downloads a browser. The page's server is uvicorn on a free
port in this test's event loop.

`MEMBUS_UI_SCREENSHOT=docs/ui.png` makes the demo test write the README's screenshot there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

pytest.importorskip("playwright.async_api")
pytest.importorskip("uvicorn")

from conftest import Servers
from playwright.async_api import Browser, Locator, Page, async_playwright, expect
from starlette.applications import Starlette

from bus import MemoryBus
from bus.ui import UIServer, bind, make_app, make_server, serve
from deploy.embedded import EmbeddedStack, free_port

CHROMIUM = os.environ.get("MEMBUS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-gpu"]
pytestmark = [
    pytest.mark.transports("nats"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}"),
]
# Shutdown must not wait for uvicorn's graceful timeout (5 s): open streams end at once.
QUICK_SHUTDOWN_S = 2.5


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition the server exposes no event for."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - a counter, nothing to wait on
            await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        found = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield found
        finally:
            await found.close()


@dataclass
class RunningUI:
    url: str
    app: Starlette
    server: UIServer
    task: asyncio.Task[None]

    @property
    def streams(self) -> int:
        return int(self.app.state.ui.streams)

    async def stop(self) -> float:
        """Stop the server; how long it took."""
        started = time.monotonic()
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 10)
        return time.monotonic() - started


@contextlib.asynccontextmanager
async def running_ui(bus: MemoryBus) -> AsyncIterator[RunningUI]:
    app = make_app(bus, allowed_hosts=("127.0.0.1", "localhost"))
    server = make_server(app, log_config=None)
    sock = bind("127.0.0.1", 0)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    ui = RunningUI(f"http://127.0.0.1:{sock.getsockname()[1]}", app, server, task)
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    await task  # raises what stopped it
                await asyncio.sleep(0.01)
        yield ui
    finally:
        if not task.done():
            await ui.stop()
        sock.close()
    assert ui.streams == 0


@pytest.fixture
async def ui(bus: MemoryBus) -> AsyncIterator[RunningUI]:
    async with running_ui(bus) as running:
        yield running


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1440, "height": 1000})
    opened = await context.new_page()
    try:
        yield opened
    finally:
        await context.close()


async def wait_live(page: Page) -> None:
    """The page's event stream is subscribed: later events reach it."""
    await expect(page.get_by_test_id("events-status")).to_have_attribute("data-state", "live")


def item(page: Page, list_id: str, memory_id: str) -> Locator:
    found = page.get_by_test_id(list_id).locator(
        f'[data-testid="memory-item"][data-id="{memory_id}"]'
    )
    return found


async def instants(times: Locator) -> list[datetime]:
    """The exact instants of the page's `<time>` elements (their `datetime`)."""
    values = await times.evaluate_all("nodes => nodes.map((n) => n.getAttribute('datetime'))")
    return [datetime.fromisoformat(value) for value in values]


async def test_overview_search_detail_and_live_events(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    mem = bus.agent(workflow_id="wf_ui", agent_id="researcher")
    await mem.add("user_pref", "The user prefers concise answers", tags=["style"])
    await mem.add("fact", "The billing API allows 100 requests per minute", tags=["billing"])
    decision = await mem.add("decision", "Adopt PostgreSQL for every new service", tags=["db"])
    await mem.update(decision.id, content="Adopt PostgreSQL 16 for every new service")

    await page.goto(f"{ui.url}/?workflow=wf_ui")

    await expect(page.get_by_test_id("namespace")).to_have_text(bus.namespace)
    await expect(page.get_by_test_id("stat-total")).to_have_text("3")
    await expect(page.get_by_test_id("stat-workflow")).to_have_text("1")
    await expect(page.get_by_test_id("stat-general")).to_have_text("2")
    await expect(page.get_by_test_id("stat-embedder")).to_contain_text("hash")
    await expect(page.locator('[data-testid="type-chip"][data-type="decision"]')).to_contain_text(
        "1"
    )
    await expect(page.get_by_test_id("memory-list").get_by_test_id("memory-item")).to_have_count(3)

    await page.get_by_test_id("search-input").fill("PostgreSQL")
    await page.get_by_test_id("search-input").press("Enter")
    hit = item(page, "search-results", decision.id)
    await expect(hit).to_contain_text("Adopt PostgreSQL 16")
    await expect(hit.get_by_test_id("score")).to_have_text(re.compile(r"^\d\.\d{3}$"))
    await expect(page.get_by_test_id("search-summary")).to_contain_text("result")

    await hit.click()
    detail = page.get_by_test_id("detail")
    await expect(detail.get_by_test_id("detail-id")).to_have_text(decision.id)
    await expect(detail.get_by_test_id("detail-content")).to_have_text(
        "Adopt PostgreSQL 16 for every new service"
    )
    entries = detail.get_by_test_id("history-entry")
    await expect(entries).to_have_count(2)
    await expect(entries.nth(0)).to_have_attribute("data-event", "added")
    await expect(entries.nth(1)).to_have_attribute("data-event", "updated")
    await expect(entries.nth(1)).to_contain_text("Adopt PostgreSQL for every new service")
    anchor = detail.locator('[data-testid="timeline-item"][aria-current="true"]')
    await expect(anchor).to_have_attribute("data-id", decision.id)
    assert page.url.endswith(f"#memory={decision.id}")

    # Live: events arrive without a reload, newest on top; the overview follows.
    await wait_live(page)
    first = await mem.add("todo", "Benchmark the connection pool before launch")
    second = await mem.add("decision", "Use pgbouncer in transaction mode")
    events = page.get_by_test_id("events").get_by_test_id("event")
    await expect(events.first).to_have_attribute("data-id", second.id)
    await expect(events.nth(1)).to_have_attribute("data-id", first.id)
    await expect(events.first).to_contain_text("Use pgbouncer in transaction mode")
    await expect(events.first).to_contain_text("added")
    await expect(page.get_by_test_id("stat-total")).to_have_text("5")

    # A click on an event opens its memory.
    await events.nth(1).click()
    await expect(detail.get_by_test_id("detail-id")).to_have_text(first.id)


async def test_list_filters_and_a_workspace_with_a_state(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    await bus.create_workspace(
        "payments/api",  # a `/` in a name reaches the endpoints URL-encoded
        description="The payments service",
        root_folder="~/src/payments-api",
        purpose="Card payments and refunds",
        key_files=["app/charges.py"],
    )
    mem = bus.agent(workflow_id="wf_ui", agent_id="coder", workspace="payments/api")
    decision = await mem.add("decision", "Retry webhooks with backoff", tags=["payments"])
    fact = await mem.add("fact", "Refunds settle in 5 days", tags=["billing"])
    await mem.add("user_pref", "Prefers small pull requests", tags=["process"])
    await mem.create_state(
        "before-refactor",
        conversation_context="We agreed to move webhooks to a worker.",
        active_task="Extract webhook processing into a worker",
        active_files=["app/webhooks.py"],
        next_steps=["Move the signature check", "Add a retry queue"],
        description="Save point before the worker refactor",
    )

    await page.goto(f"{ui.url}/?workflow=wf_ui")
    listed = page.get_by_test_id("memory-list").get_by_test_id("memory-item")
    await expect(listed).to_have_count(4)  # the state is a (general) memory too
    await expect(page.get_by_test_id("list-count")).to_have_text("4 current")

    await page.get_by_test_id("type-filter").select_option("decision")
    await expect(listed).to_have_count(1)
    await expect(listed.first).to_have_attribute("data-id", decision.id)

    await page.get_by_test_id("type-filter").select_option("")
    await page.get_by_test_id("tag-filter").select_option("billing")
    await expect(listed).to_have_count(1)
    await expect(listed.first).to_have_attribute("data-id", fact.id)

    await page.get_by_test_id("workspaces").get_by_text("payments/api").click()
    await expect(page.get_by_test_id("workspace-name")).to_have_text("payments/api")
    await expect(page.get_by_test_id("workspace-detail")).to_contain_text("Card payments")
    await page.get_by_test_id("state-item").filter(has_text="before-refactor").click()
    state_box = page.get_by_test_id("state-detail")
    await expect(state_box).to_contain_text("Extract webhook processing into a worker")
    await expect(state_box).to_contain_text("Add a retry queue")
    saved = await mem.load_state("before-refactor")
    await state_box.get_by_role("button", name="open its memory").click()
    await expect(page.get_by_test_id("detail-id")).to_have_text(saved.id)
    await expect(page.get_by_test_id("detail-type")).to_have_text("state")


async def test_the_overview_and_the_list_say_what_their_counts_count(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    mem = bus.agent(workflow_id="wf_counts", agent_id="architect")
    now = datetime.now(UTC)
    old = await mem.add("decision", "Keep sessions in Redis")
    await mem.add("fact", "Sessions last 30 minutes", idle_ttl_s=3600)
    await mem.add("decision", "Keep sessions in Postgres", supersedes=[old.id])
    # Ended (v3): describe counts it with the superseded ones, the list leaves it out.
    await mem.add(
        "context",
        "Logins were slow during the migration",
        valid_from=now - timedelta(days=2),
        valid_until=now - timedelta(days=1),
    )

    await page.goto(f"{ui.url}/?workflow=wf_counts")
    await expect(page.get_by_test_id("stat-total")).to_have_text("4")
    await expect(page.get_by_test_id("stat-superseded")).to_have_text(
        "2 superseded or ended, left out of the list"
    )
    await expect(page.get_by_test_id("stat-idle")).to_have_text(
        "1 idle-bounded, forgotten once unread"
    )
    await expect(page.get_by_test_id("list-count")).to_have_text("2 current")
    await page.get_by_test_id("superseded").check()
    await expect(page.get_by_test_id("list-count")).to_have_text(
        "4 total, superseded and ended included"
    )


async def test_a_memory_panel_shows_its_validity_window_idle_ttl_and_expiry(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    mem = bus.agent(workflow_id="wf_v3", agent_id="planner")
    now = datetime.now(UTC).replace(microsecond=0)
    start, end = now - timedelta(days=2), now + timedelta(days=5)
    held = await mem.add(
        "fact",
        "The staging database is read-only this week",
        valid_from=start,
        valid_until=end,
        idle_ttl_s=86400,
    )
    plain = await mem.add("fact", "The team works from Leeds")

    await page.goto(f"{ui.url}/?workflow=wf_v3#memory={held.id}")
    detail = page.get_by_test_id("detail")
    await expect(detail.get_by_test_id("detail-id")).to_have_text(held.id)
    valid = detail.get_by_test_id("detail-valid")
    await expect(valid.locator("time")).to_have_count(2)
    assert await instants(valid.locator("time")) == [start, end]
    await expect(detail.get_by_test_id("detail-idle")).to_have_text(
        "forgotten after 1 d without a read"
    )
    # Idle: forgotten a day after its last access (adding it, or a read since).
    expires = detail.get_by_test_id("detail-expires")
    [expiry] = await instants(expires.locator("time"))
    assert now + timedelta(days=1) - timedelta(seconds=5) <= expiry
    assert expiry <= datetime.now(UTC) + timedelta(days=1)
    await expect(expires).to_contain_text(re.compile(r" · in (24 h|1 d)$"))
    # It holds now: no mark.
    await expect(detail.get_by_test_id("detail-mark")).to_have_count(0)

    await item(page, "memory-list", plain.id).click()
    await expect(detail.get_by_test_id("detail-id")).to_have_text(plain.id)
    await expect(detail.get_by_test_id("detail-valid")).to_have_text("from creation → open-ended")
    await expect(detail.get_by_test_id("detail-expires")).to_have_text("never")
    await expect(detail.get_by_test_id("detail-idle")).to_have_count(0)


async def test_the_timeline_marks_superseded_and_ended_memories(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    mem = bus.agent(workflow_id="wf_tl", agent_id="architect")
    now = datetime.now(UTC)
    redis = await mem.add("decision", "Keep sessions in Redis")
    freeze = await mem.add(
        "context",
        "Deploys are frozen for the launch",
        valid_from=now - timedelta(days=2),
        valid_until=now - timedelta(days=1),
    )
    postgres = await mem.add("decision", "Keep sessions in Postgres", supersedes=[redis.id])
    region = await mem.add(
        "fact", "The Frankfurt region opens next month", valid_from=now + timedelta(days=30)
    )

    await page.goto(f"{ui.url}/?workflow=wf_tl#memory={postgres.id}")
    detail = page.get_by_test_id("detail")
    entries = detail.get_by_test_id("timeline-item")
    await expect(entries).to_have_count(4)

    def entry(memory_id: str) -> Locator:
        return entries.and_(page.locator(f'[data-id="{memory_id}"]'))

    await expect(entry(redis.id)).to_have_attribute("data-mark", "superseded")
    await expect(entry(redis.id).get_by_test_id("mark")).to_have_text("superseded")
    await expect(entry(freeze.id)).to_have_attribute("data-mark", "ended")
    await expect(entry(freeze.id).get_by_test_id("mark")).to_have_text("ended")
    await expect(entry(region.id)).to_have_attribute("data-mark", "future")
    await expect(entry(region.id).get_by_test_id("mark")).to_have_text("not yet valid")
    assert await entry(postgres.id).get_attribute("data-mark") is None
    await expect(entry(postgres.id).get_by_test_id("mark")).to_have_count(0)

    # Their panels say so too.
    await entry(freeze.id).click()
    await expect(detail.get_by_test_id("detail-id")).to_have_text(freeze.id)
    await expect(detail.get_by_test_id("detail-mark")).to_have_text("ended")
    await entry(redis.id).click()
    await expect(detail.get_by_test_id("detail-id")).to_have_text(redis.id)
    await expect(detail.get_by_test_id("detail-mark")).to_have_text("superseded")
    # Superseding closed its window at the new memory's start.
    valid = detail.get_by_test_id("detail-valid")
    await expect(valid).to_contain_text("from creation → ")
    [closed] = await instants(valid.locator("time"))
    assert now - timedelta(seconds=5) <= closed <= datetime.now(UTC)


async def test_search_and_list_read_as_of_an_instant(
    bus: MemoryBus, ui: RunningUI, browser: Browser
) -> None:
    mem = bus.agent(workflow_id="wf_asof", agent_id="ops")
    now = datetime.now(UTC).replace(microsecond=0)
    moved = now - timedelta(days=3)
    leeds = await mem.add(
        "fact",
        "The office is in Leeds",
        valid_from=now - timedelta(days=30),
        valid_until=moved,
    )
    york = await mem.add("fact", "The office is in York", valid_from=moved)
    then = now - timedelta(days=10)
    then_param = then.strftime("%Y-%m-%dT%H:%M:%SZ")

    # In a time zone that is not UTC: the page's input is in local time.
    india = timezone(timedelta(hours=5, minutes=30))
    context = await browser.new_context(
        timezone_id="Asia/Kolkata", viewport={"width": 1440, "height": 1000}
    )
    try:
        page = await context.new_page()
        # The UI's server passes `as_of` on to the bus.
        for path in ("list", "search"):
            reply = await page.request.get(
                f"{ui.url}/api/{path}",
                params={"workflow": "wf_asof", "q": "office", "as_of": then_param},
            )
            body = await reply.json()
            found = body["memories"] if path == "list" else body["results"]
            assert [m["id"] for m in found] == [leeds.id], body
        refused = await page.request.get(f"{ui.url}/api/list?as_of=last+week")
        assert refused.status == 400
        assert (await refused.json())["code"] == "invalid_request"

        await page.goto(f"{ui.url}/?workflow=wf_asof")
        listed = page.get_by_test_id("memory-list").get_by_test_id("memory-item")
        results = page.get_by_test_id("search-results").get_by_test_id("memory-item")
        await expect(listed).to_have_count(1)
        await expect(listed.first).to_have_attribute("data-id", york.id)
        await page.get_by_test_id("search-input").fill("office")
        await page.get_by_test_id("search-input").press("Enter")
        await expect(results).to_have_count(1)
        await expect(results.first).to_have_attribute("data-id", york.id)

        local = then.astimezone(india).strftime("%Y-%m-%dT%H:%M:%S")
        await page.get_by_test_id("as-of-input").fill(local)
        await page.get_by_test_id("apply-scope").click()
        await expect(listed.first).to_have_attribute("data-id", leeds.id)
        await expect(listed).to_have_count(1)
        await expect(page.get_by_test_id("list-count")).to_contain_text("1 as of")
        await expect(page.get_by_test_id("superseded")).to_be_disabled()
        # The search ran again, as of then: Leeds, which has ended since.
        await expect(results.first).to_have_attribute("data-id", leeds.id)
        await expect(results).to_have_count(1)
        await expect(results.first.get_by_test_id("mark")).to_have_text("ended")
        await expect(page.get_by_test_id("search-summary")).to_contain_text("as of")
        await expect(page.get_by_test_id("scope-note")).to_contain_text("counts are of now")
        # The instant is in the address (UTC), and a reload keeps it.
        sent = re.search(r"[?&]as_of=([^&#]+)", page.url)
        assert sent is not None
        assert datetime.fromisoformat(sent.group(1).replace("%3A", ":")) == then
        await page.reload()
        await expect(page.get_by_test_id("as-of-input")).to_have_value(local)
        await expect(listed.first).to_have_attribute("data-id", leeds.id)

        await page.get_by_test_id("as-of-now").click()
        await expect(listed.first).to_have_attribute("data-id", york.id)
        await expect(listed).to_have_count(1)
        await expect(page.get_by_test_id("list-count")).to_have_text("1 current")
        await expect(page.get_by_test_id("superseded")).to_be_enabled()
        assert "as_of" not in page.url
    finally:
        await context.close()


async def test_memories_show_their_version_and_key(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    mem = bus.agent(workflow_id="wf_v4", agent_id="planner")
    await mem.add("context", "Plan: draft the outline", key="plan")
    keyed = await mem.add("context", "Plan: write chapter one", key="plan")
    assert keyed.replaced and keyed.version == 2
    plain = await mem.add("decision", "Write the book in English")
    await mem.update(plain.id, importance=0.9, expected_version=1)
    await mem.update(plain.id, importance=0.8, expected_version=2)

    # The page's data: the list (compact previews) carries both.
    listed = await (await page.request.get(f"{ui.url}/api/list?workflow=wf_v4")).json()
    by_id = {m["id"]: m for m in listed["memories"]}
    assert (by_id[keyed.id]["version"], by_id[keyed.id]["key"]) == (2, "plan")
    assert (by_id[plain.id]["version"], by_id[plain.id]["key"]) == (3, None)
    assert by_id[keyed.id]["preview"] == "Plan: write chapter one"

    await page.goto(f"{ui.url}/?workflow=wf_v4")
    keyed_item = item(page, "memory-list", keyed.id)
    await expect(keyed_item.get_by_test_id("version")).to_have_text("v2")
    await expect(keyed_item.get_by_test_id("key")).to_have_text("plan")
    plain_item = item(page, "memory-list", plain.id)
    await expect(plain_item.get_by_test_id("version")).to_have_text("v3")
    await expect(plain_item.get_by_test_id("key")).to_have_count(0)

    await page.get_by_test_id("search-input").fill("chapter")
    await page.get_by_test_id("search-input").press("Enter")
    hit = item(page, "search-results", keyed.id)
    await expect(hit.get_by_test_id("key")).to_have_text("plan")
    await expect(hit.get_by_test_id("version")).to_have_text("v2")

    await keyed_item.click()
    detail = page.get_by_test_id("detail")
    await expect(detail.get_by_test_id("detail-id")).to_have_text(keyed.id)
    await expect(detail.get_by_test_id("detail-key")).to_have_text("plan")
    await expect(detail.get_by_test_id("detail-version")).to_have_text("2")
    anchor = detail.locator('[data-testid="timeline-item"][aria-current="true"]')
    await expect(anchor.get_by_test_id("version")).to_have_text("v2")
    await expect(detail.get_by_test_id("history-entry")).to_have_count(2)

    await plain_item.click()
    await expect(detail.get_by_test_id("detail-version")).to_have_text("3")
    await expect(detail.get_by_test_id("detail-key")).to_have_count(0)

    # A live event says the version the write left.
    await wait_live(page)
    await mem.add("context", "Plan: write chapter two", key="plan")
    event = page.get_by_test_id("events").get_by_test_id("event").first
    await expect(event).to_have_attribute("data-id", keyed.id)
    await expect(event.get_by_test_id("version")).to_have_text("v3")


async def test_errors_are_json_and_the_page_shows_them(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    api = page.request
    missing = await api.get(f"{ui.url}/api/memory/no-such-id")
    assert missing.status == 404
    assert (await missing.json())["code"] == "not_found"
    bad_int = await api.get(f"{ui.url}/api/list?limit=many")
    assert bad_int.status == 400
    assert (await bad_int.json())["code"] == "invalid_request"
    bad_mode = await api.get(f"{ui.url}/api/search?q=x&mode=psychic")
    assert bad_mode.status == 400
    refused = await api.get(f"{ui.url}/api/list?limit=100000")  # refused by the handlers
    assert refused.status == 400
    assert "limit" in (await refused.json())["error"]
    no_state = await api.get(f"{ui.url}/api/states/nowhere/nothing")
    assert no_state.status == 404

    await page.goto(f"{ui.url}/#memory=no-such-id")
    await expect(page.get_by_test_id("error")).to_be_visible()
    await expect(page.get_by_test_id("error-text")).to_contain_text("not_found")
    await expect(page.get_by_test_id("detail").get_by_test_id("detail-error")).to_be_visible()


async def test_untrusted_content_is_shown_as_text(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    payload = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    added = await bus.agent().add("fact", payload, tags=["xss"])

    await page.goto(f"{ui.url}/#memory={added.id}")

    await expect(page.get_by_test_id("detail-content")).to_have_text(payload)
    await expect(item(page, "memory-list", added.id)).to_contain_text("<img src=x")
    assert await page.locator("#detail img, #memory-list img, #memory-list script").count() == 0
    assert await page.evaluate("window.__pwned") is None


async def test_deletes_and_rejected_durable_writes_show_as_events(
    bus: MemoryBus, ui: RunningUI, page: Page
) -> None:
    mem = bus.agent(workflow_id="wf_ui", agent_id="janitor")
    doomed = await mem.add("context", "Scratch notes for this run")
    await page.goto(ui.url)
    await wait_live(page)

    await mem.delete([doomed.id])
    accepted = await mem.durable.update("no-such-id", importance=0.5)

    events = page.get_by_test_id("events").get_by_test_id("event")
    rejected = events.and_(page.locator('[data-action="rejected"]'))
    await expect(rejected).to_contain_text("not_found")
    await expect(rejected).to_contain_text(accepted.request_id)
    deleted = events.and_(page.locator(f'[data-id="{doomed.id}"]'))
    await expect(deleted).to_have_attribute("data-action", "deleted")
    await expect(deleted).not_to_have_class(re.compile("openable"))


async def test_event_streams_end_on_disconnect_and_on_shutdown(
    bus: MemoryBus, ui: RunningUI, browser: Browser
) -> None:
    context = await browser.new_context()
    try:
        first = await context.new_page()
        await first.goto(ui.url)
        await wait_live(first)
        second = await context.new_page()
        await second.goto(ui.url)
        await wait_live(second)
        assert ui.streams == 2

        await first.close()  # the browser drops the connection: its stream ends
        await until(lambda: ui.streams == 1)

        took = await ui.stop()  # with the second stream still open
        assert took < QUICK_SHUTDOWN_S
        assert ui.streams == 0
    finally:
        await context.close()


async def test_other_host_names_are_refused(ui: RunningUI) -> None:
    """DNS rebinding: a request naming another host gets nothing."""
    port = int(ui.url.rsplit(":", 1)[1])

    async def status(host: str) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = f"GET /api/info HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        return int(line.split()[1])

    assert await status("evil.example") == 403
    assert await status(f"evil.example:{port}") == 403
    assert await status(f"localhost:{port}") == 200


async def test_serve_runs_until_cancelled(
    servers: Servers, handlers: EmbeddedStack, ns: str, browser: Browser
) -> None:
    port = free_port()
    task = asyncio.create_task(serve(servers.nats_url, ns, port=port, log_config=None))
    page = await browser.new_page()
    try:
        async with asyncio.timeout(10):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    assert not task.done(), task
                    await asyncio.sleep(0.02)
                    continue
                writer.close()
                await writer.wait_closed()
                break
        await page.goto(f"http://localhost:{port}/")
        await expect(page.get_by_test_id("namespace")).to_have_text(ns)
        await wait_live(page)
    finally:
        await page.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, QUICK_SHUTDOWN_S)
    # The port is free again.
    bind("127.0.0.1", port).close()


# ------------------------------------------------------------------- the README screenshot


async def populate(bus: MemoryBus) -> dict[str, str]:
    """Realistic memories of two workflows, a workspace and a state; some superseded, ended
    or forgotten when idle (v3)."""
    now = datetime.now(UTC)
    planner = bus.agent(workflow_id="wf_checkout", agent_id="planner")
    coder = bus.agent(workflow_id="wf_checkout", agent_id="coder", session_id="s-0412")
    writer = bus.agent(workflow_id="wf_onboarding", agent_id="writer")
    ids: dict[str, str] = {}
    # First, so that the selected memory's timeline shows them near the top.
    once = await planner.add(
        "decision", "Retry a failed webhook once, after 10 minutes", tags=["payments", "webhooks"]
    )
    retry = await planner.add(
        "decision",
        "Retry failed webhooks up to 3 times",
        tags=["payments", "webhooks"],
        supersedes=[once.id],
        valid_from=now - timedelta(days=2),
        idle_ttl_s=90 * 86400,
    )
    ids["once"], ids["retry"] = once.id, retry.id
    freeze = await planner.add(
        "context",
        "Code freeze on the checkout until the 3.2.1 hotfix ships",
        tags=["release"],
        valid_from=now - timedelta(days=6),
        valid_until=now - timedelta(days=1),
    )
    ids["freeze"] = freeze.id
    await planner.add(
        "identity", "The user is Maya Chen, staff engineer on the payments team", tags=["team"]
    )
    await planner.add(
        "user_pref", "Prefers concise answers with runnable code examples", tags=["style"]
    )
    await writer.add("user_pref", "Use British spelling in customer-facing copy", tags=["copy"])
    await coder.add(
        "fact",
        "The payments API allows 100 requests per minute per merchant",
        tags=["payments", "limits"],
    )
    await coder.add(
        "knowledge",
        "Stripe webhooks can arrive out of order: deduplicate on the event id",
        tags=["payments", "webhooks"],
    )
    await planner.add(
        "goal", "Ship the one-page checkout by 14 June", tags=["release"], importance=0.95
    )
    await planner.add(
        "decision", "Send an idempotency key with every POST to /charges", tags=["payments", "api"]
    )
    await coder.add(
        "observation",
        title="Checkout latency regression",
        facts=["p95 rose from 420 ms to 900 ms after 3.2.0", "An N+1 query in cart totals"],
        narrative="Profiling the staging checkout showed one query per cart line.",
        related_files=["app/cart/totals.py"],
        related_people=["Maya Chen"],
        tags=["perf"],
    )
    await writer.add(
        "decision",
        "Send the welcome email only once the address is verified",
        tags=["email"],
    )
    await writer.add(
        "fact",
        "Sign-up drop-off is highest at the bank-linking step (38%)",
        scope="workflow",
        tags=["metrics"],
    )
    await planner.update(
        retry.id,
        content="Retry failed webhooks with exponential backoff, at most 5 attempts",
        importance=0.85,
    )
    await bus.create_workspace(
        "payments-api",
        description="The payments service monorepo",
        root_folder="~/src/payments-api",
        purpose="Card payments, refunds and webhooks for the checkout",
        workflows=["make test", "make deploy-staging"],
        key_files=["app/charges.py", "app/webhooks.py", "docs/runbook.md"],
        preferences={"language": "python", "formatter": "ruff"},
    )
    await bus.create_workspace(
        "onboarding-site",
        description="Marketing site and the sign-up flow",
        root_folder="~/src/onboarding",
        purpose="Sign-up, verification and the welcome journey",
    )
    await bus.agent(workflow_id="wf_checkout", agent_id="coder").create_state(
        "before-webhook-worker",
        workspace="payments-api",
        conversation_context="We agreed to move webhook handling into a background worker.",
        active_task="Extract webhook processing into a background worker",
        active_files=["app/webhooks.py", "app/worker.py"],
        next_steps=["Move the signature check into middleware", "Add a retry queue"],
        description="Save point before the worker refactor",
        tags=["refactor"],
    )
    return ids


async def live_activity(bus: MemoryBus) -> None:
    """What agents do while someone watches the page."""
    coder = bus.agent(workflow_id="wf_checkout", agent_id="coder")
    reviewer = bus.agent(workflow_id="wf_checkout", agent_id="reviewer")
    await coder.add(
        "todo", "Load-test the checkout flow before the Friday release", tags=["testing"]
    )
    redis = await reviewer.add("decision", "Keep checkout sessions in Redis")
    await reviewer.add(
        "context", "Review: refund_handler.py swallows Stripe errors", tags=["review"]
    )
    await reviewer.add(
        "decision",
        "Keep checkout sessions in Postgres: one store fewer to run",
        supersedes=[redis.id],
        tags=["db"],
    )
    await coder.add("user_pref", "Prefers concise answers with runnable code examples")


async def test_demo_page_and_screenshot(
    servers: Servers, handlers: EmbeddedStack, browser: Browser, tmp_path: Path
) -> None:
    namespace = f"acme-{uuid.uuid4().hex[:4]}"
    async with await MemoryBus.connect(servers.nats_url, namespace=namespace) as bus:
        ids = await populate(bus)
        async with running_ui(bus) as running:
            context = await browser.new_context(
                viewport={"width": 1440, "height": 1080}, device_scale_factor=1
            )
            try:
                page = await context.new_page()
                await page.goto(f"{running.url}/?workflow=wf_checkout")
                await wait_live(page)
                await live_activity(bus)
                events = page.get_by_test_id("events").get_by_test_id("event")
                await expect(events).to_have_count(6)
                await expect(page.get_by_test_id("stat-total")).to_have_text("16")
                await expect(page.get_by_test_id("stat-superseded")).to_have_text(
                    "3 superseded or ended, left out of the list"
                )

                await page.get_by_test_id("search-input").fill("webhooks")
                await page.get_by_test_id("search-mode").select_option("text")
                await page.get_by_test_id("search-button").click()
                hit = item(page, "search-results", ids["retry"])
                await hit.click()
                await expect(page.get_by_test_id("history-entry")).to_have_count(2)
                await expect(page.get_by_test_id("detail-idle")).to_be_visible()
                timeline = page.get_by_test_id("detail").get_by_test_id("timeline-item")
                for name, mark in (("once", "superseded"), ("freeze", "ended")):
                    marked = timeline.and_(page.locator(f'[data-id="{ids[name]}"]'))
                    await expect(marked).to_have_attribute("data-mark", mark)
                await page.get_by_test_id("workspaces").get_by_text("payments-api").click()
                await page.get_by_test_id("state-item").first.click()
                await expect(page.get_by_test_id("state-detail")).to_contain_text(
                    "background worker"
                )
                await page.get_by_test_id("list-refresh").click()
                await expect(
                    page.get_by_test_id("memory-list").get_by_test_id("memory-item")
                ).to_have_count(13)

                target = Path(os.environ.get("MEMBUS_UI_SCREENSHOT") or tmp_path / "ui.png")
                await page.evaluate("window.scrollTo(0, 0)")
                png = await page.screenshot(path=str(target))
                assert len(png) > 10_000
            finally:
                await context.close()
