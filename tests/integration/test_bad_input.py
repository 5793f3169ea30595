"""Bad input gets a clear error reply (with micro error headers) and the service stays up.

The raw requests go through `bus.nc`: in this process by default, and through NATS to the
handler processes where the test is about what NATS itself sees."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client as NatsClient

from bus import AgentMemory, MemoryBus
from contracts.operations import BY_NAME, TABLE, Operation

MAX_BODY = 256 * 1024


async def _raw(nc: Any, subject: str, body: bytes) -> tuple[dict, dict]:
    msg = await nc.request(subject, body, timeout=5)
    return msgspec.json.decode(msg.data), dict(msg.headers or {})


def _add(**fields: object) -> bytes:
    """The example add of contracts.operations, with `fields` changed."""
    return json.dumps({**BY_NAME["add"].example, **fields}).encode()


CASES = [
    pytest.param(
        "add",
        b'{"type": "knowledge", "content": ',
        "invalid_request",
        "not valid JSON",
        id="malformed-json",
    ),
    pytest.param(
        "add", _add(type="pref"), "invalid_request", "Known types: user_pref", id="unknown-type"
    ),
    pytest.param(
        "add", _add(tag=["a"]), "invalid_request", 'Did you mean "tags"', id="unknown-field"
    ),
    pytest.param(
        "add", _add(content="x" * (32 * 1024 + 1)), "too_large", "32 KiB", id="oversized-content"
    ),
    pytest.param(
        "add",
        _add(content="é" * 20_000),
        "too_large",
        "bytes",
        id="oversized-content-in-utf8-bytes",
    ),
    pytest.param(
        "add", _add(workflow_id="wf 123"), "invalid_request", "workflow_id", id="bad-workflow-id"
    ),
    pytest.param(
        "search", b'{"query": "x", "limit": 101}', "invalid_request", "limit", id="limit-too-high"
    ),
    pytest.param(
        "search", b'{"query": "x", "limit": 0}', "invalid_request", "limit", id="limit-zero"
    ),
    pytest.param("list", b'{"limit": 500}', "invalid_request", "limit", id="list-limit"),
    pytest.param("search", b"{}", "invalid_request", "query", id="search-without-query"),
    pytest.param("get", b'{"ids": []}', "invalid_request", "ids", id="no-ids"),
    pytest.param("add", b"[1, 2]", "invalid_request", "object", id="not-an-object"),
    pytest.param(
        "add", _add(metadata={"blob": "y" * 9000}), "too_large", "metadata", id="oversized-metadata"
    ),
    pytest.param(
        "add",
        b'{"metadata":' + b"[" * 5000 + b"]" * 5000 + b"}",
        "invalid_request",
        "deeper",
        id="deep-nesting",
    ),
    pytest.param("add", b"x" * (MAX_BODY + 1), "too_large", "256 KiB", id="oversized-body"),
    pytest.param("add", _add(tags=["has space"]), "invalid_request", "tag", id="bad-tag"),
    pytest.param(
        "add", _add(importance=1.5), "invalid_request", "importance", id="importance-out-of-range"
    ),
    pytest.param("add", _add(ttl_s=-1), "invalid_request", "ttl_s", id="negative-ttl"),
    pytest.param("add", _add(ttl_s=10**16), "invalid_request", "100 years", id="huge-ttl"),
    pytest.param(
        "update", b'{"id": "01X", "ttl_s": 3155760001}', "invalid_request", "ttl_s", id="update-ttl"
    ),
    pytest.param(
        "add",
        b'{"type": "knowledge", "content": "\xff\xfe"}',
        "invalid_request",
        "UTF-8",
        id="latin1-bytes-in-a-string",
    ),
    pytest.param("search", b'{"query": "caf\xe9"}', "invalid_request", "UTF-8", id="latin1-query"),
    pytest.param(
        "describe",
        b'{"scope": "all"}',
        "invalid_request",
        "one of: both, general, workflow",
        id="enum-lists-allowed-values",
    ),
    pytest.param("add", _add(dedup="fuzzy"), "invalid_request", "dedup", id="unknown-dedup"),
    pytest.param(
        "search",
        b'{"query": "x", "mode": "magic"}',
        "invalid_request",
        "mode",
        id="unknown-search-mode",
    ),
    pytest.param(
        "search",
        b'{"query": "x", "max_tokens": 0}',
        "invalid_request",
        "max_tokens",
        id="zero-token-budget",
    ),
    pytest.param(
        "update",
        b'{"id": "01X"}',
        "invalid_request",
        "changes nothing",
        id="update-without-changes",
    ),
    pytest.param(
        "update",
        b'{"id": "01X", "contents": "y"}',
        "invalid_request",
        'Did you mean "content"',
        id="update-misspelled-field",
    ),
    pytest.param(
        "recall",
        b'{"message": "x", "session_id": "s", "limit": 51}',
        "invalid_request",
        "limit",
        id="recall-limit",
    ),
    pytest.param(
        "recall",
        b'{"message": "x", "session_id": "bad id"}',
        "invalid_request",
        "session_id",
        id="recall-session-token",
    ),
    pytest.param(
        "timeline",
        b'{"anchor": "01X", "before": 51}',
        "invalid_request",
        "before",
        id="timeline-too-wide",
    ),
    pytest.param(
        "people",
        b'{"limit": 201}',
        "invalid_request",
        "limit",
        id="people-limit",
    ),
    pytest.param(
        "add",
        json.dumps({"type": "fact", "content": "x", "supersedes": list("abcdefghijk")}).encode(),
        "invalid_request",
        "supersedes",
        id="supersedes-too-many",
    ),
    pytest.param("history", b"{}", "invalid_request", "id", id="history-without-id"),
    pytest.param(
        "update",
        b'{"id": "01X", "content": ""}',
        "invalid_request",
        "content",
        id="update-empty-content",
    ),
]


# Every operation's example with a field its request does not know.
CASES += [
    pytest.param(
        op.name,
        json.dumps({**op.example, "colour": "blue"}).encode(),
        "invalid_request",
        'Unknown field "colour"',
        id=f"{op.name}-unknown-field",
    )
    for op in TABLE
]


@pytest.mark.parametrize(("op", "body", "code", "hint"), CASES)
async def test_bad_input_gets_a_clear_error_and_the_service_stays_up(
    bus: MemoryBus, op: str, body: bytes, code: str, hint: str
) -> None:
    reply, headers = await _raw(bus.nc, f"mem.{bus.namespace}.{op}", body)

    assert reply["success"] is False
    assert reply["code"] == code
    assert hint in reply["error"]
    assert headers.get("Nats-Service-Error-Code") in {"400", "413"}
    assert headers.get("Nats-Service-Error") == reply["error"]
    # Still serving, and nothing half-written.
    described = await bus.agent().describe()
    assert described.total == 0


@pytest.mark.parametrize("op", TABLE, ids=lambda op: op.name)
async def test_every_operation_takes_its_example(bus: MemoryBus, op: Operation) -> None:
    # What the example names need not exist: then not_found, never a refusal of the body.
    reply, headers = await _raw(
        bus.nc, f"mem.{bus.namespace}.{op.name}", json.dumps(op.example).encode()
    )
    assert reply["success"] is True or reply["code"] == "not_found", reply
    assert headers.get("Nats-Service-Error-Code") in {None, "404"}


@pytest.mark.transports("in_process", "nats", "cluster")
async def test_bad_namespace_token_is_invalid_request(bus: MemoryBus) -> None:
    reply, _ = await _raw(bus.nc, "mem.bad!ns.describe", b"{}")
    assert reply["code"] == "invalid_request"
    assert "Namespace" in reply["error"]


async def test_empty_body_is_an_empty_object(bus: MemoryBus) -> None:
    reply, headers = await _raw(bus.nc, f"mem.{bus.namespace}.describe", b"")
    assert reply["success"] is True
    assert "Nats-Service-Error" not in headers


@pytest.mark.transports("nats")
async def test_errors_are_counted_in_service_stats(
    bus: MemoryBus, nc: NatsClient, wf123: AgentMemory
) -> None:
    async def errors() -> int:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SRV.STATS.memory", b"", reply=inbox)
        total = 0
        for _ in range(2):
            stats = msgspec.json.decode((await sub.next_msg(timeout=5)).data)
            total += sum(ep["num_errors"] for ep in stats["endpoints"] if ep["name"] == "add")
        await sub.unsubscribe()
        return total

    before = await errors()
    for _ in range(4):
        await _raw(nc, f"mem.{bus.namespace}.add", b"{bad")
    assert await errors() == before + 4
