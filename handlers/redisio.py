"""Redis plumbing for the store: records as read, raw FT.SEARCH replies, key lists, and
the mapping of connection failures to `unavailable`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import redis.exceptions
import structlog
from redisvl.exceptions import RedisSearchError

from handlers.errors import Unavailable
from handlers.schema import access_key, record_key

log = structlog.get_logger("membus.store")


@dataclass(slots=True)
class StoredMemory:
    """A memory as read from Redis, before it becomes a reply record."""

    fields: dict[str, str]
    access_count: int = 0
    last_accessed_ms: int | None = None
    distance: float | None = None
    text_score: float | None = None

    @property
    def id(self) -> str:
        return self.fields["id"]


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Repeat:
    """The live memory an add repeated (its mention_count already counts the repeat)."""

    id: str
    mention_count: int
    workflow_id: str | None
    importance: float
    expires_ms: int
    agent_id: str | None
    content: str
    type: str


@dataclass(slots=True)
class Found:
    """An FT.SEARCH reply: the total that matched and (key, fields) of the returned page."""

    total: int
    docs: list[tuple[str, dict[str, str]]]


def pairs(flat: list[Any]) -> dict[str, str]:
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


def parse_search(raw: Any, with_scores: bool = False) -> Found:
    """Parse a raw FT.SEARCH reply (RESP2 or RESP3); a score lands in the `__score` field."""
    if isinstance(raw, dict):  # RESP3
        rows = raw.get(b"results", raw.get("results")) or []
        docs = []
        for row in rows:
            attrs = row.get(b"extra_attributes", row.get("extra_attributes")) or {}
            fields = {text(k): text(v) for k, v in attrs.items()}
            score = row.get(b"score", row.get("score"))
            if with_scores and score is not None:
                fields["__score"] = text(score)
            docs.append((text(row.get(b"id", row.get("id"))), fields))
        return Found(int(raw.get(b"total_results", raw.get("total_results")) or 0), docs)
    total, rest = int(raw[0]), raw[1:]
    step = 3 if with_scores else 2
    if rest and not with_scores and not isinstance(rest[1 if len(rest) > 1 else 0], list):
        return Found(total, [(text(key), {}) for key in rest])  # NOCONTENT
    docs = []
    for i in range(0, len(rest), step):
        fields = pairs(rest[i + step - 1])
        if with_scores:
            fields["__score"] = text(rest[i + 1])
        docs.append((text(rest[i]), fields))
    return Found(total, docs)


def parse_row(raw: list[Any]) -> dict[str, Any]:
    """One FT.AGGREGATE row: alternating names and values (a value may be a list)."""
    row: dict[str, Any] = {}
    for i in range(0, len(raw), 2):
        value = raw[i + 1]
        row[text(raw[i])] = [text(v) for v in value] if isinstance(value, list) else text(value)
    return row


def index_attributes(info: Any) -> set[str]:
    """Field names of an index, from a raw FT.INFO reply (RESP2 list or RESP3 map)."""
    if isinstance(info, list):
        info = {text(info[i]): info[i + 1] for i in range(0, len(info), 2)}
    attrs = info.get("attributes", info.get(b"attributes", []))
    names = set()
    for attr in attrs:
        if isinstance(attr, dict):
            names.add(text(attr.get(b"attribute", attr.get("attribute", b""))))
        else:
            pairs = {text(attr[i]): attr[i + 1] for i in range(0, len(attr) - 1, 2)}
            names.add(text(pairs.get("attribute", b"")))
    return names


def memory_keys(ns: str, ids: list[str]) -> list[str]:
    """Record and access key of each memory, interleaved, as the Lua scripts take them."""
    keys: list[str] = []
    for mid in ids:
        keys += [record_key(ns, mid), access_key(ns, mid)]
    return keys


def key_id(ns: str, key: str) -> str:
    return key.removeprefix(f"membus:{ns}:m:")


def stored(ns: str, key: str, fields: dict[str, str]) -> StoredMemory:
    distance = fields.pop("vector_distance", None)
    score = fields.pop("__score", None)
    fields["id"] = key_id(ns, key)
    return StoredMemory(
        fields,
        distance=float(distance) if distance is not None else None,
        text_score=float(score) if score is not None else None,
    )


def is_connection_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return True
        if isinstance(seen, OSError | ConnectionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_missing_index(exc: BaseException) -> bool:
    # RediSearch reports a missing index as an ordinary error whose wording varies by
    # version, so matching the message is the only way to tell it apart.
    text = str(exc).lower()
    return "no such index" in text or "unknown index" in text or "not found" in text


@contextlib.asynccontextmanager
async def redis_errors(on_lost: Callable[[], None] | None = None) -> AsyncIterator[None]:
    """Turn 'Redis is down' into `unavailable`, so clients know a retry is safe."""
    try:
        yield
    except (redis.exceptions.RedisError, RedisSearchError, OSError) as exc:
        if is_connection_error(exc):
            log.warning("redis.unreachable", error=repr(exc))
            if on_lost is not None:
                on_lost()
            raise Unavailable(
                "The memory store (Redis) is unreachable right now; retry shortly."
            ) from exc
        raise


@contextlib.asynccontextmanager
async def locked(
    client: Any,
    key: str,
    hold_s: float,
    guard: Callable[[], contextlib.AbstractAsyncContextManager[None]],
) -> AsyncIterator[None]:
    """Hold a Redis lock shared by every handler. It expires after `hold_s` should its holder
    die; waiting longer than that is `unavailable`."""
    lock = client.lock(key, timeout=hold_s, sleep=0.002)
    async with guard():
        got = await lock.acquire(blocking_timeout=hold_s)
    if not got:
        raise Unavailable("Another write holds this memory scope; retry shortly.")
    try:
        yield
    finally:
        with contextlib.suppress(redis.exceptions.RedisError):  # expired: nothing to free
            await lock.release()
