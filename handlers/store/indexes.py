"""Namespace indexes: created on first use (by whichever handler comes first), brought up to
the current schema, and forgotten when Redis was lost, since it may come back without them.

A new namespace starts *pooled*: its memories carry a `pool` field (a number of its own)
and live in an index it shares with up to 63 other small namespaces of its vector dimension
(`schema.pool_schema_dict`, `placement.pool_index_name`), and every query of it is confined to
its own memories by that field (`Namespace.confine`). Once it holds `pool_max` memories it
is *promoted* to an index of its own (`promote`), for good. Where a namespace is indexed is
the `placement.tier_key` (its pool number, or `own`), which the write scripts read, so a memory is
written into the right index even by a handler that has not yet heard of a promotion;
readers of a pooled namespace check it after each query (`Queries.run`). `MEMBUS_POOL_MAX=0`
turns pools off."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, NamedTuple, TypeVar, overload

import msgspec
import redis.exceptions
import structlog
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.query.filter import FilterExpression, Num
from redisvl.schema import IndexSchema

from handlers.errors import Unavailable
from handlers.store.cluster import is_cluster
from handlers.store.failures import Guard, is_missing_index
from handlers.store.keys import POOL_NAMESPACES, Pooled, meta_key
from handlers.store.placement import (
    OWN_BUILDING,
    OWN_INDEX,
    POOL_SEQUENCE,
    home_key,
    index_name,
    passing_index_name,
    pool_filter,
    pool_number,
    pool_of,
    spread,
    tier_key,
)
from handlers.store.resp import index_attributes, index_indexing, text
from handlers.store.schema import (
    POOL_FIELD,
    NamespaceMeta,
    pool_schema_dict,
    schema_dict,
)
from handlers.store.tallies import complete_marks

log = structlog.get_logger("membus.store")
T = TypeVar("T")

# A home being decided: the claiming handler's token follows.
_CLAIM = "claim:"
# The home, if the claim is still this handler's (persistent: SET drops the claim's expiry).
_SETTLE_HOME_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_meta_decoder = msgspec.json.Decoder(NamespaceMeta)


class Namespace(NamedTuple):
    index: AsyncSearchIndex
    meta: NamespaceMeta
    # The namespace's pool number while it is pooled; None once it has its own index.
    pool: int | None = None

    @property
    def mine(self) -> FilterExpression | None:
        """The filter to this namespace's memories in its pool index (None: own index)."""
        return None if self.pool is None else Num(POOL_FIELD) == self.pool

    @property
    def mine_for_text(self) -> str | None:
        """`mine` for a full-text query: "no other pool number" rather than "this one".

        RediSearch drives an intersection from its smallest part; driven from a small
        filter, it reads the text part lazily and scores only one of a word's forms
        (`migration`, `+migrat`) for some documents, so equal memories scored 2/3 of each
        other. A negation counts as large, so the words drive and every form is scored, at
        the cost of reading the words' matches across the pool: which is why a pool holds
        at most `keys.POOL_NAMESPACES` namespaces, each under `pool_max` memories."""
        if self.pool is None:
            return None
        return f"-@{POOL_FIELD}:[-inf ({self.pool}] -@{POOL_FIELD}:[({self.pool} +inf]"

    def confine(self, where: FilterExpression) -> FilterExpression:
        """`where`, limited to this namespace's memories (a pool index holds many)."""
        mine = self.mine
        if mine is None:
            return where
        return mine if str(where) == "*" else mine & where


class Indexes:
    def __init__(
        self,
        client: Any,
        mine: NamespaceMeta,
        guard: Guard,
        pool_max: int = 0,
    ) -> None:
        self.client = client
        self.mine = mine
        self._guard = guard
        # A new namespace is pooled until it holds this many memories (0: never pooled).
        self.pool_max = pool_max
        # On a Redis Cluster a pool's namespaces keep their keys under its tag (`locate`).
        self.clustered = is_cluster(client)
        # Caches only: every replica can rebuild them from Redis.
        self._homes: dict[str, str] = {}
        self._open: dict[str, Namespace] = {}
        self._pending: dict[str, asyncio.Future[Namespace]] = {}
        self._locating: dict[str, asyncio.Future[str]] = {}
        self._settle_home = client.register_script(_SETTLE_HOME_LUA)
        # Pool indexes by (dimension, group): `placement.pool_of`.
        self._pools: dict[tuple[int, int], AsyncSearchIndex] = {}

    async def locate(self, ns: str) -> str:
        """The namespace as its keys are named: on one server, its name; on a Redis Cluster,
        a `Pooled` name when it was born pooled. RediSearch reads a document's fields only
        when its key is in the slot of the index's name, so a pool's namespaces keep their
        keys under the pool's tag there, for good (a namespace outgrowing its pool gets an
        index of its own in the same slot). Set by the namespace's first user, in
        `placement.home_key`; cached, since it never changes while Redis keeps it."""
        if not self.clustered:
            return ns
        home = self._homes.get(ns)
        if home is None:
            # Concurrent first requests share one look-up (and take one pool sequence).
            home = await _shared(self._locating, ns, self._home)
        return home

    async def _home(self, ns: str) -> str:
        async with self._guard():
            home = self._homes[ns] = await self._read_home(ns)
        return home

    async def _read_home(self, ns: str, wait_s: float = 10.0) -> str:
        key = home_key(ns)
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            where = await self.client.get(key)
            if where is None:
                await self._claim_home(ns)
            elif not text(where).startswith(_CLAIM):
                return ns if text(where) == OWN_INDEX else Pooled(ns, int(where))
            elif asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)  # another handler is taking its pool sequence
            else:
                raise Unavailable(f"Namespace {ns!r} is still being set up; retry shortly.")

    async def _claim_home(self, ns: str) -> None:
        """Decide where a namespace without a home lives. Its pool sequence is taken by
        one handler, under a claim the others wait on: each taking one wasted sequences
        (1.5 a namespace with two handlers) and left pools emptier. A claim lapses after
        5 s, should its handler die."""
        key = home_key(ns)
        # A namespace made before homes were kept has its keys under its own tag.
        made = await self.client.exists(meta_key(ns), tier_key(ns))
        if not self.pool_max or made:
            await self.client.set(key, OWN_INDEX, nx=True)
            return
        token = f"{_CLAIM}{uuid.uuid4().hex}"
        if await self.client.set(key, token, nx=True, px=5000):
            sequence = spread(int(await self.client.incr(POOL_SEQUENCE)))
            await self._settle_home(keys=[key], args=[token, sequence])

    async def _keep_home(self, ns: str) -> None:
        """Set the namespace up where its home said it is (`ns`), unless Redis has lost the
        home since (a flush, a node back empty) and another handler has put the namespace
        elsewhere: then forget it here, and have the request retried, rather than write
        where the others no longer read."""
        where = str(ns.sequence) if isinstance(ns, Pooled) else OWN_INDEX
        await self.client.set(home_key(ns), where, nx=True)
        if text(await self.client.get(home_key(ns)) or b"") != where:
            self._homes.pop(ns, None)
            raise Unavailable(
                "Redis lost this namespace's set-up while the request ran, and another"
                " handler has set it up anew; retry."
            )

    async def get(self, ns: str) -> Namespace:
        """The namespace's index and meta, created on first use."""
        if (
            self.clustered
            and not isinstance(ns, Pooled)
            and isinstance(self._homes.get(ns), Pooled)
        ):
            # Its cached set-up would answer, and the caller name keys where nothing is.
            raise TypeError(f"namespace {ns!r} is pooled here: pass the name `locate` gives")
        cached = self._open.get(ns)
        if cached is not None:
            return cached
        # Concurrent first requests for a namespace share one set-up.
        return await _shared(self._pending, ns, self._create)

    def cached(self, ns: str) -> Namespace | None:
        """The namespace's index as last seen here, without asking Redis (None: not yet)."""
        return self._open.get(ns)

    def forget(self, ns: str) -> None:
        self._homes.pop(ns, None)
        space = self._open.pop(ns, None)
        if space is not None and space.pool is not None:
            # Its pool index may be what vanished: look again on next use.
            self._pools.pop(pool_of(space.pool), None)

    def forget_all(self) -> None:
        self._homes.clear()
        self._open.clear()
        self._pools.clear()

    async def _create(self, ns: str) -> Namespace:
        async with self._guard():
            if self.clustered:
                await self._keep_home(ns)
            # The first writer decides what the namespace's vectors are; later ones read it.
            created = await self.client.set(meta_key(ns), msgspec.json.encode(self.mine), nx=True)
            meta = _meta_decoder.decode(await self.client.get(meta_key(ns)) or b"")
            tier = await self.client.get(tier_key(ns))
            if tier is None and not created:
                # Another handler made the meta a moment ago and is about to set the tier:
                # wait for it, or this one would give the new namespace an index of its own.
                tier = await self._tier_soon(ns)
            opens = False
            # A namespace whose set-up Redis lost (its meta, its tier) but whose own index is
            # there is not new: it keeps that index.
            fresh = created and tier is None and await self._info(index_name(ns)) is None
            if fresh:
                # A new namespace: its writes count every memory it will hold (`tallies`)
                # and give each its validity window (`validity`).
                for key in complete_marks(ns):
                    await self.client.set(key, 1)
            if tier is None:
                # A namespace that is not new keeps (or gets back) an index of its own: its
                # memories may lack the pool field. On a cluster, a namespace is pooled
                # where its home says so (`locate`).
                sequence = ns.sequence if isinstance(ns, Pooled) else None
                if fresh and self.pool_max and not self.clustered:
                    sequence = int(await self.client.incr(POOL_SEQUENCE))
                if fresh and sequence is not None:
                    first = str(pool_number(sequence, meta.dimension))
                    # The first number of its pool: no memory can be in that pool yet.
                    # (A cluster's first is 0: `placement.spread`.)
                    opens = sequence % POOL_NAMESPACES == 0
                    opens = opens or (sequence == 1 and not self.clustered)
                else:
                    first = OWN_INDEX
                claimed = await self.client.set(tier_key(ns), first, nx=True)
                opens = opens and bool(claimed)
                tier = await self.client.get(tier_key(ns)) or first
            index = None
            if text(tier) == OWN_BUILDING:
                # Mid-promotion: the passing index, unless it is gone (the promotion ended).
                index = await self.own(
                    ns, meta.dimension, name=passing_index_name(ns), create=False
                )
                tier = await self.client.get(tier_key(ns)) or tier
            if index is not None and text(tier) == OWN_BUILDING:
                space = Namespace(index, meta)
            elif text(tier) in (OWN_INDEX, OWN_BUILDING):
                space = Namespace(await self.own(ns, meta.dimension), meta)
            else:
                pool = await self._pool(int(tier), meta.dimension, empty=opens)
                space = Namespace(pool, meta, int(tier))
        self._open[ns] = space
        return space

    async def _tier_soon(self, ns: str, wait_s: float = 1.0) -> Any:
        """The namespace's tier once another handler has set it (None after `wait_s`)."""
        deadline = asyncio.get_running_loop().time() + wait_s
        while (tier := await self.client.get(tier_key(ns))) is None:
            if asyncio.get_running_loop().time() >= deadline:
                return None
            await asyncio.sleep(0.01)
        return tier

    @overload
    async def own(
        self,
        ns: str,
        dimension: int,
        wait_s: float = 5.0,
        *,
        name: str | None = None,
        create: Literal[True] = True,
    ) -> AsyncSearchIndex: ...

    @overload
    async def own(
        self, ns: str, dimension: int, wait_s: float = 5.0, *, name: str | None = None,
        create: bool,
    ) -> AsyncSearchIndex | None: ...  # fmt: skip

    async def own(
        self,
        ns: str,
        dimension: int,
        wait_s: float = 5.0,
        *,
        name: str | None = None,
        create: bool = True,
    ) -> AsyncSearchIndex | None:
        """The namespace's own index (or the one named `name`: a promotion's passing
        index), created if missing (it then indexes the namespace's existing memories in
        the background: wait up to `wait_s` for that). Without `create`, None if missing:
        only a promotion makes a passing index, since one a reader made again would be left
        behind.

        One FT.INFO when the index exists: it costs Redis time in proportion to the index
        (38 ms at 100k memories), and redisvl's create() alone would send two."""
        schema = schema_dict(ns, dimension)
        if name is not None:
            schema["index"]["name"] = name
        index = AsyncSearchIndex(IndexSchema.from_dict(schema), redis_client=self.client)
        info = await self._info(index.name)
        if info is None:
            if not create:
                return None
            await self._create_index(index)
            info = await self._info(index.name)
        await self._bring_up(index, info, wait_s)
        return index

    async def _create_index(self, index: AsyncSearchIndex, *options: Any) -> None:
        """FT.CREATE for `index`'s schema, with `options` (FILTER, ...) before its fields;
        sent as is, so that a cluster routes it by the index's name (redisvl's create()
        sends it to a fixed node), and fine if another replica made it first."""
        args: list[Any] = ["ON", "HASH", "PREFIX", 1, index.schema.index.prefix, *options]
        args.append("SCHEMA")
        for field in index.schema.redis_fields:
            args += field.redis_args()
        async with _unless_exists():
            await self.client.execute_command("FT.CREATE", index.name, *args)

    async def _info(self, name: str) -> Any:
        """The index's raw FT.INFO, or None when there is no such index."""
        try:
            return await self.client.execute_command("FT.INFO", name)
        except redis.exceptions.ResponseError as exc:
            if is_missing_index(exc):
                return None
            raise

    async def _pool(self, number: int, dimension: int, empty: bool = False) -> AsyncSearchIndex:
        """The pool index of the pooled namespace with this pool number, created if
        missing. `empty`: the pool holds no memory yet, so a new index skips the scan of
        the keyspace that FT.CREATE otherwise starts (it grows with every key in Redis, and
        the first add waits for it); an index made again after a loss scans."""
        index = self._pools.get(pool_of(number))
        if index is not None:
            return index
        index = AsyncSearchIndex(
            IndexSchema.from_dict(pool_schema_dict(number, dimension, self.clustered)),
            redis_client=self.client,
        )
        options = ["FILTER", pool_filter(number, POOL_FIELD)]
        await self._create_index(index, *options, *(["SKIPINITIALSCAN"] if empty else []))
        await self._bring_up(index, await self._info(index.name))
        self._pools[pool_of(number)] = index
        return index

    async def _bring_up(self, index: AsyncSearchIndex, info: Any, wait_s: float = 5.0) -> None:
        """An index found or just made (`info`: its FT.INFO, None if it is gone again): up
        to the current schema, and, while it indexes existing memories, waited for."""
        if info is None or await self._add_missing_fields(index, info) or index_indexing(info):
            await self.wait_indexed(index, wait_s)

    async def _add_missing_fields(self, index: AsyncSearchIndex, info: Any) -> bool:
        """Bring an index made by an older version up to the current schema (`info`: its
        FT.INFO): FT.ALTER adds the fields it lacks, and RediSearch indexes existing
        memories for them. Whether a field was added."""
        have = index_attributes(info)
        added = False
        for field in index.schema.redis_fields:
            if field.name not in have:
                log.info("index.upgrade", index=index.name, field=field.name)
                await self.client.execute_command(
                    "FT.ALTER", index.name, "SCHEMA", "ADD", *field.redis_args()
                )
                added = True
        return added

    async def wait_indexed(self, index: AsyncSearchIndex, limit_s: float = 5.0) -> bool:
        """A (re-)created index scans existing keys in the background; let it finish.
        Whether it did: False when it is still scanning, or gone (a promotion builds an
        index again; the query that finds it missing sets it up anew)."""
        deadline = asyncio.get_running_loop().time() + limit_s
        while True:
            info = await self._info(index.name)
            if info is None:
                return False
            if not index_indexing(info):
                return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)


async def _shared(
    pending: dict[str, asyncio.Future[T]], ns: str, make: Callable[[str], Awaitable[T]]
) -> T:
    """`make(ns)`, run once for every caller that asks while it runs (`pending` holds it)."""
    running = pending.get(ns)
    if running is None:
        running = pending[ns] = asyncio.ensure_future(make(ns))
        running.add_done_callback(lambda _: pending.pop(ns, None))
    return await asyncio.shield(running)


@contextlib.asynccontextmanager
async def _unless_exists() -> AsyncIterator[None]:
    """An FT.CREATE that another replica beat us to is fine."""
    try:
        yield
    except (RedisSearchError, redis.exceptions.ResponseError) as exc:
        if "already exists" not in str(exc).lower():
            raise
