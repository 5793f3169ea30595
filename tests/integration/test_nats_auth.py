"""deploy/nats_auth.py's per-agent users, enforced by a real nats-server started with the
generated configuration: the server itself refuses another namespace, a higher trust, another
agent's inbox and (below full trust) the events. Refusals show up in nats-py as a
"permissions violation" error given to `error_cb` (nats-py lowercases the server's `-ERR`
text, subject included), and as nothing delivered. Needs only
nats-server (no handlers, no Redis)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import StorageType

from bus import BusTimeout, MemoryBus
from bus.tools import ToolExecutor
from deploy.embedded import EmbeddedStack, free_port, wait_for_handlers
from deploy.nats_auth import (
    Agent,
    AuthConfigError,
    agent_permissions,
    generate,
    load_agents_file,
    main,
    parse_agent,
    write,
)

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


LOG_DIR = Path(os.environ.get("MEMBUS_TEST_LOG_DIR", ".membus/test-logs")) / "nats-auth"
AGENTS = [
    Agent("alice", "acme", "full"),
    Agent("bob", "acme", "inner"),
    Agent("carol", "acme", "familiar"),
    Agent("dave", "other", "full"),
]
QUIET = 0.3  # how long "nothing arrives" is watched for, after a flush has proven ordering


@dataclass
class AuthServer:
    url: str
    credentials: dict[str, Any]


@dataclass
class Conn:
    nc: NatsClient
    errors: list[Exception] = field(default_factory=list)

    def violations(self) -> list[str]:
        return [str(e) for e in self.errors if "permissions violation" in str(e)]


async def until(check: Callable[[], bool], what: str, timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def refused(conn: Conn, text: str) -> str:
    """Wait for the server's Permissions Violation naming `text` (compared in lower case, as
    nats-py gives it); return its message."""
    text = text.lower()
    await until(lambda: any(text in v for v in conn.violations()), f"violation {text!r}")
    return next(v for v in conn.violations() if text in v)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    out = tmp_path_factory.mktemp("nats-auth")
    port = free_port()
    generated = generate(AGENTS, listen=f"127.0.0.1:{port}", hash_passwords=False)
    write(generated, out / "membus.conf", out / "membus-credentials.json")
    credentials = json.loads((out / "membus-credentials.json").read_text())
    stack = EmbeddedStack.temporary()
    stack.nats_config = out / "membus.conf"
    stack.nats_port = port
    stack.log_dir = LOG_DIR
    try:
        stack.start_nats()
        yield AuthServer(stack.nats_url, credentials)
    finally:
        stack.stop()


class Clients:
    def __init__(self, server: AuthServer) -> None:
        self.server = server
        self.opened: list[NatsClient] = []

    async def connect(self, name: str, *, private_inbox: bool = True) -> Conn:
        user = self.server.credentials["users"][name]
        errors: list[Exception] = []

        async def error_cb(exc: Exception) -> None:
            errors.append(exc)

        options: dict[str, Any] = {}
        if private_inbox:
            options["inbox_prefix"] = user["inbox_prefix"]
        nc = await nats.connect(
            self.server.url,
            user=user["user"],
            password=user["password"],
            error_cb=error_cb,
            **options,
        )
        self.opened.append(nc)
        return Conn(nc, errors)

    async def close(self) -> None:
        for nc in self.opened:
            await nc.close()


@pytest.fixture
async def clients(auth_server: AuthServer) -> AsyncIterator[Clients]:
    made = Clients(auth_server)
    yield made
    await made.close()


@pytest.fixture
async def watcher(clients: Clients) -> AsyncIterator[list[str]]:
    """Subjects of every request and durable write that reaches anyone: the handlers user
    subscribes `mem.>` and `memq.>`."""
    seen: list[str] = []
    conn = await clients.connect("handlers")

    async def on_msg(msg: Msg) -> None:
        seen.append(msg.subject)

    await conn.nc.subscribe("mem.>", cb=on_msg)
    await conn.nc.subscribe("memq.>", cb=on_msg)
    await conn.nc.flush()
    yield seen
    assert conn.errors == []


async def test_an_agent_cannot_publish_to_another_namespace(
    clients: Clients, watcher: list[str]
) -> None:
    alice = await clients.connect("alice")
    await alice.nc.publish("mem.other.search", b"{}")
    await alice.nc.publish("memq.other.add", b"{}")
    await alice.nc.publish("mem.acme.search", b"{}")  # after the refused ones, on one connection
    await alice.nc.flush()

    message = await refused(alice, 'Publish to "mem.other.search"')
    assert message == 'nats: permissions violation for publish to "mem.other.search"'
    await refused(alice, 'Publish to "memq.other.add"')
    await until(lambda: "mem.acme.search" in watcher, "the allowed request")
    assert watcher == ["mem.acme.search"]


async def test_an_agent_cannot_publish_at_a_higher_or_other_trust(
    clients: Clients, watcher: list[str]
) -> None:
    bob = await clients.connect("bob")  # inner
    carol = await clients.connect("carol")  # familiar
    for subject in ("mem.acme.search", "mem.acme.search.familiar", "memq.acme.add"):
        await bob.nc.publish(subject, b"{}")
    await carol.nc.publish("mem.acme.search.inner", b"{}")
    await carol.nc.publish("memq.acme.add.inner", b"{}")
    await bob.nc.publish("mem.acme.search.inner", b"{}")
    await bob.nc.publish("memq.acme.add.inner", b"{}")
    await carol.nc.publish("mem.acme.search.familiar", b"{}")
    await bob.nc.flush()
    await carol.nc.flush()

    for subject in ("mem.acme.search", "mem.acme.search.familiar", "memq.acme.add"):
        await refused(bob, f'Publish to "{subject}"')
    await refused(carol, 'Publish to "mem.acme.search.inner"')
    await refused(carol, 'Publish to "memq.acme.add.inner"')
    expected = ["mem.acme.search.inner", "memq.acme.add.inner", "mem.acme.search.familiar"]
    await until(lambda: len(watcher) >= 3, "the allowed requests")
    await asyncio.sleep(QUIET)
    assert sorted(watcher) == sorted(expected)
    assert len(bob.violations()) == 3 and len(carol.violations()) == 2


async def test_an_agent_cannot_read_another_agents_inbox(clients: Clients) -> None:
    handlers = await clients.connect("handlers")
    alice = await clients.connect("alice")
    bob = await clients.connect("bob")

    async def respond(msg: Msg) -> None:
        await msg.respond(b'{"success": true}')

    await handlers.nc.subscribe("mem.acme.search", queue="memory", cb=respond)
    await handlers.nc.flush()
    snooped: list[Msg] = []

    async def snoop(msg: Msg) -> None:
        snooped.append(msg)

    await bob.nc.subscribe("_INBOX_alice.>", cb=snoop)
    await bob.nc.subscribe("_INBOX.>", cb=snoop)
    await bob.nc.subscribe(">", cb=snoop)
    await bob.nc.flush()
    assert (
        await refused(bob, 'Subscription to "_INBOX_alice.>"')
        == 'nats: permissions violation for subscription to "_inbox_alice.>"'
    )
    await refused(bob, 'Subscription to "_INBOX.>"')
    await refused(bob, 'Subscription to ">"')

    reply = await alice.nc.request("mem.acme.search", b"{}", timeout=2)
    assert reply.data == b'{"success": true}'
    assert reply.subject.startswith("_INBOX_alice.")
    await bob.nc.flush()  # the reply was queued to bob (had he a subscription) before this PONG
    await asyncio.sleep(QUIET)
    assert snooped == []
    assert alice.errors == []


async def test_reduced_trust_gets_no_events_and_full_trust_does(clients: Clients) -> None:
    handlers = await clients.connect("handlers")
    alice = await clients.connect("alice")  # full
    bob = await clients.connect("bob")  # inner
    dave = await clients.connect("dave")  # full, but in namespace "other"
    got: dict[str, list[str]] = {"alice": [], "bob": [], "dave": []}

    def collect(name: str) -> Callable[[Msg], Any]:
        async def on_msg(msg: Msg) -> None:
            got[name].append(msg.subject)

        return on_msg

    for name, conn in (("alice", alice), ("bob", bob), ("dave", dave)):
        await conn.nc.subscribe("mem.acme.events.>", cb=collect(name))
        await conn.nc.flush()
    await refused(bob, 'Subscription to "mem.acme.events.>"')
    await refused(dave, 'Subscription to "mem.acme.events.>"')

    event = "mem.acme.events._general.knowledge.added"
    await handlers.nc.publish(event, b"{}")
    await handlers.nc.flush()
    await until(lambda: got["alice"] == [event], "alice's event")
    await bob.nc.flush()
    await dave.nc.flush()
    await asyncio.sleep(QUIET)
    assert got == {"alice": [event], "bob": [], "dave": []}
    assert alice.errors == [] and handlers.errors == []

    # Nor can an agent forge an event.
    await alice.nc.publish(event, b"{}")
    await alice.nc.flush()
    await refused(alice, f'Publish to "{event}"')


async def test_request_reply_through_the_private_inbox(clients: Clients) -> None:
    handlers = await clients.connect("handlers")
    reply_subjects: list[str] = []

    async def respond(msg: Msg) -> None:
        reply_subjects.append(msg.reply)
        await msg.respond(json.dumps({"success": True, "subject": msg.subject}).encode())

    await handlers.nc.subscribe("mem.*.search", queue="memory", cb=respond)
    await handlers.nc.subscribe("mem.*.search.*", queue="memory", cb=respond)
    await handlers.nc.flush()

    for name, subject in (
        ("alice", "mem.acme.search"),
        ("bob", "mem.acme.search.inner"),
        ("carol", "mem.acme.search.familiar"),
        ("dave", "mem.other.search"),
    ):
        conn = await clients.connect(name)
        reply = await conn.nc.request(subject, b"{}", timeout=2)
        assert json.loads(reply.data) == {"success": True, "subject": subject}
        assert reply_subjects[-1].startswith(f"_INBOX_{name}.")
        assert conn.errors == []

    # The handlers answer requests (allow_responses), but cannot write to an inbox unasked.
    await handlers.nc.publish("_INBOX_alice.unasked", b"{}")
    await handlers.nc.flush()
    await refused(handlers, 'Publish to "_INBOX_alice.unasked"')


async def test_an_agent_without_its_inbox_prefix_gets_no_replies(clients: Clients) -> None:
    alice = await clients.connect("alice", private_inbox=False)
    with pytest.raises(nats.errors.TimeoutError):
        await alice.nc.request("mem.acme.search", b"{}", timeout=0.3)
    await refused(alice, 'Subscription to "_INBOX.')


async def test_unknown_users_and_wrong_passwords_are_refused(auth_server: AuthServer) -> None:
    bob = auth_server.credentials["users"]["bob"]
    attempts: list[dict[str, Any]] = [
        {},
        {"user": "alice", "password": bob["password"]},
        {"user": "mallory", "password": "x"},
    ]
    for auth in attempts:
        errors: list[Exception] = []

        async def error_cb(exc: Exception, errors: list[Exception] = errors) -> None:
            errors.append(exc)

        # Two tries, then no server left (allow_reconnect=False would raise before nats-py
        # closes its socket; max_reconnect_attempts=0 is "for ever").
        with pytest.raises(nats.errors.NoServersError):
            await nats.connect(
                auth_server.url,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.01,
                error_cb=error_cb,
                **auth,
            )
        assert any("authorization violation" in str(e).lower() for e in errors), errors


async def test_durable_writes_and_a_pull_consumer(clients: Clients) -> None:
    handlers = await clients.connect("handlers")
    alice = await clients.connect("alice")
    bob = await clients.connect("bob")
    js = handlers.nc.jetstream()
    await js.add_stream(
        name="MEMBUS_WRITES", subjects=["memq.>"], storage=StorageType.FILE, duplicate_window=60
    )
    try:
        # An agent's publish is acknowledged by JetStream on its private inbox.
        ack = await alice.nc.jetstream().publish(
            "memq.acme.add", b"{}", headers={"Nats-Msg-Id": "w-1"}, timeout=2
        )
        assert (ack.stream, ack.seq, ack.duplicate) == ("MEMBUS_WRITES", 1, None)
        again = await alice.nc.jetstream().publish(
            "memq.acme.add", b"{}", headers={"Nats-Msg-Id": "w-1"}, timeout=2
        )
        assert (again.seq, again.duplicate) == (1, True)
        ack = await bob.nc.jetstream().publish(
            "memq.acme.add.inner", b"{}", headers={"Nats-Msg-Id": "w-2"}, timeout=2
        )
        assert ack.seq == 2

        # Above its trust, or into the JetStream API, an agent is refused (and gets no ack).
        with pytest.raises(nats.errors.TimeoutError):
            await bob.nc.jetstream().publish("memq.acme.add", b"{}", timeout=0.3)
        await refused(bob, 'Publish to "memq.acme.add"')
        with pytest.raises(nats.errors.TimeoutError):
            await bob.nc.jetstream(timeout=0.3).stream_info("MEMBUS_WRITES")
        await refused(bob, 'Publish to "$JS.API.STREAM.INFO.MEMBUS_WRITES"')
        assert alice.errors == []

        # The handlers' durable pull consumer: fetch, ack, nothing left.
        psub = await js.pull_subscribe("memq.>", durable="handlers", stream="MEMBUS_WRITES")
        msgs = await psub.fetch(2, timeout=2)
        assert [m.subject for m in msgs] == ["memq.acme.add", "memq.acme.add.inner"]
        assert [m.headers and m.headers.get("Nats-Msg-Id") for m in msgs] == ["w-1", "w-2"]
        for msg in msgs:
            await msg.ack_sync(timeout=2)
        info = await js.consumer_info("MEMBUS_WRITES", "handlers")
        assert (info.num_pending, info.num_ack_pending) == (0, 0)
        await psub.unsubscribe()
        assert handlers.errors == []
    finally:
        await js.delete_stream("MEMBUS_WRITES")


# The generator itself (no server).


def test_permission_blocks() -> None:
    assert agent_permissions(Agent("alice", "acme", "full")) == {
        "publish": {
            "allow": [
                "mem.acme.*",
                "memq.acme.add",
                "memq.acme.delete",
                "memq.acme.update",
                "memq.acme.capture",
                "memq.acme.import",
            ]
        },
        "subscribe": {"allow": ["_INBOX_alice.>", "mem.acme.events.>"]},
    }
    assert agent_permissions(Agent("bob", "acme", "inner")) == {
        "publish": {
            "allow": [
                "mem.acme.*.inner",
                "memq.acme.add.inner",
                "memq.acme.delete.inner",
                "memq.acme.update.inner",
                "memq.acme.capture.inner",
            ]
        },
        "subscribe": {"allow": ["_INBOX_bob.>"]},
    }
    config = generate(AGENTS, hash_passwords=False).config
    assert "_INBOX.>" not in config.split('user: "alice"')[1]
    assert "PLAIN TEXT" in config


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("a.b:acme:full", "not a plain subject token"),
        ("a*:acme:full", "not a plain subject token"),
        ("alice:ac>me:full", "not a plain subject token"),
        ("alice:acme:root", "unknown trust 'root'"),
        ("alice:acme", "expected NAME:NAMESPACE:TRUST"),
        (":acme:full", "not a plain subject token"),
    ],
)
def test_bad_agents_are_rejected(spec: str, error: str) -> None:
    with pytest.raises(AuthConfigError, match=error.replace("*", r"\*")):
        parse_agent(spec)


def test_duplicate_and_reserved_names_are_rejected() -> None:
    with pytest.raises(AuthConfigError, match="given twice"):
        generate([Agent("a", "x", "full"), Agent("a", "y", "inner")], hash_passwords=False)
    with pytest.raises(AuthConfigError, match="given twice"):
        generate([Agent("handlers", "x", "full")], hash_passwords=False)


def test_agents_file_json_and_toml(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(
        json.dumps({"agents": [{"name": "alice", "namespace": "acme", "trust": "full"}]})
    )
    (tmp_path / "a.toml").write_text(
        '[[agents]]\nname = "bob"\nnamespace = "acme"\ntrust = "inner"\n'
    )
    assert load_agents_file(tmp_path / "a.json") == [Agent("alice", "acme", "full")]
    assert load_agents_file(tmp_path / "a.toml") == [Agent("bob", "acme", "inner")]
    (tmp_path / "bad.json").write_text(json.dumps([{"name": "x", "namespace": "y"}]))
    with pytest.raises(AuthConfigError, match="exactly 'name', 'namespace', 'trust'"):
        load_agents_file(tmp_path / "bad.json")


def test_command_writes_private_credentials_and_keeps_passwords(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf, creds = tmp_path / "membus.conf", tmp_path / "membus-credentials.json"
    args = ["--agent", "alice:acme:full", "-o", str(conf), "--hash", "plain"]
    assert main(args) == 0
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600  # plain passwords inside
    first = json.loads(creds.read_text())["users"]
    assert first["alice"]["inbox_prefix"] == "_INBOX_alice"
    assert first["alice"]["url"] == f"nats://alice:{first['alice']['password']}@127.0.0.1:4222"

    assert main([*args, "--agent", "bob:acme:inner"]) == 0
    second = json.loads(creds.read_text())["users"]
    assert second["alice"]["password"] == first["alice"]["password"]
    assert set(second) == {"handlers", "alice", "bob"}
    assert main([*args, "--rotate"]) == 0
    assert json.loads(creds.read_text())["users"]["alice"]["password"] != first["alice"]["password"]

    with pytest.raises(SystemExit):
        main(["--agent", "a.b:acme:full", "-o", str(conf)])
    assert "not a plain subject token" in capsys.readouterr().err


async def test_bcrypt_hashed_passwords_work(tmp_path: Path) -> None:
    pytest.importorskip("bcrypt")
    port = free_port()
    generated = generate([AGENTS[0]], listen=f"127.0.0.1:{port}", bcrypt_cost=4)
    assert generated.hashed and "$2b$04$" in generated.config
    assert generated.credentials["users"]["alice"]["password"] not in generated.config
    write(generated, tmp_path / "membus.conf", tmp_path / "creds.json")
    stack = EmbeddedStack.temporary()
    stack.nats_config = tmp_path / "membus.conf"
    stack.nats_port = port
    try:
        stack.start_nats()
        alice = generated.credentials["users"]["alice"]
        nc = await nats.connect(alice["url"], inbox_prefix=alice["inbox_prefix"])
        try:
            await nc.publish("mem.acme.search", b"{}")
            await nc.flush()
        finally:
            await nc.close()
    finally:
        stack.stop()


async def test_the_bus_end_to_end_behind_the_generated_configuration(tmp_path: Path) -> None:
    """Handlers log in as the handlers user; each agent uses the SDK with its own user, trust
    and inbox prefix: the inner agent's memories are shared, the full agent sees them, and
    the inner agent cannot reach the full-trust subjects at all."""
    port = free_port()
    generated = generate(AGENTS, listen=f"127.0.0.1:{port}", hash_passwords=False)
    write(generated, tmp_path / "membus.conf", tmp_path / "creds.json")
    users = json.loads((tmp_path / "creds.json").read_text())["users"]
    stack = EmbeddedStack.temporary()
    stack.nats_config, stack.nats_port, stack.log_dir = tmp_path / "membus.conf", port, LOG_DIR
    buses: list[MemoryBus] = []

    async def agent_bus(name: str, trust: str) -> MemoryBus:
        user = users[name]
        bus = await MemoryBus.connect(
            stack.nats_url,
            namespace="acme",
            trust=trust,
            timeout=3,
            user=user["user"],
            password=user["password"],
            inbox_prefix=user["inbox_prefix"],
        )
        buses.append(bus)
        return bus

    try:
        stack.redis_port = free_port()
        stack.start_nats()
        stack.start_redis()
        handlers_url = users["handlers"]["url"]
        procs = stack.start_handlers(
            1, {"MEMBUS_NATS_URL": handlers_url, "MEMBUS_EMBEDDER": "hash"}
        )
        await wait_for_handlers(handlers_url, 1, procs, timeout=60)

        bob_bus = await agent_bus("bob", "inner")
        bob = bob_bus.agent(agent_id="bob")
        added = await bob.add("knowledge", "The staging database moved to eu-west")
        accepted = await bob.durable.add("knowledge", "Staging deploys need a ticket")
        assert accepted.stream == "MEMBUS_WRITES"
        alice = (await agent_bus("alice", "full")).agent(agent_id="alice")
        secret = await alice.add("knowledge", "The staging root password is in the vault")

        async def shared_count() -> int:
            return len((await alice.list(limit=10)).memories)

        deadline = asyncio.get_running_loop().time() + 20
        while await shared_count() < 3:  # the durable one lands shortly
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.1)
        seen_by_bob = await bob.search("staging", limit=10)
        assert {r.store for r in seen_by_bob.results} == {"shared"}
        assert secret.id not in {r.id for r in seen_by_bob.results}
        assert added.id in {r.id for r in seen_by_bob.results}
        # Bob's model, through the tool executor on his bus: the same subjects, his trust.
        tools = ToolExecutor(bob_bus, agent_id="bob")
        found = await tools.run("memory_search", {"query": "staging", "limit": 10})
        assert found.ok, found.data
        assert {r["store"] for r in found.data["results"]} == {"shared"}
        noted = await tools.run("memory_add", {"type": "knowledge", "content": "Staging is EU"})
        assert noted.ok, noted.data
        [stored] = (await bob.get([noted.data["id"]])).memories
        assert stored.store == "shared"
        # Bob claiming full trust: the server refuses the subject, so no handler ever answers.
        bob_full = await agent_bus("bob", "full")
        with pytest.raises(BusTimeout):
            await bob_full.agent().search("staging")
    finally:
        for bus in buses:
            await bus.close()
        stack.stop()
