"""The Redis Stack store: one RediSearch index per namespace, defined and queried with redisvl.

A memory is one hash (`membus:<ns>:m:<id>`, indexed) plus, once it has been read, a small
access hash (`membus:<ns>:a:<id>`, not indexed, so read bumps never re-index the vector).
Both keys carry the same PEXPIREAT, so Redis itself expires memories.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import msgspec
import numpy as np
import redis.asyncio as aioredis
import redis.exceptions
import structlog
from redis.commands.search import reducers
from redis.commands.search.aggregation import AggregateRequest
from redis.commands.search.query import Query
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.query import CountQuery, FilterQuery, VectorQuery
from redisvl.query.filter import FilterExpression
from redisvl.schema import IndexSchema

from handlers.policy import HybridPolicy
from handlers.redisio import (
    Found,
    Repeat,
    StoredMemory,
    index_attributes,
    is_connection_error,
    is_missing_index,
    key_id,
    locked,
    memory_keys,
    parse_row,
    parse_search,
    redis_errors,
    stored,
    text,
)
from handlers.schema import (
    CANDIDATE_FIELDS,
    PERMANENT_MS,
    RECORD_FIELDS,
    NamespaceMeta,
    access_key,
    dedup_prefix,
    meta_key,
    record_key,
    schema_dict,
    text_match,
)
from handlers.scripts import ADD_LUA, DELETE_LUA, FETCH_LUA, MENTION_LUA, UPDATE_LUA

log = structlog.get_logger("membus.store")


_meta_decoder = msgspec.json.Decoder(NamespaceMeta)
T = TypeVar("T")


class Store:
    """Namespace indexes and every Redis read and write of the service."""

    def __init__(self, client: aioredis.Redis, embedder_name: str, dimension: int) -> None:
        self.client = client
        self.embedder_name = embedder_name
        self.dimension = dimension
        # A cache only: every replica can rebuild it from Redis.
        self._indexes: dict[str, tuple[AsyncSearchIndex, NamespaceMeta]] = {}
        self._policy = HybridPolicy()
        self._pending: dict[str, asyncio.Future[tuple[AsyncSearchIndex, NamespaceMeta]]] = {}
        self._fetch = client.register_script(FETCH_LUA)
        self._delete = client.register_script(DELETE_LUA)
        self._add = client.register_script(ADD_LUA)
        self._mention = client.register_script(MENTION_LUA)
        self._update = client.register_script(UPDATE_LUA)

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
            await self._add_missing_fields(index)
            await self._wait_indexed(index)
        self._indexes[ns] = (index, meta)
        return index, meta

    async def _add_missing_fields(self, index: AsyncSearchIndex) -> None:
        """Bring an index made by an older version up to the current schema: FT.ALTER adds
        the fields it lacks, and RediSearch indexes existing memories for them."""
        info = await self.client.execute_command("FT.INFO", index.name)
        have = index_attributes(info)
        for field in index.schema.redis_fields:
            if field.name not in have:
                log.info("index.upgrade", index=index.name, field=field.name)
                await self.client.execute_command(
                    "FT.ALTER", index.name, "SCHEMA", "ADD", *field.redis_args()
                )

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

    def exclusive(
        self, ns: str, name: str, hold_s: float = 5.0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """A lock shared by every handler (see `redisio.locked`)."""
        return locked(self.client, f"membus:{ns}:lock:{name}", hold_s, self._guard)

    def _guard(self) -> contextlib.AbstractAsyncContextManager[None]:
        # A Redis that comes back may have lost its indexes (a restart without persistence),
        # so after a lost connection every namespace is checked again on next use.
        return redis_errors(self._forget_all)

    async def add(
        self, ns: str, fields: dict[str, Any], expires_ms: int, chash: str, now_ms: int
    ) -> Repeat | None:
        """Write a new memory, or, when its content hash is live already, count a mention of
        that memory instead and describe it (one atomic script)."""
        args: list[Any] = [now_ms, 0 if expires_ms == PERMANENT_MS else expires_ms]
        args.append(record_key(ns, ""))
        for key, value in fields.items():
            args += [key, value]
        keys = [dedup_prefix(ns) + chash if chash else "", record_key(ns, fields["id"])]
        async with self._guard():
            out = await self._add(keys=keys, args=args)
        if len(out) == 1:
            return None
        mid, count, wf, importance, expires, agent, content, type_ = out
        return Repeat(
            id=text(mid),
            mention_count=int(count),
            workflow_id=text(wf) if wf else None,
            importance=float(importance),
            expires_ms=int(expires),
            agent_id=text(agent) if agent else None,
            content=text(content),
            type=text(type_),
        )

    async def mention(self, ns: str, memory_id: str, now_ms: int) -> int | None:
        """Count one more mention of a live memory; its new mention_count, or None."""
        async with self._guard():
            count = await self._mention(keys=[record_key(ns, memory_id)], args=[now_ms])
        return int(count) if count else None

    async def read(self, ns: str, memory_id: str, now_ms: int) -> dict[str, str] | None:
        """A live memory's record fields, without counting an access."""
        async with self._guard():
            values = await self.client.hmget(record_key(ns, memory_id), [*RECORD_FIELDS, "chash"])
        names = [*RECORD_FIELDS, "chash"]
        fields = {f: text(v) for f, v in zip(names, values, strict=True) if v is not None}
        if "id" not in fields or int(fields["expires_at"]) <= now_ms:
            return None
        return fields

    async def update(
        self,
        ns: str,
        memory_id: str,
        changes: dict[str, Any],
        *,
        expiry: str,
        old_chash: str,
        new_chash: str,
        now_ms: int,
    ) -> bool:
        """Apply changes to a live memory; False when it is gone. `expiry` is 'keep',
        'persist' or epoch ms, applied to every key of the memory."""
        keys = [
            record_key(ns, memory_id),
            access_key(ns, memory_id),
            dedup_prefix(ns) + old_chash if old_chash else "",
            dedup_prefix(ns) + new_chash if new_chash else "",
        ]
        args: list[Any] = [now_ms, expiry]
        for key, value in changes.items():
            args += [key, value]
        async with self._guard():
            return bool(await self._update(keys=keys, args=args))

    async def knn(
        self, ns: str, vector: np.ndarray, where: FilterExpression, k: int
    ) -> list[StoredMemory]:
        """The k nearest memories passing `where` (light records: ranking fields only)."""
        query = VectorQuery(
            vector=vector.astype(np.float32).tobytes(),
            vector_field_name="embedding",
            return_fields=list(CANDIDATE_FIELDS),
            filter_expression=where,
            num_results=k,
            hybrid_policy=await self._hybrid_policy(ns, where),
        )
        found = await self._search(ns, query)
        return [stored(ns, key, fields) for key, fields in found.docs]

    async def _hybrid_policy(self, ns: str, where: FilterExpression) -> str:
        async def count(filter_: str) -> int:
            return (await self._search(ns, CountQuery(filter_expression=filter_))).total

        return await self._policy.choose(ns, str(where), count)

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
        names = list(fields)
        query = FilterQuery(
            filter_expression=where,
            return_fields=names,
            num_results=limit,
            sort_by=("created_at", "DESC"),
        )
        query.paging(offset, limit)
        result = await self._search(ns, query)
        return result.total, [stored(ns, key, fields) for key, fields in result.docs]

    async def ids(self, ns: str, where: FilterExpression, limit: int) -> list[str]:
        """Ids of up to `limit` matching memories (no content loaded)."""
        query = FilterQuery(filter_expression=where, num_results=limit)
        query.no_content()
        result = await self._search(ns, query)
        return [key_id(ns, key) for key, _ in result.docs]

    async def text(
        self,
        ns: str,
        terms: list[str],
        where: FilterExpression,
        k: int,
        among: list[str] | None = None,
    ) -> list[StoredMemory]:
        """The k best full-text (BM25) matches of any of `terms` in content or tags; with
        `among`, only those memories (ids) are scored."""
        query = Query(text_match(terms, where)).scorer("BM25STD").with_scores()
        if among is not None:
            query = query.limit_ids(*(record_key(ns, mid) for mid in among))
        query = query.return_fields(*CANDIDATE_FIELDS).paging(0, k).dialect(2)
        found = await self._search(ns, query, with_scores=True)
        return [stored(ns, key, fields) for key, fields in found.docs]

    async def vectors(self, ns: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored embeddings by id (for text matches that the vector query did not return)."""
        if not ids:
            return {}
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.hget(record_key(ns, mid), "embedding")
            raw = await pipe.execute()
        return {
            mid: np.frombuffer(blob, dtype=np.float32)
            for mid, blob in zip(ids, raw, strict=True)
            if blob
        }

    async def _on_index(self, ns: str, run: Callable[[AsyncSearchIndex], Awaitable[T]]) -> T:
        """Run a query against the namespace's index; if the index vanished under us
        (dropped or flushed), create it again and retry, once."""
        index, _ = await self.namespace(ns)
        async with self._guard():
            try:
                return await run(index)
            except (redis.exceptions.ResponseError, RedisSearchError) as exc:
                if not is_missing_index(exc) or is_connection_error(exc):
                    raise
            self.forget(ns)
            index, _ = await self.namespace(ns)
            return await run(index)

    async def _search(self, ns: str, query: Any, with_scores: bool = False) -> Found:
        """Run a redisvl (or redis-py) query as a raw FT.SEARCH: redis-py's own result
        objects cost more to build than the query takes in Redis."""
        args: list[Any] = list(query.get_args())
        if params := getattr(query, "params", None):
            args += ["PARAMS", 2 * len(params)]
            for key, value in params.items():
                args += [key, value]

        async def run(index: AsyncSearchIndex) -> Found:
            raw = await self.client.execute_command("FT.SEARCH", index.name, *args)
            return parse_search(raw, with_scores)

        return await self._on_index(ns, run)

    async def aggregate(self, ns: str, where: FilterExpression) -> list[dict[str, Any]]:
        """Counts by (type, general), tag lists and created_at bounds: no content."""
        req = (
            AggregateRequest(str(where))
            .group_by(
                ["@type", "@general"],
                reducers.count().alias("n"),
                reducers.tolist("@tags").alias("tags"),
                reducers.min("@created_at").alias("oldest"),
                reducers.max("@created_at").alias("newest"),
            )
            .dialect(2)
        )
        result = await self._on_index(ns, lambda index: index.aggregate(req))
        return [parse_row(raw) for raw in result.rows]

    async def fetch(
        self, ns: str, ids: list[str], now_ms: int, count_access: bool = True
    ) -> list[StoredMemory | None]:
        """Live memories by id, in order (None where missing or expired), counting an access
        unless told not to (then `touch` counts it for those that are returned)."""
        if not ids:
            return []
        keys = memory_keys(ns, ids)
        flag = "1" if count_access else "0"
        async with self._guard():
            rows = await self._fetch(keys=keys, args=[now_ms, flag, *RECORD_FIELDS])
        found: list[StoredMemory | None] = []
        for row in rows:
            if not row:
                found.append(None)
                continue
            *values, count, last = row
            fields = {
                f: text(v) for f, v in zip(RECORD_FIELDS, values, strict=True) if v is not None
            }
            found.append(
                StoredMemory(
                    fields,
                    access_count=int(count) if count else 0,
                    last_accessed_ms=int(last) if last else None,
                )
            )
        return found

    async def touch(self, ns: str, ids: list[str], now_ms: int) -> None:
        """Count an access to each live memory."""
        if ids:
            async with self._guard():
                await self._fetch(keys=memory_keys(ns, ids), args=[now_ms, "1", "expires_at"])

    async def delete(
        self, ns: str, ids: list[str], now_ms: int
    ) -> list[tuple[str, str, str | None, str | None, str] | None]:
        """Delete live memories; (id, type, workflow_id, agent_id, content) of each, or None."""
        if not ids:
            return []
        keys = memory_keys(ns, ids)
        async with self._guard():
            rows = await self._delete(keys=keys, args=[now_ms, dedup_prefix(ns)])
        out: list[tuple[str, str, str | None, str | None, str] | None] = []
        for row in rows:
            if not row:
                out.append(None)
                continue
            mid, type_, wf, agent, content = (text(v) if v else None for v in row)
            out.append((mid or "", type_ or "", wf, agent, content or ""))
        return out
