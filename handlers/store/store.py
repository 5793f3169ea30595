"""The Redis Stack store: every Redis read and write of the service, in typed records.

A memory is one hash (`keys.record_key`, indexed, the fields of `record.Record` plus its
embedding) and, once it has been read, a small access hash (`keys.access_key`, not indexed, so
read bumps never re-index the vector). Both keys carry the same PEXPIREAT, so Redis itself
expires memories. Queries are built with redisvl and sent as raw FT.SEARCH (see `resp`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import msgspec
import numpy as np
import redis.asyncio as aioredis
import redis.exceptions
import structlog
from redis.commands.search import reducers
from redis.commands.search.aggregation import AggregateRequest
from redis.commands.search.query import Query
from redisvl.exceptions import RedisSearchError
from redisvl.query import CountQuery, FilterQuery, VectorQuery
from redisvl.query.filter import FilterExpression

from handlers.errors import Unavailable
from handlers.store import keys
from handlers.store.claims import Claims
from handlers.store.failures import LOADING, is_connection_error, is_missing_index, redis_errors
from handlers.store.filters import (
    ReadScope,
    Scoped,
    read_filter,
    text_match,
    word_forms,
    written_words,
)
from handlers.store.indexes import Indexes, Namespace
from handlers.store.layout import MIGRATING
from handlers.store.lock import Locks
from handlers.store.policy import HybridPolicy
from handlers.store.record import (
    CANDIDATE_FIELDS,
    PERMANENT_MS,
    RECORD_FIELDS,
    Candidate,
    Entry,
    Fetched,
    Mentions,
    Record,
    Summary,
    TypeGroup,
    changed_fields,
    decode,
    mark_field,
    storage_fields,
    supersede_fields,
)
from handlers.store.record import (
    expiry as record_expiry,
)
from handlers.store.replicas import Replicas
from handlers.store.resp import Found, parse_row, parse_search, text
from handlers.store.schema import TEXT_FIELDS, VECTOR_FIELD, NamespaceMeta, new_hash
from handlers.store.scripts import (
    ADD_LUA,
    APPLY_LUA,
    DELETE_LUA,
    FETCH_LUA,
    FIELD_LUA,
    MENTION_LUA,
    SUPERSEDE_LUA,
    UPDATE_LUA,
)
from handlers.store.sessions import Sessions
from handlers.store.spaces import Spaces
from handlers.store.tallies import Behind, Overview, Tallies
from handlers.store.transfer import Transfer
from handlers.store.validity import Validity

log = structlog.get_logger("membus.store")

T = TypeVar("T")

# A namespace keeps to a shared pool index until it holds that many memories (see `indexes`;
# MEMBUS_POOL_MAX, 0: no pools); POOL_CHECK_EVERY new memories a handler writes there,
# it counts them.
POOL_MAX = 100
POOL_CHECK_EVERY = 32
# How long a request waits for the handler to make sure of the key layout (`layout`).
LAYOUT_WAIT_S = 2.0
# How long an `as_of` read waits for a namespace from before v3 to get validity windows.
AS_OF_WAIT_S = 2.0
_UNSET = 2  # what ADD_LUA returns for a namespace that Redis lost
S = TypeVar("S", Summary, Record, Mentions)


class Page(NamedTuple, Generic[S]):
    """A page of a listing and the total that matched."""

    total: int
    items: list[S]


def _record(names: tuple[str, ...], values: list[Any]) -> Record:
    return decode(Record, {n: text(v) for n, v in zip(names, values, strict=True) if v is not None})


_entries = msgspec.json.Decoder(Entry)
# The words counted of one memory, and how long a namespace's counts run before they start
# again (see `count_words_later`).
WORDS_PER_MEMORY = 300
WORDS_TTL_S = 24 * 3600


D = TypeVar("D", bound=msgspec.Struct)


def _bm25(space: Namespace, forms: list[str], where: FilterExpression, current: bool) -> Query:
    """The full-text query of the index terms `forms` in the namespace, scored by BM25
    (`text_match`): one shape for reading the best matches and for scoring given memories,
    so that a memory scores the same in both."""
    q = Query(text_match(forms, where, current, space.mine_for_text))
    return q.verbatim().scorer("BM25STD").with_scores().dialect(2)


# No filter: for a query whose candidates passed it already.
MATCH_ALL = FilterExpression("*")

# Words whose index forms a handler keeps (a few dozen bytes each): past it, it starts over.
FORMS_KEPT = 50_000


def _decode_docs(ns: str, found: Found, shape: type[D]) -> list[D]:
    """An FT.SEARCH page as Structs (each document's id comes from its key)."""
    out = []
    for key, fields in found.docs:
        if not fields:  # its key expired between the match and the load
            continue
        fields["id"] = keys.id_of(ns, key)
        out.append(decode(shape, fields))
    return out


def _entry(entry: Entry) -> bytes:
    return msgspec.json.encode(entry)


def _args(fields: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for name, value in fields.items():
        out += [name, value]
    return out


class Immutable(Exception):
    """A delete named a memory of the immutable type (a state): nothing was deleted."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(memory_id)
        self.memory_id = memory_id


class AlreadyApplied(Exception):
    """The memory an add would create exists already: the same durable write, again."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(memory_id)
        self.memory_id = memory_id


class Refused(Exception):
    """An `apply` step's precondition failed (its action's index, and why: exists, unset,
    missing, immutable, changed); nothing was written."""

    def __init__(self, action: int, why: str) -> None:
        super().__init__(f"action {action}: {why}")
        self.action = action
        self.why = why


class Step(NamedTuple):
    """One write of an `apply` (see `APPLY_LUA`): `op` (add, update, supersede, delete),
    the index of the action it is part of, its check ("new" or "live"), the `updated_at` an
    update was made from ("" for any), and the keys and arguments of its script."""

    op: str
    action: int
    check: str
    updated: str
    keys: list[str]
    args: list[Any]

    @classmethod
    def add(cls, action: int, ns: str, rec: Record, vector: np.ndarray, now_ms: int,
            entry: Entry) -> Step:  # fmt: skip
        return cls("add", action, "new", "", *_add_call(ns, rec, vector, now_ms, entry))

    @classmethod
    def update(cls, action: int, ns: str, old: Record, new: Record, vector: np.ndarray | None,
               now_ms: int, entry: Entry) -> Step:  # fmt: skip
        call = _update_call(ns, old, new, vector, now_ms, entry)
        return cls("update", action, "live", str(old.updated_at), *call)

    @classmethod
    def supersede(cls, action: int, ns: str, memory_id: str, by: str, start_ms: int,
                  now_ms: int, entry: Entry) -> Step:  # fmt: skip
        call = _supersede_call(ns, [memory_id], by, start_ms, now_ms, entry)
        return cls("supersede", action, "live", "", *call)

    @classmethod
    def delete(cls, action: int, ns: str, memory_id: str, now_ms: int, entry: Entry,
               history_ms: int, immutable_type: str) -> Step:  # fmt: skip
        call = _delete_call(ns, [memory_id], now_ms, entry, history_ms, immutable_type)
        return cls("delete", action, "live", "", *call)


def _add_call(
    ns: str, rec: Record, vector: np.ndarray, now_ms: int, entry: Entry
) -> tuple[list[str], list[Any]]:
    """ADD_LUA's keys and arguments."""
    fields, expires = new_hash(rec, vector)
    args: list[Any] = [now_ms, expires, keys.record_prefix(ns), keys.history_prefix(ns)]
    args += [_entry(entry), len(RECORD_FIELDS), *RECORD_FIELDS, *_args(fields)]
    dedup = keys.dedup_key(ns, rec.content_hash)
    return [dedup, keys.record_key(ns, rec.id), keys.tally_prefix(ns), keys.tier_key(ns)], args


def _update_call(
    ns: str,
    old: Record,
    new: Record,
    vector: np.ndarray | None,
    now_ms: int,
    entry: Entry,
    marks: dict[str, str] | None = None,
) -> tuple[list[str], list[Any]]:
    """UPDATE_LUA's keys and arguments."""
    fields = changed_fields(old, new)
    fields.update({mark_field(name): mark for name, mark in (marks or {}).items()})
    if vector is not None:
        fields[VECTOR_FIELD] = vector.astype(np.float32).tobytes()
    if new.idle_ttl_s is not None:
        expiry = str(record_expiry(new, now_ms))  # an update is an access
    elif new.expires_at == old.expires_at:
        expiry = "keep"
    else:
        expiry = "persist" if new.expires_at == PERMANENT_MS else str(new.expires_at)
    memory_keys = [
        keys.record_key(ns, old.id),
        keys.access_key(ns, old.id),
        keys.dedup_key(ns, old.content_hash),
        keys.dedup_key(ns, new.content_hash),
        keys.history_key(ns, old.id),
        keys.tally_prefix(ns),
    ]
    return memory_keys, [now_ms, expiry, _entry(entry), *_args(fields)]


def _supersede_call(
    ns: str, ids: list[str], by: str, start_ms: int, now_ms: int, entry: Entry
) -> tuple[list[str], list[Any]]:
    """SUPERSEDE_LUA's keys and arguments."""
    memory_keys: list[str] = []
    for mid in ids:
        memory_keys += [keys.record_key(ns, mid), keys.history_key(ns, mid)]
    memory_keys.append(keys.tally_prefix(ns))
    pairs = _args(supersede_fields(by))
    args: list[Any] = [now_ms, by, _entry(entry), keys.dedup_prefix(ns), start_ms]
    args += [len(pairs) // 2, *pairs, *RECORD_FIELDS]
    return memory_keys, args


def _delete_call(
    ns: str, ids: list[str], now_ms: int, entry: Entry, history_ms: int, immutable_type: str
) -> tuple[list[str], list[Any]]:
    """DELETE_LUA's keys and arguments."""
    args: list[Any] = [now_ms, keys.dedup_prefix(ns), _entry(entry), history_ms]
    args += [immutable_type, *RECORD_FIELDS]
    return [*keys.memory_keys(ns, ids, history=True), keys.tally_prefix(ns)], args


def _fetch_args(ns: str, now_ms: int, flag: str) -> list[Any]:
    """FETCH_LUA's first arguments."""
    return [now_ms, flag, keys.history_prefix(ns), keys.dedup_prefix(ns), keys.tally_prefix(ns)]


def record_row(row: Any) -> Record | None:
    """A record as the write scripts return it (RECORD_FIELDS' values), or None."""
    return _record(RECORD_FIELDS, row) if row else None


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
        self.indexes = Indexes(
            client, NamespaceMeta(embedder_name, dimension), self._guard, pool_max
        )
        # Workspaces and the names of states.
        self.spaces = Spaces(client, self._guard, self.write_with_setup)
        # Export and import.
        self.transfer = Transfer(client, self._guard, self.write_with_setup)
        # What each recall session was given, turn by turn.
        self.sessions = Sessions(client, self._guard)
        # Which durable writes were applied (claimed by one handler at a time).
        self.claims = Claims(client, self._guard)
        # Where Redis has replicas, durable writes wait for one (see `durable`).
        self.replicas = Replicas(client, replicas_required)
        # New memories written into each pooled namespace since its size was last checked.
        self._pooled_adds: dict[str, int] = {}
        self._policy = HybridPolicy()
        self._fetch = client.register_script(FETCH_LUA)
        self._field = client.register_script(FIELD_LUA)
        self._delete = client.register_script(DELETE_LUA)
        self._add = client.register_script(ADD_LUA)
        self._mention = client.register_script(MENTION_LUA)
        self._update = client.register_script(UPDATE_LUA)
        self._supersede = client.register_script(SUPERSEDE_LUA)
        self._apply = client.register_script(APPLY_LUA)
        self._dropping = False
        self._background: set[asyncio.Future[None]] = set()
        self._locks = Locks(client, self._guard)
        # What `describe` reports, kept by the writes.
        self.tallies = Tallies(client, self._guard)
        # When memories held (v3): ended ones flagged, and windows for `as_of` reads.
        self.validity = Validity(client, self._guard)
        self._backfills: dict[str, asyncio.Future[None]] = {}
        self._rebuilding: set[str] = set()
        # Each query word's index terms (`word_forms`): the stemmer's, the same everywhere.
        self._forms: dict[str, list[str]] = {}
        # Set once Redis is known to be in the current key layout: a handler's start-up
        # clears it until `layout.ensure` has run (a Store made elsewhere starts set).
        self.layout_ready = asyncio.Event()
        self.layout_ready.set()
        # While the layout is not ready: whether Redis was last seen loading its data set
        # (what a request that cannot wait for it is told).
        self.redis_loading = False

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
        self.validity.forget()
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
        return self._locks.hold(keys.lock_key(ns, name), hold_s)

    # ------------------------------------------------------------------------- writes

    async def add(
        self, ns: str, rec: Record, vector: np.ndarray, now_ms: int, entry: Entry
    ) -> Record | None:
        """Write a new memory, or, when its content hash is live already, count a mention of
        that memory instead and return it (one atomic script). `entry` goes to the history
        of whichever it was (as `mentioned` for a repeat)."""
        add_keys, args = _add_call(ns, rec, vector, now_ms, entry)
        await self.indexes.get(ns)
        out = await self.write_with_setup(ns, lambda: self._add(keys=add_keys, args=args), _UNSET)
        if out == 1:
            raise AlreadyApplied(rec.id)
        if out:
            return _record(RECORD_FIELDS, out)
        self.added(ns, [rec])
        return None

    def added(self, ns: str, written: list[Record]) -> None:
        """After new memories were written: their words counted, a pooled namespace's
        size checked now and then (both in the background)."""
        space = self.indexes.cached(ns)
        if space is not None and space.pool is not None:
            for _ in written:
                self._count_pooled_add(ns)
        self.count_words_later(ns, written)

    def _count_pooled_add(self, ns: str) -> None:
        """Check a pooled namespace's size at its first new memory here and every
        POOL_CHECK_EVERY after, and promote it in the background once it has outgrown
        the pool (a few more adds may land in the pool meanwhile: they move with it)."""
        n = self._pooled_adds.get(ns, 0)
        self._pooled_adds[ns] = n + 1
        if n % POOL_CHECK_EVERY:
            return
        if len(self._pooled_adds) > 4096:
            self._pooled_adds.clear()
        self._later(self._promote_if_grown(ns), "store.promote_failed")

    async def _promote_if_grown(self, ns: str) -> None:
        if (await self.live_total(ns)) < self.indexes.pool_max:
            return
        async with self.exclusive(ns, "promote", hold_s=120.0):
            if await self.indexes.promote(ns):
                self._pooled_adds.pop(ns, None)

    async def mention(
        self, ns: str, memory_id: str, now_ms: int, entry: Entry, workspace: str | None
    ) -> Record | None:
        """Count one more mention of a live memory in `workspace` (None: in none); the memory
        after it, or None if it is gone or in another workspace."""
        memory_keys = [keys.record_key(ns, memory_id), keys.history_key(ns, memory_id)]
        args: list[Any] = [now_ms, _entry(entry), workspace or "", *RECORD_FIELDS]
        async with self._guard():
            out = await self._mention(keys=memory_keys, args=args)
        return record_row(out)

    async def update(
        self,
        ns: str,
        old: Record,
        new: Record,
        vector: np.ndarray | None,
        now_ms: int,
        entry: Entry,
        marks: dict[str, str] | None = None,
    ) -> bool:
        """Turn a live memory `old` into `new` (its dedup key and expiry follow, on every key
        of the memory), and set the write `marks` (`write_marks`); False when it is gone."""
        memory_keys, args = _update_call(ns, old, new, vector, now_ms, entry, marks)
        async with self._guard():
            return bool(await self._update(keys=memory_keys, args=args))

    async def write_marks(self, ns: str, memory_id: str, names: tuple[str, ...]) -> list[str]:
        """For each request field in `names`, the stream position of the durable write that
        last set it on the memory, as `update` stored it ("" where none has)."""
        async with self._guard():
            key = keys.record_key(ns, memory_id)
            raw = await self.client.hmget(key, [mark_field(name) for name in names])
        return [text(v) if v is not None else "" for v in raw]

    async def delete(
        self,
        ns: str,
        ids: list[str],
        now_ms: int,
        entry: Entry,
        history_ms: int,
        immutable_type: str,
    ) -> list[Record | None]:
        """Delete live memories; each one's record as it was, or None where missing. Their
        history gets `entry` and stays readable for `history_ms`. If one of them is of
        `immutable_type`, nothing is deleted and `Immutable` names it."""
        if not ids:
            return []
        delete_keys, args = _delete_call(ns, ids, now_ms, entry, history_ms, immutable_type)
        async with self._guard():
            rows = await self._delete(keys=delete_keys, args=args)
        if rows and not isinstance(rows[0], list | None):
            raise Immutable(text(rows[1]))
        return [record_row(row) for row in rows]

    async def supersede(
        self, ns: str, ids: list[str], by: str, start_ms: int, now_ms: int, entry: Entry
    ) -> list[Record | None]:
        """Mark live memories as superseded by memory `by`, which holds from `start_ms`
        (their validity is closed there); each one's record after it, or None where
        missing. Their history gets `entry` with the change."""
        if not ids:
            return []
        memory_keys, args = _supersede_call(ns, ids, by, start_ms, now_ms, entry)
        async with self._guard():
            rows = await self._supersede(keys=memory_keys, args=args)
        return [record_row(row) for row in rows]

    async def history(self, ns: str, memory_id: str, limit: int) -> tuple[list[Entry], int]:
        """The first `limit` entries of a memory's history, oldest first, and how many it
        has (0: no history, or it expired)."""
        key = keys.history_key(ns, memory_id)
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            pipe.lrange(key, 0, limit - 1)
            pipe.llen(key)
            raw, total = await pipe.execute()
        return [_entries.decode(item) for item in raw], int(total)

    async def apply(
        self, ns: str, steps: list[Step], now_ms: int, immutable_type: str
    ) -> list[Any]:
        """Run write steps (`Step.add`, ...) in one atomic script, all or none (`APPLY_LUA`):
        each step's raw result, in order. `Refused` names the first step's action whose
        precondition failed; nothing is written then."""
        await self.indexes.get(ns)
        all_keys: list[str] = []
        head: list[Any] = [now_ms, len(steps), immutable_type]
        tail: list[Any] = []
        for step in steps:
            all_keys += step.keys
            tail += step.args
            head += [step.op, step.action, step.check, step.updated]
            head += [len(step.keys), len(step.args)]
        async with self._guard():
            out = await self._apply(keys=all_keys, args=head + tail)
        if out and out[0] in (b"refused", "refused"):
            raise Refused(int(out[1]), text(out[2]))
        return list(out)

    # ------------------------------------------------------------------------- validity

    async def current_at(self, ns: str, now_ms: int) -> None:
        """Before a current read: flag the memories whose validity has ended (`validity`)."""
        await self.indexes.get(ns)
        await self.validity.end(ns, now_ms)

    async def as_of_ready(self, ns: str) -> None:
        """Before an `as_of` read: every memory of the namespace has its validity window.
        A namespace from before v3 is given them once, by one handler at a time; a read
        waits up to AS_OF_WAIT_S for that, then gets `unavailable`."""
        await self.indexes.get(ns)
        if await self.validity.complete(ns):
            return
        task = self._backfills.get(ns)
        if task is None:
            task = self._backfills[ns] = asyncio.ensure_future(self._backfill(ns))
            task.add_done_callback(lambda _: self._backfills.pop(ns, None))
        try:
            await asyncio.wait_for(asyncio.shield(task), AS_OF_WAIT_S)
        except TimeoutError:
            raise Unavailable(
                "This namespace's memories are being given their validity windows for"
                " `as_of` reads (they were written before v3): retry in a few seconds;"
                " reads without `as_of` work meanwhile."
            ) from None

    async def _backfill(self, ns: str) -> None:
        async with self.exclusive(ns, "validity", hold_s=300.0):
            if await self.validity.complete(ns):
                return  # another handler did it while this one waited for the lock
            given = await self.validity.backfill(ns, int(time.time() * 1000))
        log.info("validity.backfilled", namespace=ns, memories=given)

    # ------------------------------------------------------------------------- reads by id

    async def read(self, ns: str, memory_id: str, now_ms: int) -> Record | None:
        """A live memory, without counting an access."""
        async with self._guard():
            values = await self.client.hmget(keys.record_key(ns, memory_id), RECORD_FIELDS)
        if values[RECORD_FIELDS.index("id")] is None:
            return None
        rec = _record(RECORD_FIELDS, values)
        return rec if rec.expires_at > now_ms else None

    async def fetch(
        self, ns: str, ids: list[str], now_ms: int, count_access: bool = True
    ) -> list[Fetched | None]:
        """Live memories by id, in order (None where missing or expired), counting an access
        unless told not to (then `touch` counts it for those that are returned)."""
        if not ids:
            return []
        flag = "1" if count_access else "0"
        async with self._guard():
            rows = await self._fetch(
                keys=keys.memory_keys(ns, ids),
                args=[*_fetch_args(ns, now_ms, flag), *RECORD_FIELDS],
            )
        found: list[Fetched | None] = []
        for row in rows:
            if not row:
                found.append(None)
                continue
            *values, count, last = row
            found.append(
                Fetched(
                    _record(RECORD_FIELDS, values),
                    access_count=int(count) if count else 0,
                    last_accessed_ms=int(last) if last else None,
                )
            )
        return found

    def touch_later(self, ns: str, ids: list[str], now_ms: int) -> None:
        """Count an access to each live memory, after the reply: access counters are
        bookkeeping that no reply waits for (a failure is logged, not raised)."""
        if ids:
            self._later(self.touch(ns, ids, now_ms), "store.touch_failed")

    def _later(self, work: Coroutine[Any, Any, None], failed: str) -> None:
        """Run `work` in the background (kept until done, awaited by `settle`); a failure
        is logged as `failed`."""
        task = asyncio.ensure_future(work)
        self._background.add(task)

        def done(task: asyncio.Future[None]) -> None:
            self._background.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.warning(failed, error=repr(task.exception()))

        task.add_done_callback(done)

    async def settle(self) -> None:
        """Wait for the access counts still being written (at shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def touch(self, ns: str, ids: list[str], now_ms: int, count: bool = True) -> None:
        """Count an access to each live memory (without `count`, only push the expiry of
        those forgotten when idle, as a `list` does)."""
        if ids:
            args = [*_fetch_args(ns, now_ms, "1" if count else "2"), RECORD_FIELDS[0]]
            async with self._guard():
                await self._fetch(keys=keys.memory_keys(ns, ids), args=args)

    def keep_alive_later(self, ns: str, records: Sequence[Summary], now_ms: int) -> None:
        """After a read that returned memories without counting an access (`list`,
        `timeline`): push the expiry of those forgotten when idle."""
        idle = [r.id for r in records if r.idle_ttl_s is not None]
        if idle:
            self._later(self.touch(ns, idle, now_ms, count=False), "store.keep_alive_failed")

    async def access_counts(self, ns: str, ids: list[str]) -> list[int]:
        """How often each memory was read (0 where never, or gone)."""
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.hget(keys.access_key(ns, mid), "access_count")
            raw = await pipe.execute()
        return [int(v) if v is not None else 0 for v in raw]

    async def types(self, ns: str, ids: list[str]) -> list[str | None]:
        """The type of each memory (None where there is no such memory)."""
        return [type_ for type_, _ in await self._type_and_store(ns, ids)]

    async def stores(self, ns: str, ids: list[str]) -> list[str | None]:
        """The store of each memory (None where there is no such memory; `private` for one
        whose hash has no store field)."""
        return [store for _, store in await self._type_and_store(ns, ids)]

    async def _type_and_store(self, ns: str, ids: list[str]) -> list[tuple[str | None, ...]]:
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.hmget(keys.record_key(ns, mid), ["type", "store"])
            raw = await pipe.execute()
        return [
            (None, None) if t is None else (text(t), text(st) if st else "private") for t, st in raw
        ]

    async def vectors(self, ns: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored embeddings by id (for candidates that the vector query did not return)."""
        if not ids:
            return {}
        async with self._guard():
            raw = await self._field(
                keys=[keys.record_key(ns, mid) for mid in ids], args=[VECTOR_FIELD]
            )
        return {
            mid: np.frombuffer(blob, dtype=np.float32)
            for mid, blob in zip(ids, raw, strict=True)
            if blob
        }

    # ------------------------------------------------------------------------- queries

    async def knn(
        self,
        ns: str,
        vector: np.ndarray,
        where: FilterExpression,
        k: int,
        policy_key: str | None = None,
        scoped: Scoped | None = None,
    ) -> list[Candidate]:
        """The k nearest memories passing `where`. A filter whose text changes with every
        call (a time bound) gives a `policy_key` that does not, so its hybrid policy is
        cached (see `hybrid_policy`); a filter that is a scope alone says so (`scoped`), so
        that its size is read from the tallies."""

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
                return_fields=list(CANDIDATE_FIELDS),
                filter_expression=space.confine(where),
                num_results=k,
                hybrid_policy=policy,
            )

        return self._candidates(ns, await self._search(ns, query))

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
                    seen = await self.tallies.overview(ns, scoped.scope, now_ms)
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

        return (await self._search(ns, query)).total

    def count_words_later(self, ns: str, written: list[Record]) -> None:
        """Count the distinct words of memories just written (after the reply, off the
        request path): `word_counts` reads them back."""
        if not written:
            return

        async def count() -> None:
            counted: dict[str, int] = {keys.WORDS_TOTAL: len(written)}
            for rec in written:
                # A long text's words past the first few hundred go uncounted: they then
                # look rarer than they are, which costs time, never a result.
                for word in sorted(written_words(rec.content, *rec.tags))[:WORDS_PER_MEMORY]:
                    counted[word] = counted.get(word, 0) + 1
            key = keys.words_key(ns)
            pipe = self.client.pipeline(transaction=False)
            for word, n in counted.items():
                pipe.hincrby(key, word, n)
            # Started afresh every WORDS_TTL_S: every word ever written (ids, hashes) would
            # otherwise stay a field for good. Until the new counts pass the bound, the text
            # query reads every word, as without one.
            pipe.expire(key, WORDS_TTL_S, nx=True)
            async with self._guard():
                await pipe.execute()

        self._later(count(), "store.count_words_failed")

    async def word_counts(self, ns: str, terms: list[str]) -> tuple[int, list[int]]:
        """How many memories were written, and how many of them with each of `terms`: counts
        of writes, so a deleted or expired memory still counts (the caller scales them)."""
        async with self._guard():
            raw = await self.client.hmget(keys.words_key(ns), [keys.WORDS_TOTAL, *terms])
        total, *counts = (int(v) if v is not None else 0 for v in raw)
        return total, counts

    async def live_total(self, ns: str) -> int:
        """How many memories the namespace holds: from its tallies, or, in a namespace from
        before them, counted at most every few seconds."""
        total = await self.tallies.total(ns)
        if total is not None:
            return total
        return await self._policy.total(ns, lambda where: self.count(ns, FilterExpression(where)))

    async def text(
        self,
        ns: str,
        terms: list[str],
        where: FilterExpression,
        k: int,
        current: bool = False,
        finding: bool = False,
    ) -> list[Candidate]:
        """The k best full-text (BM25) matches of any of `terms` in content or tags; with
        `current`, none superseded. `finding`: the query only finds candidates that
        `text_scores` scores afterwards, so it reads each word's first form alone (the one
        holding the word itself, `word_forms`): at 100k memories a third less Redis time,
        and the source memory in the top 10 as often (0.782 against 0.776, 910 queries)."""

        async def query(space: Namespace) -> Query:
            q = _bm25(space, await self._word_forms(space, terms, finding), where, current)
            return q.return_fields(*CANDIDATE_FIELDS).paging(0, k)

        return self._candidates(ns, await self._search(ns, query, with_scores=True))

    async def text_scores(
        self,
        ns: str,
        terms: list[str],
        among: list[str],
        current: bool = False,
    ) -> dict[str, float]:
        """The BM25 of each of the `among` memories (ids) that holds any of `terms`: the
        score `text` gives it, read among them alone (INKEYS), so its cost follows their
        number, not the words' memories. Only ids and scores come back (the caller has the
        candidates' fields). Every candidate passed `where` in the query that found it, so
        only "not superseded" is read again: the filter adds nothing to BM25 (`text_match`),
        and checking it in each word's clause was two thirds of this query's time (1.17
        against 0.43 ms of Redis at 100k, the same scores for 200 of 200 searches)."""

        async def query(space: Namespace) -> Query:
            q = _bm25(space, await self._word_forms(space, terms), MATCH_ALL, current)
            q = q.limit_ids(*(keys.record_key(ns, mid) for mid in among))
            return q.no_content().paging(0, len(among))

        found = await self._search(ns, query, with_scores=True)
        return {keys.id_of(ns, key): float(f["__score"]) for key, f in found.docs}

    async def _word_forms(
        self, space: Namespace, terms: list[str], first: bool = False
    ) -> list[str]:
        """Every index term of `terms` (`word_forms`), asked of RediSearch once per word;
        with `first`, each word's first form only."""
        missing = [t for t in dict.fromkeys(terms) if t not in self._forms]
        if missing:
            name = space.index.name
            async with self._guard():
                explained = await asyncio.gather(
                    *(
                        self.client.execute_command(
                            "FT.EXPLAIN", name, f"@{TEXT_FIELDS[0]}:{t}", "DIALECT", 2
                        )
                        for t in missing
                    )
                )
            if len(self._forms) > FORMS_KEPT:
                self._forms.clear()
            for t, out in zip(missing, explained, strict=True):
                self._forms[t] = word_forms(text(out), t)
        if first:
            return [self._forms[t][0] for t in terms]
        return [form for t in terms for form in self._forms[t]]

    def _candidates(self, ns: str, found: Found) -> list[Candidate]:
        return _decode_docs(ns, found, Candidate)

    async def page(
        self,
        ns: str,
        where: FilterExpression,
        shape: type[S],
        *,
        offset: int,
        limit: int,
        oldest_first: bool = False,
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

        found = await self._search(ns, query)
        return Page(found.total, _decode_docs(ns, found, shape))

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
        await self.indexes.get(ns)
        try:
            found = await self.tallies.newest(ns, scope, now_ms, offset, limit, current, as_of_ms)
        except Behind:
            return None
        if found is None:
            return None
        total, ids = found
        fetched = await self.fetch(ns, ids, now_ms, count_access=False)
        return Page(total, [f.record for f in fetched if f is not None])

    async def ids(
        self,
        ns: str,
        where: FilterExpression,
        limit: int,
        *,
        sort_by: str | None = None,
        offset: int = 0,
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

        found = await self._search(ns, query)
        return [keys.id_of(ns, key) for key, _ in found.docs], found.total

    async def overview(self, ns: str, scope: ReadScope, now_ms: int) -> Overview:
        """What `describe` reports of the memories live in a scope: from the tallies the
        writes keep (see `tallies`), or by aggregating: in a namespace from before them,
        while they are counted once in the background, and while more memories expired at
        once than one read settles."""
        await self.indexes.get(ns)
        with contextlib.suppress(Behind):
            seen = await self.tallies.overview(ns, scope, now_ms)
            if seen is not None:
                return seen
            if ns not in self._rebuilding:
                self._rebuilding.add(ns)
                self._later(self._rebuild_tallies(ns, now_ms), "store.tally_rebuild_failed")
        await self.validity.end(ns, now_ms)
        return Overview.of(await self.aggregate(ns, read_filter(now_ms, scope)))

    async def _rebuild_tallies(self, ns: str, now_ms: int) -> None:
        try:
            async with self.exclusive(ns, "tally", hold_s=300.0):
                counted = await self.tallies.rebuild(ns, now_ms)
            log.info("tally.rebuilt", namespace=ns, memories=counted)
        finally:
            self._rebuilding.discard(ns)

    async def aggregate(self, ns: str, where: FilterExpression) -> list[TypeGroup]:
        """Counts by type and scope side, tag lists and created_at bounds: no content."""

        async def run(space: Namespace) -> Any:
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
            return await space.index.aggregate(req)

        result = await self._on_index(ns, run)
        return [msgspec.convert(parse_row(raw), TypeGroup, strict=False) for raw in result.rows]

    async def _on_index(self, ns: str, run: Callable[[Namespace], Awaitable[T]]) -> T:
        """Run a query against the index that holds the namespace. If the index vanished
        under us (dropped or flushed), set it up again and retry; likewise when the
        namespace was promoted out of its pool (or lost) while it ran: its tier, read after
        the query, is then no longer its pool number, and the query may have missed memories
        that had left the pool."""
        space = await self.indexes.get(ns)
        for attempt in range(3):
            async with self._guard():
                try:
                    out = await run(space)
                except (redis.exceptions.ResponseError, RedisSearchError) as exc:
                    if not is_missing_index(exc) or is_connection_error(exc) or attempt == 2:
                        raise
                else:
                    if space.pool is None:
                        return out
                    tier = await self.client.get(keys.tier_key(ns))
                    if tier is not None and text(tier) == str(space.pool):
                        return out
            self.indexes.forget(ns)
            space = await self.indexes.get(ns)
        return out  # the pool was left twice in a row: a namespace is promoted only once

    async def _search(
        self,
        ns: str,
        build: Callable[[Namespace], Awaitable[Any]],
        with_scores: bool = False,
    ) -> Found:
        """Run a redisvl (or redis-py) query, built for the namespace's index, as a raw
        FT.SEARCH: redis-py's own result objects cost more to build than the query takes in
        Redis."""

        async def run(space: Namespace) -> Found:
            query = await build(space)
            args: list[Any] = list(query.get_args())
            if params := getattr(query, "params", None):
                args += ["PARAMS", 2 * len(params)]
                for key, value in params.items():
                    args += [key, value]
            raw = await self.client.execute_command("FT.SEARCH", space.index.name, *args)
            return parse_search(raw, with_scores)

        return await self._on_index(ns, run)
