"""The Redis Stack store: every Redis read and write of the service, in rooms of one
mechanism each, wired here.

A memory is one hash (`keys.record_key`, indexed, the fields of `record.Record` plus its
embedding) and, once it has been read, a small access hash (`keys.access_key`, not indexed,
so read bumps never re-index the vector). Both keys carry the same PEXPIREAT, so Redis
itself expires memories. The rooms: `writes` and `batches` (atomic writes), `reads` (by
id), `queries` (the index), `text` (full-text scoring), `tallies` (what `describe`
counts), `validity` (v3 time), `indexes`, `placement` and `promotions` (where a
namespace is indexed), `spaces` (workspaces and states), `transfer`, `sessions`,
`claims` and `replicas` (durable writes), `erasure`. Operations call the rooms; a room does its own
upkeep (counting words, checking a pool's size) after its writes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis
import structlog

from handlers.errors import Unavailable
from handlers.store.background import Background
from handlers.store.batch import Batches
from handlers.store.claims import Claims
from handlers.store.erasure import Erasure
from handlers.store.failures import LOADING, MIGRATING, redis_errors
from handlers.store.indexes import Indexes
from handlers.store.lock import Locks, lock_key
from handlers.store.promotion import POOL_MAX, Promotions
from handlers.store.queries import Queries
from handlers.store.reads import Reads
from handlers.store.record import Record
from handlers.store.replicas import Replicas
from handlers.store.schema import NamespaceMeta
from handlers.store.sessions import Sessions
from handlers.store.spaces import Spaces
from handlers.store.tallies import Tallies
from handlers.store.text import Text
from handlers.store.transfer import Transfer
from handlers.store.validity import Validity
from handlers.store.writes import Writes

log = structlog.get_logger("membus.store")

T = TypeVar("T")

# How long a request waits for the handler to make sure of the key layout (`layout`).
LAYOUT_WAIT_S = 2.0


class Store:
    """Namespace indexes and every Redis read and write of the service."""

    def __init__(
        self,
        client: aioredis.Redis,
        embedder_name: str,
        dimension: int,
        pool_max: int = POOL_MAX,
        replicas_required: int | None = None,
    ) -> None:
        self.client = client
        guard = self._guard
        self.background = Background()
        self.indexes = Indexes(client, NamespaceMeta(embedder_name, dimension), guard, pool_max)
        self.locks = Locks(client, guard)
        self.tallies = Tallies(client, guard)
        self.validity = Validity(client, guard)
        self.reads = Reads(client, guard, self.background)
        self.queries = Queries(client, guard, self.indexes, self.tallies, self.validity)
        self.text = Text(client, guard, self.queries, self.background)
        self.promotions = Promotions(
            client, guard, self.indexes, self.locks, self.background, self.queries.live_total
        )
        self.writes = Writes(client, guard, self.indexes, self.write_with_setup, self.added)
        self.batches = Batches(client, guard, self.indexes, self.added)
        # Workspaces and the names of states.
        self.spaces = Spaces(client, guard, self.write_with_setup, self.added)
        # Export and import.
        self.transfer = Transfer(client, guard, self.write_with_setup, self.added)
        # What each recall session was given, turn by turn.
        self.sessions = Sessions(client, guard)
        # Erasure (`delete` with `erase`): history scrubbed, sessions and cache entries.
        self.erasure = Erasure(client, guard)
        # Which durable writes were applied (claimed by one handler at a time).
        self.claims = Claims(client, guard)
        # Where Redis has replicas, durable writes wait for one (see `durable`).
        self.replicas = Replicas(client, replicas_required)
        self._dropping = False
        # Set once Redis is known to be in the current key layout: a handler's start-up
        # clears it until `layout.ensure` has run (a Store made elsewhere starts set).
        self.layout_ready = asyncio.Event()
        self.layout_ready.set()
        # While the layout is not ready: whether Redis was last seen loading its data set
        # (what a request that cannot wait for it is told).
        self.redis_loading = False

    def added(self, ns: str, written: list[Record], new: bool = True) -> None:
        """After memories were written: their words counted and, for `new` ones, a pooled
        namespace's size checked now and then (in the background)."""
        if not written:
            return
        space = self.indexes.cached(ns)
        if new and space is not None and space.pool is not None:
            for _ in written:
                self.promotions.count_add(ns)
        self.text.count_later(ns, written)

    async def settle(self) -> None:
        """Wait for the work still running after replies (at shutdown)."""
        await self.background.settle()

    async def write_with_setup(
        self, ns: str, write: Callable[[], Awaitable[T]], unset: object
    ) -> T:
        """Run a write script that answers `unset` (writing nothing) when the namespace has
        no tier key: Redis lost the namespace, so set it up anew and write once more."""
        async with self._guard():
            out = await write()
        if out == unset:
            self.indexes.forget(ns)
            await self.indexes.get(ns)
            async with self._guard():
                out = await write()
        if out == unset:
            raise RuntimeError(f"namespace {ns!r} is not set up in Redis")
        return out

    async def locate(self, ns: str) -> str:
        """The namespace as its keys are named (`Indexes.locate`; on one server, its name):
        what every method here takes as `ns`."""
        return await self.indexes.locate(ns)

    async def meta(self, ns: str) -> NamespaceMeta:
        """What the namespace's vectors are (its index is created on first use)."""
        return (await self.indexes.get(ns)).meta

    def _guard(self) -> contextlib.AbstractAsyncContextManager[None]:
        # A Redis that comes back may have lost its indexes (a restart without persistence),
        # so after a lost connection every namespace is checked again on next use.
        if self.layout_ready.is_set() or MIGRATING.get():
            return redis_errors(self._lost)
        return self._after_layout()

    @contextlib.asynccontextmanager
    async def _after_layout(self) -> AsyncIterator[None]:
        """Redis is not yet known to be in the current key layout (`layout`): wait a little
        for the handler's start-up to make sure of it, else answer `unavailable`."""
        try:
            async with asyncio.timeout(LAYOUT_WAIT_S):
                await self.layout_ready.wait()
        except TimeoutError:
            if self.redis_loading:
                raise Unavailable(LOADING) from None
            raise Unavailable(
                "The memory store is not ready: Redis is down, or its keys are being brought"
                " to this version's layout (the handler logs say which); retry shortly."
            ) from None
        async with redis_errors(self._lost):
            yield

    def _lost(self) -> None:
        self.indexes.forget_all()
        # The pool's idle connections died with the old Redis: drop them now rather than
        # find out one request at a time (in-use ones fail and reconnect on their own).
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None and not self._dropping:
            self._dropping = True
            task = asyncio.ensure_future(pool.disconnect(inuse_connections=False))
            task.add_done_callback(self._dropped)

    def _dropped(self, task: asyncio.Future[None]) -> None:
        self._dropping = False
        if not task.cancelled() and task.exception() is not None:
            log.warning("redis.pool_drop_failed", error=repr(task.exception()))

    def exclusive(
        self, ns: str, name: str, hold_s: float = 5.0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """A lock shared by every handler (see `lock.Locks`)."""
        return self.locks.hold(lock_key(ns, name), hold_s)
