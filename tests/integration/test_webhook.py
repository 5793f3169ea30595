"""`membus webhook` against the real bus: the installed script as a process of its own, two
handler processes publishing the events, and an HTTP receiver in this process that checks
every signature, fails when told to (503s, or no listener at all), and records what it took.

Receivers answer within milliseconds here, and webhooks run with `--max-backoff 1`, so that
an outage of a few seconds is a dozen failed attempts; the stream keeps events for 7 days
and the backoff stays capped, so a minute-long outage is the same case, only longer.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Servers
from nats.aio.client import Client as NatsClient
from nats.js.errors import NotFoundError

from bus import MemoryBus
from bus.webhook import consumer_name, stream_name

pytestmark = [pytest.mark.transports("nats"), pytest.mark.processes]
MEMBUS = str(Path(sys.executable).with_name("membus"))
SECRET = "s3cret-for-tests"
WAIT_S = 30.0


@dataclass(frozen=True)
class Delivery:
    path: str
    body: bytes
    headers: dict[str, str]

    @property
    def event_id(self) -> str:
        return self.headers["X-Membus-Event-Id"]

    @property
    def sequence(self) -> int:
        return int(self.event_id.rsplit(":", 1)[1])


@dataclass
class Receiver:
    """A webhook receiver on a free port. `mode`: "up" (204 to a well-signed POST), "503",
    or (`go_down`) no listener at all, so that connections are refused."""

    secret: str
    port: int = 0
    mode: str = "up"
    # Bodies containing this are refused with 422 (a poisoned event).
    poison: bytes | None = None
    taken: list[Delivery] = field(default_factory=list)
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def come_up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.answer(self.path, body, dict(self.headers.items()))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        if not self.port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.mode = "up"

    def go_down(self) -> None:
        """Stop listening: connections are refused until `come_up`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        with self._lock:
            if not hmac.compare_digest(headers.get("X-Membus-Signature", ""), expected):
                self.failed["bad_signature"] += 1
                return 401
            if self.mode == "503":
                self.failed["503"] += 1
                return 503
            if self.poison is not None and self.poison in body:
                self.failed["poison"] += 1
                return 422
            self.taken.append(Delivery(path, body, headers))
            return 204

    def at(self, path: str = "/hook") -> list[Delivery]:
        with self._lock:
            return [d for d in self.taken if d.path == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(SECRET)
    found.come_up()
    yield found
    found.go_down()


@dataclass
class WebhookProcess:
    proc: asyncio.subprocess.Process
    log_path: Path

    def logs(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text(encoding="utf-8").splitlines()
        found = []
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                found.append(json.loads(line))
        return found

    def events(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.logs() if entry.get("event") == name]

    async def stop(self) -> int:
        """SIGTERM, as a supervisor stops it; its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 20)


async def until(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def webhook_command(ns: str, url: str, *args: str) -> list[str]:
    return [MEMBUS, "webhook", "--url", url, "-n", ns, "--max-backoff", "1", *args]


@pytest.fixture
async def webhooks(servers: Servers, nc: NatsClient, tmp_path: Path) -> AsyncIterator[Any]:
    """Start `membus webhook` processes (ready: their consumer exists); all stopped after,
    and the namespaces' event streams deleted."""
    started: list[WebhookProcess] = []
    namespaces: set[str] = set()

    async def start(
        ns: str, url: str, *args: str, env: dict[str, str] | None = None
    ) -> WebhookProcess:
        log_path = tmp_path / f"webhook-{len(started)}.log"
        command = webhook_command(ns, url, *args)
        namespaces.add(ns)
        with log_path.open("wb") as log_file:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                env={**os.environ, "MEMBUS_NATS_URL": servers.nats_url, **(env or {})},
            )
        hook = WebhookProcess(proc, log_path)
        started.append(hook)

        def ready() -> bool:
            assert proc.returncode is None, f"membus webhook exited: {log_path.read_text()}"
            return bool(hook.events("webhook.ready"))

        await until(ready, "membus webhook to be ready")
        return hook

    yield start
    for hook in started:
        if hook.proc.returncode is None:
            hook.proc.terminate()
            try:
                await asyncio.wait_for(hook.proc.wait(), 20)
            except TimeoutError:
                hook.proc.kill()
                await hook.proc.wait()
    js = nc.jetstream()
    for ns in namespaces:
        with contextlib.suppress(Exception):
            await js.delete_stream(stream_name(ns))


@dataclass
class Published:
    """Every event the handlers publish in a namespace, as NATS carried it."""

    bodies: list[bytes] = field(default_factory=list)
    subjects: dict[bytes, str] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def published(nc: NatsClient, ns: str) -> AsyncIterator[Published]:
    seen = Published()

    async def on_event(msg: Any) -> None:
        seen.bodies.append(msg.data)
        seen.subjects[msg.data] = msg.subject

    sub = await nc.subscribe(f"mem.{ns}.events.>", cb=on_event)
    try:
        yield seen
    finally:
        await sub.unsubscribe()


def assert_once_in_order(taken: list[Delivery], seen: Published) -> None:
    """Each published event was taken exactly once, with its body as published and its
    subject, in the stream's order, every one signed."""
    ids = [d.event_id for d in taken]
    assert len(set(ids)) == len(ids), f"an event came twice: {ids}"
    sequences = [d.sequence for d in taken]
    assert sequences == sorted(sequences), f"out of stream order: {sequences}"
    assert collections.Counter(d.body for d in taken) == collections.Counter(seen.bodies)
    for d in taken:
        assert d.headers["Content-Type"] == "application/json"
        assert d.headers["X-Membus-Subject"] == seen.subjects[d.body]
        assert d.headers["X-Membus-Signature"].startswith("sha256=")


async def test_every_event_arrives_once_in_order_through_503s_and_refused_connections(
    bus: MemoryBus, nc: NatsClient, ns: str, receiver: Receiver, webhooks: Any
) -> None:
    # The secret from the environment, not the command line.
    hook = await webhooks(ns, receiver.url(), env={"MEMBUS_WEBHOOK_SECRET": SECRET})
    mem = bus.agent(workflow_id="wf_1", agent_id="writer")
    async with published(nc, ns) as seen:
        first = [(await mem.add("decision", f"Decision number {i}")).id for i in range(3)]
        await until(lambda: len(receiver.at()) == 3, "the first 3 events")

        # The receiver fails: 503 to everything.
        receiver.mode = "503"
        await mem.update(first[0], content="Decision number 0, revised")
        await mem.add("knowledge", "Deploys happen on Tuesdays")
        await mem.delete([first[1]])
        await until(lambda: receiver.failed["503"] >= 3, "retries against 503")

        # Then it is gone altogether: connections refused.
        receiver.go_down()
        for i in range(3):
            await mem.add("context", f"Scratch note {i}", ttl_s=3600)

        def refused() -> bool:
            return any(
                "ConnectionRefused" in (entry.get("error") or "")
                for entry in hook.events("webhook.retry")
            )

        await until(refused, "retries against a receiver that is down")
        assert len(receiver.at()) == 3

        receiver.come_up()
        await until(lambda: len(seen.bodies) == 9, "the handlers' 9 events")
        await until(lambda: len(receiver.at()) == 9, "all 9 events after the outage")
        await asyncio.sleep(1.0)  # room for a duplicate to show up, if one were coming

    taken = receiver.at()
    assert len(taken) == 9
    assert_once_in_order(taken, seen)
    assert receiver.failed["bad_signature"] == 0
    actions = [json.loads(d.body)["action"] for d in taken]
    assert actions.count("updated") == 1 and actions.count("deleted") == 1
    # The one held through the outage took several attempts, and said so.
    delivered = hook.events("webhook.delivered")
    assert len(delivered) == 9
    assert max(entry["attempts"] for entry in delivered) > 3
    assert {entry["event_id"] for entry in delivered} == {d.event_id for d in taken}


async def test_a_restarted_webhook_resumes_where_it_stopped(
    bus: MemoryBus, nc: NatsClient, ns: str, receiver: Receiver, webhooks: Any
) -> None:
    mem = bus.agent(workflow_id="wf_1", agent_id="writer")
    first = await webhooks(ns, receiver.url(), "--secret", SECRET)
    async with published(nc, ns) as seen:
        for i in range(2):
            await mem.add("decision", f"Before the outage {i}")
        await until(lambda: len(receiver.at()) == 2, "the first 2 events")

        receiver.go_down()
        for i in range(2):
            await mem.add("decision", f"During the outage {i}")
        await until(lambda: bool(first.events("webhook.retry")), "a failed attempt")
        assert await first.stop() == 0
        assert first.events("webhook.left_for_later")
        stopped = first.events("webhook.stopped")
        assert stopped and stopped[0]["delivered"] == 2

        # Nothing follows the events now but the durable consumer in the stream.
        for i in range(2):
            await mem.add("decision", f"While no webhook runs {i}")
        await until(lambda: len(seen.bodies) == 6, "the handlers' 6 events")

        receiver.come_up()
        second = await webhooks(ns, receiver.url(), "--secret", SECRET)
        await until(lambda: len(receiver.at()) == 6, "the 4 events left for later")
        await asyncio.sleep(1.0)

    taken = receiver.at()
    assert len(taken) == 6
    assert_once_in_order(taken, seen)
    contents = [json.loads(d.body)["preview"] for d in taken]
    assert contents[2:] == [
        "During the outage 0",
        "During the outage 1",
        "While no webhook runs 0",
        "While no webhook runs 1",
    ]
    ready = [first.events("webhook.ready")[0], second.events("webhook.ready")[0]]
    assert (
        ready[0]["consumer"]
        == ready[1]["consumer"]
        == consumer_name(receiver.url(), f"mem.{ns}.events.*.*.*")
    )
    assert ready[1]["waiting"] >= 3  # the events after the one the first process let go


async def test_a_webhook_follows_its_workflow_in_its_namespace_only(
    bus: MemoryBus, servers: Servers, nc: NatsClient, ns: str, receiver: Receiver, webhooks: Any
) -> None:
    secret = {"MEMBUS_WEBHOOK_SECRET": SECRET}
    one_workflow = await webhooks(ns, receiver.url("/wf_a"), "wf_a", env=secret)
    whole_namespace = await webhooks(ns, receiver.url("/all"), env=secret)
    other_ns = f"t{uuid.uuid4().hex[:12]}"
    async with (
        published(nc, ns) as seen,
        await MemoryBus.connect(servers.nats_url, namespace=other_ns) as other,
    ):
        await bus.agent(workflow_id="wf_a").add("decision", "In wf_a")
        await bus.agent(workflow_id="wf_b").add("decision", "In wf_b")
        await bus.agent(workflow_id="wf_a").add("user_pref", "General, from wf_a")
        await other.agent(workflow_id="wf_a").add("decision", "In wf_a of another namespace")
        await bus.agent(workflow_id="wf_a").add("decision", "In wf_a again")
        await until(lambda: len(receiver.at("/all")) == 4, "the namespace's 4 events")
        await until(lambda: len(receiver.at("/wf_a")) == 2, "wf_a's 2 events")
        await asyncio.sleep(1.0)

    assert [json.loads(d.body)["preview"] for d in receiver.at("/wf_a")] == [
        "In wf_a",
        "In wf_a again",
    ]
    everything = receiver.at("/all")
    assert [json.loads(d.body)["preview"] for d in everything] == [
        "In wf_a",
        "In wf_b",
        "General, from wf_a",
        "In wf_a again",
    ]
    assert_once_in_order(everything, seen)
    assert all(d.headers["X-Membus-Subject"].startswith(f"mem.{ns}.") for d in receiver.taken)
    # Both follow the namespace's one stream, each with a consumer of its own; the same
    # event has the same id whichever webhook delivers it.
    ready = [one_workflow.events("webhook.ready")[0], whole_namespace.events("webhook.ready")[0]]
    assert ready[0]["stream"] == ready[1]["stream"] == stream_name(ns)
    assert ready[0]["consumer"] != ready[1]["consumer"]
    by_body = {d.body: d.event_id for d in everything}
    assert all(by_body[d.body] == d.event_id for d in receiver.at("/wf_a"))


async def test_a_wrong_secret_loses_nothing_once_it_is_fixed(
    bus: MemoryBus, nc: NatsClient, ns: str, receiver: Receiver, webhooks: Any
) -> None:
    mem = bus.agent(workflow_id="wf_1")
    wrong = await webhooks(ns, receiver.url(), env={"MEMBUS_WEBHOOK_SECRET": "not-the-secret"})
    async with published(nc, ns) as seen:
        for i in range(2):
            await mem.add("decision", f"Signed wrongly at first {i}")
        await until(lambda: receiver.failed["bad_signature"] >= 3, "refusals of the bad signature")
        refusals = wrong.events("webhook.retry")
        assert refusals[0]["status"] == 401 and refusals[0]["level"] == "error"
        assert "secret" in refusals[0]["hint"]
        assert await wrong.stop() == 0
        assert receiver.at() == []

        await webhooks(ns, receiver.url(), env={"MEMBUS_WEBHOOK_SECRET": SECRET})
        await until(lambda: len(receiver.at()) == 2, "both events, signed right")
        await asyncio.sleep(1.0)
    assert_once_in_order(receiver.at(), seen)


async def test_on_4xx_skip_drops_an_event_the_receiver_refuses_and_goes_on(
    bus: MemoryBus, ns: str, receiver: Receiver, webhooks: Any
) -> None:
    receiver.poison = b"poisoned"
    secret = {"MEMBUS_WEBHOOK_SECRET": SECRET}
    hook = await webhooks(ns, receiver.url(), "--on-4xx", "skip", env=secret)
    mem = bus.agent(workflow_id="wf_1")
    await mem.add("decision", "A poisoned event")
    await mem.add("decision", "A fine event")
    await until(lambda: len(receiver.at()) == 1, "the fine event")
    assert json.loads(receiver.at()[0].body)["preview"] == "A fine event"
    assert receiver.failed["poison"] == 1  # refused once, not retried
    skipped = hook.events("webhook.skipped")
    assert len(skipped) == 1 and skipped[0]["status"] == 422


async def test_a_stream_that_already_keeps_the_events_is_used_and_one_that_keeps_part_refused(
    bus: MemoryBus, servers: Servers, nc: NatsClient, ns: str, receiver: Receiver, webhooks: Any
) -> None:
    js = nc.jetstream()
    env = {**os.environ, "MEMBUS_NATS_URL": servers.nats_url, "MEMBUS_WEBHOOK_SECRET": SECRET}
    # A stream an operator made for one workflow: the whole namespace cannot be kept beside it.
    await js.add_stream(name=f"OPS_{ns}_wf_x", subjects=[f"mem.{ns}.events.wf_x.>"])
    try:
        proc = await asyncio.create_subprocess_exec(
            *webhook_command(ns, receiver.url()), env=env, stderr=subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
        message = " ".join(err.decode().split())
        assert proc.returncode == 1
        assert f"OPS_{ns}_wf_x takes part of mem.{ns}.events.*.*.* but not all" in message
    finally:
        await js.delete_stream(f"OPS_{ns}_wf_x")

    # One that keeps all of the namespace's events (limits retention, an operator's): used.
    await js.add_stream(name=f"OPS_{ns}", subjects=[f"mem.{ns}.events.>"], max_age=3600)
    try:
        hook = await webhooks(ns, receiver.url(), env={"MEMBUS_WEBHOOK_SECRET": SECRET})
        assert hook.events("webhook.ready")[0]["stream"] == f"OPS_{ns}"
        await bus.agent(workflow_id="wf_x").add("decision", "Kept by the operator's stream")
        await until(lambda: len(receiver.at()) == 1, "the event")
        assert receiver.at()[0].event_id.startswith(f"OPS_{ns}:")
        with pytest.raises(NotFoundError):
            await js.stream_info(stream_name(ns))  # no second stream was made
        assert await hook.stop() == 0
    finally:
        await js.delete_stream(f"OPS_{ns}")
