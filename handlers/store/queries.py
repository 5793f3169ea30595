"""Queries of a namespace's index: nearest vectors (with their hybrid policy), pages,
ids, counts, aggregations, and the scope reads the tallies answer. Each runs against the
index that holds the namespace, again if that index moved while it ran (`_on_index`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import msgspec
import numpy as np
import redis.asyncio as aioredis
import redis.exceptions
import structlog
from redis.commands.search import reducers
from redis.commands.search.aggregation import AggregateRequest
from redisvl.exceptions import RedisSearchError
from redisvl.query import CountQuery, FilterQuery, VectorQuery
from redisvl.query.filter import FilterExpression

from handlers.store import keys
from handlers.store.failures import Guard, is_connection_error, is_missing_index
from handlers.store.filters import ReadScope, Scoped, read_filter
from handlers.store.indexes import Indexes, Namespace
from handlers.store.placement import tier_key
from handlers.store.policy import HybridPolicy
from handlers.store.record import (
    CANDIDATE_FIELDS,
    RECORD_FIELDS,
    Candidate,
    Mentions,
    Record,
    Summary,
    TypeGroup,
    decode_all,
    storage_fields,
)
from handlers.store.resp import Found, parse_aggregate, parse_search, text
from handlers.store.schema import VECTOR_FIELD
from handlers.store.tallies import Behind, Overview, Tallies
from handlers.store.trip import Inside, Queued, Search
from handlers.store.validity import ENDED_LUA, Validity

log = structlog.get_logger("membus.store")

D = TypeVar("D", bound=msgspec.Struct)
S = TypeVar("S", Summary, Record, Mentions)
T = TypeVar("T")


class Page(NamedTuple, Generic[S]):
    """A page of a listing and the total that matched."""

    total: int
    items: list[S]


def decode_docs(ns: str, found: Found, shape: type[D]) -> list[D]:
    """An FT.SEARCH page as Structs (each document's id comes from its key)."""
    prefix = keys.record_prefix(ns)
    stored = []
    for key, fields in found.docs:
        if not fields:  # its key expired between the match and the load
            continue
        fields["id"] = key.removeprefix(prefix)
        stored.append(fields)
    return decode_all(shape, stored)


class Queries:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        indexes: Indexes,
        tallies: Tallies,
        validity: Validity,
    ) -> None:
        self.client = client
        self._guard = guard
        self._indexes = indexes
        self._tallies = tallies
        self._validity = validity
        self._policy = HybridPolicy()
        # The Lua sources this handler has loaded into Redis (`_load`).
        self._loaded: set[str] = set()

    async def knn(
        self,
        ns: str,
        vector: np.ndarray,
        where: FilterExpression,
        k: int,
        policy_key: str | None = None,
        scoped: Scoped | None = None,
        ended_by: int | None = None,
    ) -> list[Candidate]:
        """The k nearest memories passing `where`. A filter whose text changes with every
        call (a time bound) gives a `policy_key` that does not, so its hybrid policy is
        cached (see `hybrid_policy`); a filter that is a scope alone says so (`scoped`), so
        that its size is read from the tallies."""
        search = self.knn_search(ns, vector, where, k, policy_key, scoped)
        return decode_docs(ns, await self.search(ns, search.build, ended_by=ended_by), Candidate)

    def knn_search(
        self,
        ns: str,
        vector: np.ndarray,
        where: FilterExpression,
        k: int,
        policy_key: str | None = None,
        scoped: Scoped | None = None,
        signals: Sequence[str] = (),
    ) -> Search:
        """`knn`'s query, to send with others (`run`); its page decodes as `Candidate`s
        (with the query signals' fields in `signals` too: `SIGNAL_FIELDS`)."""

        async def query(space: Namespace) -> VectorQuery:
            # A pooled namespace is small: scanning its own vectors is exact and fastest.
            policy = (
                "ADHOC_BF"
                if space.pool is not None
                else await self.hybrid_policy(ns, where, policy_key, scoped)
            )
            return VectorQuery(
                vector=vector.astype(np.float32).tobytes(),
                vector_field_name=VECTOR_FIELD,
                return_fields=[*CANDIDATE_FIELDS, *signals],
                filter_expression=space.confine(where),
                num_results=k,
                hybrid_policy=policy,
            )

        return Search(query)

    async def hybrid_policy(
        self,
        ns: str,
        where: FilterExpression,
        key: str | None = None,
        scoped: Scoped | None = None,
    ) -> str:
        """The RediSearch hybrid policy a vector query with this filter runs with in the
        namespace's own index (chosen by the filter's count, cached a few seconds under
        `key`, by default the filter). The namespace's size, and a filter's that is a scope
        alone (`scoped`), come from the tallies."""
        actual = str(where)

        async def count(filter_: str) -> int:
            if filter_ == "*":
                return await self.live_total(ns)
            if scoped is not None:
                now_ms = int(time.time() * 1000)
                seen: Overview | None = None
                with contextlib.suppress(Behind):
                    seen = await self._tallies.overview(ns, scoped.scope, now_ms)
                if seen is not None:
                    total = seen.general_count + seen.workflow_count
                    return total - seen.superseded_count if scoped.current else total
            filter_ = actual if filter_ == key else filter_
            return await self.count(ns, FilterExpression(filter_))

        return await self._policy.choose(ns, key or actual, count)

    async def count(self, ns: str, where: FilterExpression) -> int:
        """How many of the namespace's memories pass `where`."""

        async def query(space: Namespace) -> CountQuery:
            return CountQuery(filter_expression=space.confine(where))

        return (await self.search(ns, query)).total

    async def live_total(self, ns: str) -> int:
        """How many memories the namespace holds: from its tallies, or, in a namespace from
        before them, counted at most every few seconds."""
        total = await self._tallies.total(ns)
        if total is not None:
            return total
        return await self._policy.total(ns, lambda where: self.count(ns, FilterExpression(where)))

    async def page(
        self,
        ns: str,
        where: FilterExpression,
        shape: type[S],
        *,
        offset: int,
        limit: int,
        oldest_first: bool = False,
        ended_by: int | None = None,
    ) -> Page[S]:
        """Memories newest first (or oldest first), read as `shape` (`Summary`, `Record`,
        `Mentions`), with the total that match."""
        names = RECORD_FIELDS if shape is Record else storage_fields(shape)

        async def query(space: Namespace) -> FilterQuery:
            q = FilterQuery(
                filter_expression=space.confine(where),
                return_fields=list(names),
                num_results=limit,
                sort_by=("created_at", "ASC" if oldest_first else "DESC"),
            )
            q.paging(offset, limit)
            return q

        found = await self.search(ns, query, ended_by=ended_by)
        return Page(found.total, decode_docs(ns, found, shape))

    async def newest(
        self,
        ns: str,
        scope: ReadScope,
        now_ms: int,
        *,
        offset: int,
        limit: int,
        current: bool,
        as_of_ms: int | None = None,
    ) -> Page[Record] | None:
        """The memories of a scope (with `current`, none superseded), newest first, and how
        many there are, from the tallies the writes keep: the work follows the page, not the
        scope. None while they are not complete (see `tallies`)."""
        await self._indexes.get(ns)
        try:
            found = await self._tallies.newest(ns, scope, now_ms, offset, limit, current, as_of_ms)
        except Behind:
            return None
        if found is None:
            return None
        return Page(*found)

    async def ids(
        self,
        ns: str,
        where: FilterExpression,
        limit: int,
        *,
        sort_by: str | None = None,
        offset: int = 0,
        ended_by: int | None = None,
    ) -> tuple[list[str], int]:
        """Ids of up to `limit` matching memories (no content loaded), and how many match;
        `sort_by` a sortable field, highest first, from `offset` on."""

        async def query(space: Namespace) -> FilterQuery:
            q = FilterQuery(
                filter_expression=space.confine(where),
                num_results=limit,
                sort_by=(sort_by, "DESC") if sort_by else None,
            )
            q.no_content()
            q.paging(offset, limit)
            return q

        found = await self.search(ns, query, ended_by=ended_by)
        return [keys.id_of(ns, key) for key, _ in found.docs], found.total

    async def overview(self, ns: str, scope: ReadScope, now_ms: int) -> Overview:
        """What `describe` reports of the memories live in a scope: from the tallies the
        writes keep (see `tallies`), or, while more memories expired at once than one read
        settles, by aggregating."""
        await self._indexes.get(ns)
        with contextlib.suppress(Behind):
            seen = await self._tallies.overview(ns, scope, now_ms)
            if seen is not None:
                return seen
        where = read_filter(now_ms, scope)
        return Overview.of(await self.aggregate(ns, where, ended_by=now_ms))

    async def aggregate(
        self, ns: str, where: FilterExpression, ended_by: int | None = None
    ) -> list[TypeGroup]:
        """Counts by type and scope side, tag lists and created_at bounds: no content (after
        flagging the validities ended by `ended_by`, in the same round trip)."""

        async def commands(space: Namespace) -> list[list[Any]]:
            req = (
                AggregateRequest(str(space.confine(where)))
                .group_by(
                    ["@type", "@general", "@superseded"],
                    reducers.count().alias("n"),
                    reducers.tolist("@tags").alias("tags"),
                    reducers.min("@created_at").alias("oldest"),
                    reducers.max("@created_at").alias("newest"),
                    reducers.min("@expires_at").alias("expiry"),
                )
                .dialect(2)
            )
            return [["FT.AGGREGATE", space.index.name, *req.build_args()]]

        (reply,) = await self._on_index(ns, commands, ended_by)
        return [msgspec.convert(row, TypeGroup, strict=False) for row in parse_aggregate(reply)]

    async def search(
        self,
        ns: str,
        build: Callable[[Namespace], Awaitable[Any]],
        with_scores: bool = False,
        ended_by: int | None = None,
    ) -> Found:
        """Run a redisvl (or redis-py) query, built for the namespace's index, as a raw
        FT.SEARCH (redis-py's own result objects cost more to build than the query takes in
        Redis), in one round trip (`run`)."""
        (found,), _ = await self.run(ns, [Search(build, with_scores)], ended_by)
        return found

    async def run(
        self,
        ns: str,
        searches: Sequence[Search],
        ended_by: int | None = None,
        also: Sequence[Queued[Any]] = (),
    ) -> tuple[list[Found], list[Any]]:
        """FT.SEARCHes on the namespace's index and other rooms' commands (`also`), in one
        round trip (`_on_index`): each search's page, and each of `also` read."""

        async def commands(space: Namespace) -> list[list[Any]]:
            return [await self._command(space, s) for s in searches]

        replies = await self._on_index(ns, commands, ended_by, also)
        found = [
            parse_search(raw, s.with_scores)
            for raw, s in zip(replies[: len(searches)], searches, strict=True)
        ]
        read, at = [], len(searches)
        for queued in also:
            n = len(queued.commands)
            read.append(queued.parse(replies[at : at + n]))
            at += n
        return found, read

    async def space(self, ns: str) -> Namespace:
        """The namespace's index and meta (`Indexes.get`)."""
        return await self._indexes.get(ns)

    async def run_inside(self, ns: str, inside: Inside[T]) -> T:
        """A script that runs an FT.SEARCH on the namespace's index (`Inside`), in one round
        trip (`_on_index`)."""

        async def commands(space: Namespace) -> list[list[Any]]:
            return [inside.call(await self._command(space, inside.search))]

        (reply,) = await self._on_index(ns, commands, scripts=(inside.script,))
        return inside.parse(reply)

    async def _on_index(
        self,
        ns: str,
        commands: Callable[[Namespace], Awaitable[list[list[Any]]]],
        ended_by: int | None = None,
        also: Sequence[Queued[Any]] = (),
        scripts: tuple[str, ...] = (),
    ) -> list[Any]:
        """The replies to commands on the index that holds the namespace (built for it by
        `commands`) and to `also`, in one round trip: after flagging the memories whose
        validity ended by `ended_by` (a current read's time, `Validity`), and, in a pool,
        with the tier read after them. If the index vanished (dropped or flushed), it is set
        up again and all is sent again; likewise when the namespace was promoted out of its
        pool (or lost) meanwhile: its tier, read after the queries, is then no longer its
        pool number, and they may have missed memories that had left the pool."""
        space = await self._indexes.get(ns)
        for attempt in range(3):
            async with self._guard():
                try:
                    built = await commands(space)
                    replies, left = await self._send(ns, space, built, ended_by, also, scripts)
                except (redis.exceptions.ResponseError, RedisSearchError) as exc:
                    if not is_missing_index(exc) or is_connection_error(exc) or attempt == 2:
                        raise
                else:
                    if not left:
                        return replies
            self._indexes.forget(ns)
            space = await self._indexes.get(ns)
        return replies  # the pool was left twice in a row: a namespace is promoted only once

    async def _command(self, space: Namespace, search: Search) -> list[Any]:
        query = await search.build(space)
        args: list[Any] = list(query.get_args())
        if params := getattr(query, "params", None):
            args += ["PARAMS", 2 * len(params)]
            for key, value in params.items():
                args += [key, value]
        return ["FT.SEARCH", space.index.name, *args]

    async def _send(
        self,
        ns: str,
        space: Namespace,
        commands: list[list[Any]],
        ended_by: int | None,
        also: Sequence[Queued[Any]],
        scripts: tuple[str, ...] = (),
    ) -> tuple[list[Any], bool]:
        """The replies to `commands` and `also`'s, and whether the namespace has left the
        pool its queries read, in one round trip (a pipeline, when there is more than one
        command). The scripts it runs by SHA (`scripts`: those `commands` run) are loaded
        first, once: a script missing from Redis fails the whole pipeline, and sending it
        all again doubles the work."""
        sources = [ENDED_LUA, *scripts] if ended_by is not None else [*scripts]
        sources += [src for queued in also for src in queued.scripts]
        await self._load(sources)
        try:
            return await self._send_once(ns, space, commands, ended_by, also)
        except redis.exceptions.NoScriptError:
            # Redis lost its scripts (a restart, a failover): load them, then send again.
            self._loaded.clear()
            await self._load(sources)
            return await self._send_once(ns, space, commands, ended_by, also)

    async def _load(self, sources: list[str]) -> None:
        """Load into Redis the scripts this handler has not loaded yet (on a cluster, on
        every primary)."""
        for source in sources:
            if source not in self._loaded:
                await self.client.script_load(source)
                self._loaded.add(source)

    async def _send_once(
        self,
        ns: str,
        space: Namespace,
        commands: list[list[Any]],
        ended_by: int | None,
        also: Sequence[Queued[Any]],
    ) -> tuple[list[Any], bool]:
        extra = [c for queued in also for c in queued.commands]
        # Only a query of the index can miss memories that left the pool meanwhile.
        pooled = space.pool is not None and bool(commands)
        if ended_by is None and not pooled and len(commands) + len(extra) == 1:
            return [await self.client.execute_command(*[*commands, *extra][0])], False
        pipe = self.client.pipeline(transaction=False)
        if ended_by is not None:
            self._validity.end_in(pipe, ns, ended_by)
        for command in [*commands, *extra]:
            pipe.execute_command(*command)
        if pooled:
            pipe.get(tier_key(ns))
        out = await pipe.execute()
        out = out[1:] if ended_by is not None else out
        if pooled:
            return out[:-1], text(out[-1] or b"") != str(space.pool)
        return out, False
