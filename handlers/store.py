"""The Redis Stack store: one RediSearch index per namespace, defined and queried with redisvl.

A memory is one hash (`membus:<ns>:m:<id>`, indexed) plus, once it has been read, a small
access hash (`membus:<ns>:a:<id>`, not indexed, so read bumps never re-index the vector).
Both keys carry the same PEXPIREAT, so Redis itself expires memories.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import redis.asyncio as aioredis
import redis.exceptions
import structlog
from redis.commands.search.aggregation import AggregateRequest
from redis.commands.search.reducers import count, tolist
from redis.commands.search.reducers import max as rmax
from redis.commands.search.reducers import min as rmin
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.query import CountQuery, FilterQuery, VectorQuery
from redisvl.query.filter import FilterExpression
from redisvl.schema import IndexSchema

from handlers.errors import Unavailable
from handlers.schema import (
    CANDIDATE_FIELDS,
    PERMANENT_MS,
    RECORD_FIELDS,
    NamespaceMeta,
    access_key,
    meta_key,
    record_key,
    schema_dict,
)
from handlers.scripts import DELETE_LUA, FETCH_LUA

log = structlog.get_logger("membus.store")

BATCHES_MIN_MATCHES = 1500
BATCHES_MIN_SHARE = 0.05
COUNT_TTL_S = 5.0

_meta_decoder = msgspec.json.Decoder(NamespaceMeta)


@dataclass(slots=True)
class StoredMemory:
    """A memory as read from Redis, before it becomes a reply record."""

    fields: dict[str, str]
    access_count: int = 0
    last_accessed_ms: int | None = None
    distance: float | None = None

    @property
    def id(self) -> str:
        return self.fields["id"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class Found:
    """An FT.SEARCH reply: the total that matched and (key, fields) of the returned page."""

    total: int
    docs: list[tuple[str, dict[str, str]]]


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _parse_search(raw: Any) -> Found:
    if isinstance(raw, dict):  # RESP3
        rows = raw.get(b"results", raw.get("results", []))
        docs = []
        for row in rows:
            attrs = row.get(b"extra_attributes", row.get("extra_attributes")) or {}
            key = _text(row.get(b"id", row.get("id")))
            docs.append((key, {_text(k): _text(v) for k, v in attrs.items()}))
        return Found(int(raw.get(b"total_results", raw.get("total_results", 0))), docs)
    total, rest = int(raw[0]), raw[1:]
    if rest and not isinstance(rest[1 if len(rest) > 1 else 0], list):  # NOCONTENT
        return Found(total, [(_text(key), {}) for key in rest])
    return Found(total, [(_text(rest[i]), _pairs(rest[i + 1])) for i in range(0, len(rest), 2)])


def _memory_keys(ns: str, ids: list[str]) -> list[str]:
    """Record and access key of each memory, interleaved, as the Lua scripts take them."""
    keys: list[str] = []
    for mid in ids:
        keys += [record_key(ns, mid), access_key(ns, mid)]
    return keys


def _key_id(ns: str, key: str) -> str:
    return key.removeprefix(f"membus:{ns}:m:")


def _stored(ns: str, key: str, fields: dict[str, str]) -> StoredMemory:
    distance = fields.pop("vector_distance", None)
    fields["id"] = _key_id(ns, key)
    return StoredMemory(fields, distance=float(distance) if distance is not None else None)


def _is_connection_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return True
        if isinstance(seen, OSError | ConnectionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_missing_index(exc: BaseException) -> bool:
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
        if _is_connection_error(exc):
            log.warning("redis.unreachable", error=repr(exc))
            if on_lost is not None:
                on_lost()
            raise Unavailable(
                "The memory store (Redis) is unreachable right now; retry shortly."
            ) from exc
        raise


class Store:
    """Namespace indexes and every Redis read and write of the service."""

    def __init__(self, client: aioredis.Redis, embedder_name: str, dimension: int) -> None:
        self.client = client
        self.embedder_name = embedder_name
        self.dimension = dimension
        # A cache only: every replica can rebuild it from Redis.
        self._indexes: dict[str, tuple[AsyncSearchIndex, NamespaceMeta]] = {}
        # Filter sizes for the hybrid-policy choice: an estimate, so a few seconds stale is fine.
        self._counts: dict[tuple[str, str], tuple[float, int]] = {}
        self._pending: dict[str, asyncio.Future[tuple[AsyncSearchIndex, NamespaceMeta]]] = {}
        self._fetch = client.register_script(FETCH_LUA)
        self._delete = client.register_script(DELETE_LUA)

    async def namespace(self, ns: str) -> tuple[AsyncSearchIndex, NamespaceMeta]:
        """The namespace's index and meta, created on first use."""
        cached = self._indexes.get(ns)
        if cached is not None:
            return cached
        # Concurrent first requests for a namespace share one set-up.
        pending = self._pending.get(ns)
        if pending is None:
            pending = self._pending[ns] = asyncio.ensure_future(self._open(ns))
            pending.add_done_callback(lambda _: self._pending.pop(ns, None))
        return await asyncio.shield(pending)

    async def _open(self, ns: str) -> tuple[AsyncSearchIndex, NamespaceMeta]:
        mine = NamespaceMeta(self.embedder_name, self.dimension)
        async with self._guard():
            # The first writer decides what the namespace's vectors are; later ones read it.
            await self.client.set(meta_key(ns), msgspec.json.encode(mine), nx=True)
            meta = _meta_decoder.decode(await self.client.get(meta_key(ns)) or b"")
            index = AsyncSearchIndex(
                IndexSchema.from_dict(schema_dict(ns, meta.dimension)),
                redis_client=self.client,
            )
            try:
                await index.create(overwrite=False)
            except RedisSearchError as exc:
                # Another replica created it between our check and our create.
                if "already exists" not in str(exc).lower():
                    raise
            await self._wait_indexed(index)
        self._indexes[ns] = (index, meta)
        return index, meta

    async def _wait_indexed(self, index: AsyncSearchIndex, limit_s: float = 5.0) -> None:
        """A (re-)created index scans existing keys in the background; let it finish."""
        deadline = asyncio.get_running_loop().time() + limit_s
        while asyncio.get_running_loop().time() < deadline:
            info = await index.info()
            if not int(info.get("indexing", 0)):
                return
            await asyncio.sleep(0.01)

    def forget(self, ns: str) -> None:
        self._indexes.pop(ns, None)

    def _forget_all(self) -> None:
        self._indexes.clear()

    def _guard(self) -> contextlib.AbstractAsyncContextManager[None]:
        # A Redis that comes back may have lost its indexes (a restart without persistence),
        # so after a lost connection every namespace is checked again on next use.
        return redis_errors(self._forget_all)

    async def write(self, ns: str, fields: dict[str, Any], expires_ms: int) -> None:
        key = record_key(ns, fields["id"])
        async with self._guard():
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, mapping=fields)
            if expires_ms != PERMANENT_MS:
                pipe.pexpireat(key, expires_ms)
            await pipe.execute()

    async def knn(
        self, ns: str, vector: np.ndarray, where: FilterExpression, k: int
    ) -> list[StoredMemory]:
        """The k nearest memories passing `where` (light records: ranking fields only)."""
        index, _ = await self.namespace(ns)
        query = VectorQuery(
            vector=vector.astype(np.float32).tobytes(),
            vector_field_name="embedding",
            return_fields=list(CANDIDATE_FIELDS),
            filter_expression=where,
            num_results=k,
            hybrid_policy=await self._hybrid_policy(ns, index, where),
        )
        found = await self._search(ns, index, query)
        return [_stored(ns, key, fields) for key, fields in found.docs]

    async def _hybrid_policy(
        self, ns: str, index: AsyncSearchIndex, where: FilterExpression
    ) -> str:
        # RediSearch's own choice picks brute force over every filtered vector for broad
        # filters (5k of 10k memories: ~4 ms against ~0.9 ms in batches), while batches crawl
        # for narrow ones. Choose by the filter's size, counted at most every few seconds.
        matches = await self._count(ns, index, str(where))
        total = await self._count(ns, index, "*")
        broad = matches >= BATCHES_MIN_MATCHES and matches >= BATCHES_MIN_SHARE * total
        return "BATCHES" if broad else "ADHOC_BF"

    async def _count(self, ns: str, index: AsyncSearchIndex, where: str) -> int:
        now = asyncio.get_running_loop().time()
        hit = self._counts.get((ns, where))
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._counts) > 4096:
            self._counts.clear()
        result = await self._search(ns, index, CountQuery(filter_expression=where))
        self._counts[(ns, where)] = (now + COUNT_TTL_S, result.total)
        return result.total

    async def page(
        self,
        ns: str,
        where: FilterExpression,
        *,
        offset: int,
        limit: int,
        fields: Iterable[str] = RECORD_FIELDS,
    ) -> tuple[int, list[StoredMemory]]:
        """Memories newest first, with the total that match."""
        index, _ = await self.namespace(ns)
        names = list(fields)
        query = FilterQuery(
            filter_expression=where,
            return_fields=names,
            num_results=limit,
            sort_by=("created_at", "DESC"),
        )
        query.paging(offset, limit)
        result = await self._search(ns, index, query)
        return result.total, [_stored(ns, key, fields) for key, fields in result.docs]

    async def ids(self, ns: str, where: FilterExpression, limit: int) -> list[str]:
        """Ids of up to `limit` matching memories (no content loaded)."""
        index, _ = await self.namespace(ns)
        query = FilterQuery(filter_expression=where, num_results=limit)
        query.no_content()
        result = await self._search(ns, index, query)
        return [_key_id(ns, key) for key, _ in result.docs]

    async def _search(self, ns: str, index: AsyncSearchIndex, query: Any) -> Found:
        """Run a redisvl query as a raw FT.SEARCH: redis-py's own result objects cost more
        to build than the query takes in Redis."""
        args: list[Any] = [index.name, *query.query.get_args()]
        if params := query.params:
            args += ["PARAMS", 2 * len(params)]
            for key, value in params.items():
                args += [key, value]
        async with self._guard():
            try:
                return _parse_search(await self.client.execute_command("FT.SEARCH", *args))
            except redis.exceptions.ResponseError as exc:
                if not _is_missing_index(exc):
                    raise
            # The index vanished under us (dropped or flushed): create it again, once.
            self.forget(ns)
            await self.namespace(ns)
            return _parse_search(await self.client.execute_command("FT.SEARCH", *args))

    async def aggregate(self, ns: str, where: FilterExpression) -> list[dict[str, Any]]:
        """Counts by (type, general), tag lists and created_at bounds: no content."""
        index, _ = await self.namespace(ns)
        req = (
            AggregateRequest(str(where))
            .group_by(
                ["@type", "@general"],
                count().alias("n"),
                tolist("@tags").alias("tags"),
                rmin("@created_at").alias("oldest"),
                rmax("@created_at").alias("newest"),
            )
            .dialect(2)
        )
        async with self._guard():
            try:
                result = await index.aggregate(req)
            except RedisSearchError as exc:
                if not _is_missing_index(exc) or _is_connection_error(exc):
                    raise
                self.forget(ns)
                index, _ = await self.namespace(ns)
                result = await index.aggregate(req)
        rows = []
        for raw in result.rows:
            row: dict[str, Any] = {}
            for i in range(0, len(raw), 2):
                name = _text(raw[i])
                value = raw[i + 1]
                row[name] = [_text(v) for v in value] if isinstance(value, list) else _text(value)
            rows.append(row)
        return rows

    async def fetch(self, ns: str, ids: list[str], now_ms: int) -> list[StoredMemory | None]:
        """Live memories by id, in order (None where missing or expired), counting an access."""
        if not ids:
            return []
        keys = _memory_keys(ns, ids)
        async with self._guard():
            rows = await self._fetch(keys=keys, args=[now_ms, *RECORD_FIELDS])
        found: list[StoredMemory | None] = []
        for row in rows:
            if not row:
                found.append(None)
                continue
            *values, count, last = row
            fields = {
                f: _text(v) for f, v in zip(RECORD_FIELDS, values, strict=True) if v is not None
            }
            found.append(
                StoredMemory(
                    fields,
                    access_count=int(count) if count else 0,
                    last_accessed_ms=int(last) if last else None,
                )
            )
        return found

    async def delete(
        self, ns: str, ids: list[str], now_ms: int
    ) -> list[tuple[str, str, str | None, str | None, str] | None]:
        """Delete live memories; (id, type, workflow_id, agent_id, content) of each, or None."""
        if not ids:
            return []
        keys = _memory_keys(ns, ids)
        async with self._guard():
            rows = await self._delete(keys=keys, args=[now_ms])
        out: list[tuple[str, str, str | None, str | None, str] | None] = []
        for row in rows:
            if not row:
                out.append(None)
                continue
            mid, type_, wf, agent, content = (_text(v) if v else None for v in row)
            out.append((mid or "", type_ or "", wf, agent, content or ""))
        return out
