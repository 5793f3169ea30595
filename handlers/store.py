"""The Redis Stack store: one RediSearch index per namespace, defined and queried with redisvl.

A memory is one hash (`membus:<ns>:m:<id>`, indexed) plus, once it has been read, a small
access hash (`membus:<ns>:a:<id>`, not indexed, so read bumps never re-index the vector).
Both keys carry the same PEXPIREAT, so Redis itself expires memories.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import redis.asyncio as aioredis
import redis.exceptions
import structlog
from redis.commands.search.aggregation import AggregateRequest
from redis.commands.search.reducers import count, max as rmax, min as rmin, tolist
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.query import FilterQuery, VectorQuery
from redisvl.query.filter import FilterExpression, Num, Tag
from redisvl.schema import IndexSchema

from handlers.errors import Unavailable
from handlers.scoping import ReadScope

log = structlog.get_logger("membus.store")

# Permanent memories get an expiry far in the future, so one numeric range filters expiry.
PERMANENT_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z
GENERAL = "1"
RECORD_FIELDS = (
    "id",
    "type",
    "content",
    "tags",
    "importance",
    "wf",
    "agent_id",
    "source",
    "metadata",
    "created_at",
    "updated_at",
    "expires_at",
)

# Read the access counters of live memories (before this access), then bump them; the access
# hash inherits the record's expiry. Checking EXISTS first keeps a bump from resurrecting a
# deleted memory as a stray key.
_BUMP_LUA = """
local out = {}
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  if redis.call('EXISTS', rec) == 1 then
    local old = redis.call('HMGET', acc, 'access_count', 'last_accessed_at')
    redis.call('HINCRBY', acc, 'access_count', 1)
    redis.call('HSET', acc, 'last_accessed_at', ARGV[1])
    local t = redis.call('PEXPIRETIME', rec)
    if t > 0 then redis.call('PEXPIREAT', acc, t) end
    out[#out + 1] = {old[1] or false, old[2] or false}
  else
    out[#out + 1] = false
  end
end
return out
"""

# Read (id, type, wf, agent_id, content) of each live memory and delete its keys, atomically,
# so that two concurrent deletes report (and publish) each memory once.
_DELETE_LUA = """
local out = {}
local now = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  local f = redis.call('HMGET', rec, 'id', 'type', 'wf', 'agent_id', 'content', 'expires_at')
  if f[1] and tonumber(f[6] or '0') > now then
    redis.call('DEL', rec, acc)
    out[#out + 1] = {f[1], f[2], f[3] or false, f[4] or false, f[5] or ''}
  else
    if f[1] then redis.call('DEL', rec, acc) end
    out[#out + 1] = false
  end
end
return out
"""


class NamespaceMeta(msgspec.Struct, frozen=True):
    """What a namespace's vectors are: recorded once, when its index is created."""

    embedder: str
    dimension: int


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


def schema_dict(ns: str, dimension: int) -> dict[str, Any]:
    return {
        "index": {
            "name": index_name(ns),
            "prefix": f"membus:{ns}:m:",
            "key_separator": ":",
            "storage_type": "hash",
        },
        "fields": [
            {"name": "type", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "tags", "type": "tag", "attrs": {"separator": ","}},
            {"name": "wf", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "general", "type": "tag"},
            {"name": "agent_id", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "content", "type": "text"},
            {"name": "importance", "type": "numeric"},
            {"name": "created_at", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "expires_at", "type": "numeric"},
            {
                "name": "embedding",
                "type": "vector",
                "attrs": {
                    "algorithm": "hnsw",
                    "dims": dimension,
                    "distance_metric": "cosine",
                    "datatype": "float32",
                },
            },
        ],
    }


def index_name(ns: str) -> str:
    return f"membus:{ns}"


def record_key(ns: str, memory_id: str) -> str:
    return f"membus:{ns}:m:{memory_id}"


def access_key(ns: str, memory_id: str) -> str:
    return f"membus:{ns}:a:{memory_id}"


def meta_key(ns: str) -> str:
    return f"membus:meta:{ns}"


def read_filter(
    now_ms: int,
    scope: ReadScope,
    *,
    types: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> FilterExpression:
    """The filter every read applies: live (not expired), in scope, and the request's filters."""
    general = Tag("general") == GENERAL
    where: FilterExpression
    if scope.workflow_id is None:
        where = general
    elif scope.general:
        where = (Tag("wf") == scope.workflow_id) | general
    else:
        where = Tag("wf") == scope.workflow_id
    f = (Num("expires_at") > now_ms) & where
    if types:
        f = f & (Tag("type") == list(types))
    if tags:
        f = f & (Tag("tags") == list(tags))
    if since_ms is not None:
        f = f & (Num("created_at") >= since_ms)
    if until_ms is not None:
        f = f & (Num("created_at") <= until_ms)
    return f


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key_id(ns: str, key: str) -> str:
    return key.removeprefix(f"membus:{ns}:m:")


def _stored(
    ns: str, doc: Any, names: Iterable[str], distance: float | None = None
) -> StoredMemory:
    # redis-py puts the key in `doc.id`, shadowing our own `id` field; the key holds the id.
    fields = {f: _text(getattr(doc, f)) for f in names if f != "id" and hasattr(doc, f)}
    fields["id"] = _key_id(ns, doc.id)
    return StoredMemory(fields, distance=distance)


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
async def redis_errors() -> AsyncIterator[None]:
    """Turn 'Redis is down' into `unavailable`, so clients know a retry is safe."""
    try:
        yield
    except (redis.exceptions.RedisError, RedisSearchError, OSError) as exc:
        if _is_connection_error(exc):
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
        self._bump = client.register_script(_BUMP_LUA)
        self._delete = client.register_script(_DELETE_LUA)

    async def namespace(self, ns: str) -> tuple[AsyncSearchIndex, NamespaceMeta]:
        """The namespace's index and meta, created on first use."""
        cached = self._indexes.get(ns)
        if cached is not None:
            return cached
        mine = NamespaceMeta(self.embedder_name, self.dimension)
        async with redis_errors():
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
        self._indexes[ns] = (index, meta)
        return index, meta

    def forget(self, ns: str) -> None:
        self._indexes.pop(ns, None)

    async def write(self, ns: str, fields: dict[str, Any], expires_ms: int) -> None:
        key = record_key(ns, fields["id"])
        async with redis_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key, mapping=fields)
            if expires_ms != PERMANENT_MS:
                pipe.pexpireat(key, expires_ms)
            await pipe.execute()

    async def knn(
        self, ns: str, vector: np.ndarray, where: FilterExpression, k: int
    ) -> list[StoredMemory]:
        index, _ = await self.namespace(ns)
        query = VectorQuery(
            vector=vector.astype(np.float32).tobytes(),
            vector_field_name="embedding",
            return_fields=list(RECORD_FIELDS),
            filter_expression=where,
            num_results=k,
        )
        result = await self._search(ns, index, query)
        return [
            _stored(ns, doc, RECORD_FIELDS, distance=float(doc.vector_distance))
            for doc in result.docs
        ]

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
        return int(result.total), [_stored(ns, doc, names) for doc in result.docs]

    async def ids(self, ns: str, where: FilterExpression, limit: int) -> list[str]:
        """Ids of up to `limit` matching memories (no content loaded)."""
        index, _ = await self.namespace(ns)
        query = FilterQuery(filter_expression=where, num_results=limit)
        query.no_content()
        result = await self._search(ns, index, query)
        return [_key_id(ns, doc.id) for doc in result.docs]

    async def _search(self, ns: str, index: AsyncSearchIndex, query: Any) -> Any:
        async with redis_errors():
            try:
                return await index.search(query.query, query_params=query.params)
            except RedisSearchError as exc:
                if not _is_missing_index(exc) or _is_connection_error(exc):
                    raise
            # The index vanished under us (dropped or flushed): create it again, once.
            self.forget(ns)
            index, _ = await self.namespace(ns)
            return await index.search(query.query, query_params=query.params)

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
        async with redis_errors():
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
        """Live memories by id, in order (None where missing or expired), bumping access."""
        async with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.hmget(record_key(ns, mid), RECORD_FIELDS)
            rows = await pipe.execute()
        found: list[StoredMemory | None] = []
        for values in rows:
            if values[0] is None:
                found.append(None)
                continue
            fields = {
                f: _text(v) for f, v in zip(RECORD_FIELDS, values, strict=True) if v is not None
            }
            found.append(StoredMemory(fields) if int(fields["expires_at"]) > now_ms else None)
        await self.bump(ns, [m for m in found if m is not None], now_ms)
        return found

    async def bump(self, ns: str, memories: list[StoredMemory], now_ms: int) -> None:
        """Count an access to each memory; fill in the counters as they were before it."""
        if not memories:
            return
        keys: list[str] = []
        for m in memories:
            keys += [record_key(ns, m.id), access_key(ns, m.id)]
        async with redis_errors():
            olds = await self._bump(keys=keys, args=[now_ms])
        for m, old in zip(memories, olds, strict=True):
            if old:
                m.access_count = int(old[0]) if old[0] else 0
                m.last_accessed_ms = int(old[1]) if old[1] else None

    async def delete(
        self, ns: str, ids: list[str], now_ms: int
    ) -> list[tuple[str, str, str | None, str | None, str] | None]:
        """Delete live memories; (id, type, workflow_id, agent_id, content) of each, or None."""
        if not ids:
            return []
        keys: list[str] = []
        for mid in ids:
            keys += [record_key(ns, mid), access_key(ns, mid)]
        async with redis_errors():
            rows = await self._delete(keys=keys, args=[now_ms])
        out: list[tuple[str, str, str | None, str | None, str] | None] = []
        for row in rows:
            if not row:
                out.append(None)
                continue
            mid, type_, wf, agent, content = (_text(v) if v else None for v in row)
            out.append((mid or "", type_ or "", wf, agent, content or ""))
        return out
