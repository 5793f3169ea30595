"""LangGraph's long-term memory store on the bus: `MemoryBusStore(bus, **options)`.

A `langgraph.store.base.BaseStore`, so a graph compiled with `store=MemoryBusStore(bus)`
keeps what its nodes `put` in the bus, where every agent of the namespace can find it, and
`search` goes through the bus's own ranking (hybrid vector and BM25 by default).

How LangGraph's model maps onto memories (one item is one memory, its "head", type
`knowledge` by default, in the store's workflow or general):

- **Keys are the bus's keys (v4).** An item's head is the keyed memory named
  `lg:<digest of (workflow, namespace, key)>` (a fixed length whatever the labels, and two
  stores of different workflows never share one), so `get` reads heads by key, 100 a
  request, and the key comes back exactly as given, from the metadata (which is checked:
  a digest says where to look, not what was found).
- **Namespaces are tags.** A head in `("users", "u1", "memories")` carries one tag per
  prefix of its namespace, `lg.ns1:<digest of ("users",)>`, `lg.ns2:<digest of ("users",
  "u1")>`, `lg.ns3:...`, plus `langgraph`, the tag of every item, and the key's tag
  `lg.key:<digest of (namespace, key)>`. Searching `("users", "u1")` is then one tag
  filter, and prefix search works at every depth. Tags hold digests because a tag is
  lower-case `[a-z0-9_:.-]` of at most 64 characters, and a namespace label may be
  anything. A namespace is at most 30 labels deep (a memory has 32 tags). Workflows are
  not used for namespaces (a workflow id cannot hold a prefix relation): `workflow_id=`
  puts the whole store in one workflow, and by default its items are general memories,
  which every workflow's reads see.
- **Values** are kept exactly in the head's `metadata`: `{"kind": "langgraph.item",
  "namespace", "key", "version", "value"}`, `version` naming this write of the value. A
  value whose JSON exceeds the bus's metadata limits (8 KiB, 8 levels) is cut in pieces:
  the head holds the first, continuation parts (memories tagged only `langgraph.part`, the
  key's tag and `lg.v:<version>`) the rest; about 150 KiB of JSON at most (200 KiB of text
  that needs few JSON escapes). `content` is the text that is embedded and searched: the
  fields of the store's `fields` (or of `put(..., index=[...])`, LangGraph's JSON paths),
  by default the whole value rendered as `field: value` lines; `index=False` keeps only
  the item's path (`users/u1/memories/<key>`).
- **A put** is one keyed `add` of the head, conditional on the head's version read just
  before (`expected_version`, 0 when there is none): it replaces the head in place (same
  id, `created_at` kept) in one atomic step. A value in parts writes its parts first (one
  atomic `apply`), then the head; readers follow the head's version, so they see the old
  value or the new one, never a mix. A put that finds the head changed meanwhile reads it
  again and retries, with jitter: each lost race is another write of the key that landed
  while it ran, so a put fails (`Conflict`, nothing of it stored) only when 16 others
  land meanwhile; every other put lands, and the last to land wins, as in LangGraph's own
  stores. Once the head is written, the
  parts of the version it replaced are deleted. A delete is `put(..., None)`: the head is
  deleted at the version read (retried likewise), then its parts.
- **What is exact**: one item (one head memory) per key, whatever puts and deletes of it
  run at the same moment, in any processes: concurrent first puts of a key leave one item;
  a put replaces the value atomically; a read returns one whole value, never a mix of two
  writes (it follows up to 16 replacements of the head while it reads). **What is not**:
  a process that dies between writing parts and writing the head, or between writing the
  head and deleting the replaced parts, leaves parts no head names ("orphans"); so, rarely,
  does a put racing a delete and a new first put of the key (versions restart at 1 after a
  delete, and a keyed add checks the version only). Reads never see them; the next put of
  that key that writes or replaces a value in parts deletes them once they are 15 minutes
  old (younger ones may belong to a put still running: a put gives up rather than write a
  head over parts written more than 5 minutes earlier). Items written before keys (the v3
  layout: no bus key) are neither read by `get` and `search` nor migrated (there are no
  deployments of it); delete them (tag `langgraph`).
- **Timestamps**: `created_at` is when the key's head was first written (a put replaces it
  in place; a delete ends it), `updated_at` when the current value was written.
- **Search** with `query` is the bus's `search` under the prefix's tag (`SearchItem.score`
  is the bus's score); without one it lists the prefix's items, most recently created
  first (the bus lists by creation, and a put keeps its item's). `filter` (LangGraph's
  syntax: exact values, `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`) is applied here to the
  values read: with a query, among the bus's best 100. `offset + limit` of a query search
  is at most 100.
- **list_namespaces** reads the compact list of items under the longest fixed part of the
  prefix (up to 10,200 items) and one item per namespace for its name.
- **TTL** (`supports_ttl`): `put(..., ttl=minutes)` sets the memory's `idle_ttl_s` (at
  least 60 s) when the store refreshes on read (LangGraph's default), else its `ttl_s`.
  The bus refreshes an idle TTL on every read, whatever `refresh_ttl` says.
- Within one `batch`, reads see the store as it was before the batch's puts (as
  LangGraph's own stores do); several puts of one key keep the last.

The sync `batch` (and so `put`, `get`, `search`, ...) works from any thread but the event
loop the bus runs on (calling it there would block that loop: it raises, as LangGraph's
async stores do); it runs the operations on the bus's loop. Make the store inside that
loop, or pass `loop=`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

import msgspec
import structlog
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    validate_op_namespace,
)

from bus.client import AgentMemory, MemoryBus
from bus.errors import BusError, Conflict, NotFound
from bus.integrations._documents import (
    Incomplete,
    chunked,
    compact_pages,
    content_text,
    digest,
    full_pages,
    pack,
    plain_json,
    unpack,
    write_groups,
)
from contracts import limits
from contracts.messages import ApplyAdd, ApplyDelete, Memory

__all__ = ["MemoryBusStore"]

# Every item (its head) carries this tag; continuation parts carry PART_TAG.
MARKER = "langgraph"
PART_TAG = "langgraph.part"
KIND = "langgraph.item"
_NS_TAG = "lg.ns"
_KEY_TAG = "lg.key:"
_VERSION_TAG = "lg.v:"
_HEAD_KEY = "lg:"
# The marker, the key's tag, and one tag per namespace prefix.
MAX_DEPTH = limits.MAX_TAGS - 2
# A write that found the head changed since it was read reads it again and retries: each
# lost race is another write of the key that landed, so this bounds contention, not errors.
_ATTEMPTS = 16
# Parts that no head names are deleted by a later put once this old (server time, seen
# from this process's clock)...
_ORPHAN_AGE = timedelta(minutes=15)
# ...which is safe because a put writes its head only within this long of its parts (the
# difference absorbs clock skew between this process and the bus).
_HEAD_WINDOW_S = 300.0
# Heads written (or deleted) at once by one batch.
_CONCURRENCY = 16
_encoder = msgspec.json.Encoder()
log = structlog.get_logger("membus.integrations")

_Key = tuple[tuple[str, ...], str]
# A head and the value of its version.
_Resolved = tuple["_Piece", dict[str, Any]]


def namespace_tag(prefix: Sequence[str]) -> str:
    """The tag every item under `prefix` (non-empty) carries."""
    return f"{_NS_TAG}{len(prefix)}:{digest(*prefix)}"


def key_tag(namespace: Sequence[str], key: str) -> str:
    return f"{_KEY_TAG}{digest(list(namespace), key)}"


def version_tag(version: str) -> str:
    """The tag of the continuation parts of one write of a value."""
    return f"{_VERSION_TAG}{version}"


def head_key(workflow_id: str | None, namespace: Sequence[str], key: str) -> str:
    """The bus key of an item's head: the key index is per store of the namespace, not per
    workflow, so the workflow is part of the name."""
    return f"{_HEAD_KEY}{digest(workflow_id, list(namespace), key)}"


def _tag_depth(tag: str) -> int:
    """The depth of a namespace tag (`lg.ns3:...` is 3); 0 for any other tag."""
    head, sep, _ = tag.partition(":")
    if not sep or not head.startswith(_NS_TAG) or not head[len(_NS_TAG) :].isdigit():
        return 0
    return int(head[len(_NS_TAG) :])


class _Piece(NamedTuple):
    """One memory of an item's value: its head (part 0; a whole value is part 0 of 1) or a
    continuation part."""

    namespace: tuple[str, ...]
    key: str
    version: str
    part: int
    parts: int
    memory: Memory


def _parse(memory: Memory) -> _Piece | None:
    meta = memory.metadata
    if meta.get("kind") != KIND:
        return None
    ns, key, version = meta.get("namespace"), meta.get("key"), meta.get("version")
    if not (
        isinstance(ns, list)
        and all(isinstance(label, str) for label in ns)
        and isinstance(key, str)
        and isinstance(version, str)
    ):
        return None
    part, parts = meta.get("part", 0), meta.get("parts", 1)
    if not isinstance(part, int) or not isinstance(parts, int):
        return None
    return _Piece(tuple(ns), key, version, part, parts, memory)


def _value(head: _Piece, parts: Iterable[_Piece]) -> dict[str, Any] | None:
    """The value of the head's version: the head and its continuation parts (others, and
    a part read twice, are left out); None when one is missing."""
    by_part = {head.part: head.memory.metadata}
    for piece in parts:
        if piece.version == head.version and piece.part > 0:
            by_part.setdefault(piece.part, piece.memory.metadata)
    try:
        value = unpack("value", list(by_part.values()))
    except Incomplete:
        return None
    return value if isinstance(value, dict) else None


async def _backoff(attempt: int) -> None:
    """A short random pause before trying a lost race again, so racers spread out."""
    await asyncio.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))


def _path(namespace: Sequence[str], key: str) -> str:
    return "/".join([*namespace, key])


def render(value: Mapping[str, Any]) -> str:
    """The whole value as text to embed: one `field: value` line per field (strings as
    they are, anything else as JSON)."""
    return "\n".join(
        f"{field}: {v if isinstance(v, str) else _encoder.encode(v).decode()}"
        for field, v in value.items()
    )


def matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """LangGraph's filter on a value: every field equal (objects compared field by field,
    arrays element by element) or passing its operators."""
    return all(_compare(value.get(field), wanted) for field, wanted in filter.items())


def _compare(have: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(have, op, arg) for op, arg in wanted.items())
        return isinstance(have, dict) and all(_compare(have.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(have, list | tuple)
            and len(have) == len(wanted)
            and all(_compare(h, w) for h, w in zip(have, wanted, strict=True))
        )
    return bool(have == wanted)


def _operator(have: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(have == arg)
    if op == "$ne":
        return bool(have != arg)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"Unsupported filter operator {op!r}: use $eq, $ne, $gt, $gte, $lt, $lte")
    try:
        a, b = float(have), float(arg)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field is not in any range
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type!r}")
    return all(want == "*" or have == want for have, want in pairs)


class _Prepared(NamedTuple):
    """A put checked and rendered before anything is sent: the metadata of its head and
    continuation parts (none for a delete), under a version naming this write."""

    op: PutOp
    value: dict[str, Any] | None
    text: str
    version: str
    metadatas: list[dict[str, Any]]

    @property
    def key(self) -> _Key:
        return self.op.namespace, self.op.key


class MemoryBusStore(BaseStore):
    """A LangGraph store whose items are memories of the bus (see the module docstring).

    Options: `workflow_id` (None: general memories, seen from every workflow), `agent_id`
    (recorded on writes), `type` (the memory type of items, `knowledge`), `fields` (JSON
    paths whose text is embedded, LangGraph's `IndexConfig.fields`; default `["$"]`, the
    whole value), `search_mode` (`hybrid`, `vector`, `text`; None: the bus's default),
    `ttl` (LangGraph's `TTLConfig`), `loop` (the bus's event loop, when the store is made
    outside it)."""

    supports_ttl = True

    def __init__(
        self,
        bus: MemoryBus,
        *,
        workflow_id: str | None = None,
        agent_id: str = "langgraph",
        type: str = "knowledge",
        fields: Sequence[str] | None = None,
        search_mode: Literal["vector", "text", "hybrid"] | None = None,
        ttl: TTLConfig | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.bus = bus
        self.memory: AgentMemory = bus.agent(workflow_id=workflow_id, agent_id=agent_id)
        self.workflow_id = workflow_id
        self.type = type
        self.fields = list(fields) if fields else ["$"]
        self.search_mode = search_mode
        self.ttl_config = ttl
        # Items live in the store's workflow, or are general; reads look there only.
        self._scope: Literal["workflow", "general"] = "workflow" if workflow_id else "general"
        if loop is None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
        self._loop = loop

    # ------------------------------------------------------------------ entry points

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` on the bus's loop and wait for them (from any other thread)."""
        ops = list(ops)
        loop = self._loop
        if loop is None:
            raise RuntimeError(
                "MemoryBusStore does not know the bus's event loop: make the store inside"
                " it (after `await MemoryBus.connect(...)`), or pass `loop=`."
            )
        running = None
        with contextlib.suppress(RuntimeError):
            running = asyncio.get_running_loop()
        if running is loop:
            raise asyncio.InvalidStateError(
                "Synchronous calls to MemoryBusStore on the bus's own event loop would block"
                " it: use the async methods there (`await store.aput(...)`, `aget`,"
                " `asearch`, ...), or run the sync code in a thread."
            )
        return asyncio.run_coroutine_threadsafe(self._run(ops), loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        running = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = running
        elif self._loop is not running:
            # The bus's connection belongs to its own loop: run there, wait here.
            future = asyncio.run_coroutine_threadsafe(self._run(ops), self._loop)
            return await asyncio.wrap_future(future)
        return await self._run(ops)

    async def _run(self, ops: list[Op]) -> list[Result]:
        for op in ops:
            self._check(op)
        results: list[Result] = [None] * len(ops)
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        reads = [self._gets(gets, results)] if gets else []
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                reads.append(self._search(i, op, results))
            elif isinstance(op, ListNamespacesOp):
                reads.append(self._list_namespaces(i, op, results))
        await asyncio.gather(*reads)
        # The last put of a key wins, as in LangGraph's own stores.
        puts = {(op.namespace, op.key): op for op in ops if isinstance(op, PutOp)}
        if puts:
            await self._put(list(puts.values()))
        return results

    @staticmethod
    def _check(op: Op) -> None:
        if not isinstance(op, GetOp | SearchOp | PutOp | ListNamespacesOp):
            raise ValueError(f"Unknown operation type: {type(op).__name__}")
        validate_op_namespace(op)
        if isinstance(op, PutOp):
            if not op.namespace:
                raise InvalidNamespaceError("A namespace cannot be empty.")
            if op.namespace[0] == "langgraph":
                raise InvalidNamespaceError(
                    f'Root label of a namespace cannot be "langgraph"; got {op.namespace}.'
                )
            if len(op.namespace) > MAX_DEPTH:
                raise InvalidNamespaceError(
                    f"MemoryBusStore keeps namespaces up to {MAX_DEPTH} labels deep (one tag"
                    f" per prefix, 32 tags a memory); {op.namespace} has {len(op.namespace)}."
                )

    # ------------------------------------------------------------------ reads

    def _name(self, key: _Key) -> str:
        return head_key(self.workflow_id, *key)

    async def _heads(self, keys: Sequence[_Key]) -> dict[_Key, _Piece]:
        """The current head of each key that has one, read by its bus key."""
        names = {self._name(key): key for key in dict.fromkeys(keys)}

        async def some(group: Sequence[str]) -> list[Memory]:
            found: list[Memory] = []
            left = list(group)
            while left:
                reply = await self.memory.get(keys=left)
                found.extend(reply.memories)
                # A reply trimmed to the max payload leaves some out: ask for those again.
                held = {m.key for m in reply.memories} | set(reply.missing_keys)
                rest = [name for name in left if name not in held]
                if not reply.memories or len(rest) == len(left):
                    break
                left = rest
            return found

        groups = await asyncio.gather(*(some(g) for g in chunked(list(names), limits.MAX_IDS)))
        heads: dict[_Key, _Piece] = {}
        for memory in itertools.chain.from_iterable(groups):
            piece = _parse(memory)
            key = names.get(memory.key or "")
            # The metadata decides: a digest says where to look, not what was found.
            if piece is None or key is None or (piece.namespace, piece.key) != key:
                continue
            if piece.part == 0 and (
                key not in heads or memory.updated_at > heads[key].memory.updated_at
            ):
                heads[key] = piece
        return heads

    async def _parts(self, heads: Sequence[_Piece]) -> list[_Piece]:
        """The continuation parts of these heads' versions (of heads in parts only)."""
        tags = list(dict.fromkeys(version_tag(h.version) for h in heads if h.parts > 1))

        async def some(group: Sequence[str]) -> list[_Piece]:
            found: list[_Piece] = []
            async for page in full_pages(self.memory, tags=list(group), scope=self._scope):
                found.extend(p for p in map(_parse, page) if p is not None and p.part > 0)
            return found

        groups = await asyncio.gather(*(some(g) for g in chunked(tags, limits.MAX_TAGS)))
        return [piece for group in groups for piece in group]

    async def _resolve(self, heads: Mapping[_Key, _Piece]) -> dict[_Key, _Resolved]:
        """Each head's value. A head whose parts went meanwhile was replaced or deleted by a
        put: its key's head is read again, and the newer one followed; a key whose head did
        not change but whose value is incomplete (parts expired) is left out."""
        resolved: dict[_Key, _Resolved] = {}
        pending = dict(heads)
        for attempt in range(_ATTEMPTS):
            parts = await self._parts(list(pending.values()))
            by_version: dict[str, list[_Piece]] = {}
            for piece in parts:
                by_version.setdefault(piece.version, []).append(piece)
            lost: dict[_Key, _Piece] = {}
            for key, head in pending.items():
                value = _value(head, by_version.get(head.version, []))
                if value is None:
                    lost[key] = head
                else:
                    resolved[key] = (head, value)
            if not lost:
                break
            await _backoff(attempt)
            fresh = await self._heads(list(lost))
            pending = {k: h for k, h in fresh.items() if h.version != lost[k].version}
            if not pending:
                break
        return resolved

    async def _gets(self, gets: list[tuple[int, GetOp]], results: list[Result]) -> None:
        keys = [(op.namespace, op.key) for _, op in gets]
        values = await self._resolve(await self._heads(keys))
        for i, op in gets:
            found = values.get((op.namespace, op.key))
            if found is not None:
                head, value = found
                results[i] = Item(
                    value=value,
                    key=head.key,
                    namespace=head.namespace,
                    created_at=head.memory.created_at,
                    updated_at=head.memory.updated_at,
                )

    async def _search(self, i: int, op: SearchOp, results: list[Result]) -> None:
        prefix = op.namespace_prefix
        offset, limit = max(op.offset, 0), op.limit
        if limit <= 0 or len(prefix) > MAX_DEPTH:
            results[i] = []
            return
        tag = namespace_tag(prefix) if prefix else MARKER
        query = (op.query or "").strip()
        if query:
            found = await self._semantic(query, tag, op, offset + limit)
        else:
            found = await self._recent(tag, op, offset + limit)
        results[i] = found[offset : offset + limit]

    def _under(self, piece: _Piece | None, prefix: tuple[str, ...]) -> bool:
        """A head (it holds its item's bus key) under `prefix`."""
        return (
            piece is not None
            and piece.part == 0
            and piece.namespace[: len(prefix)] == prefix
            and piece.memory.key == self._name((piece.namespace, piece.key))
        )

    async def _semantic(self, query: str, tag: str, op: SearchOp, want: int) -> list[SearchItem]:
        # With a filter, the best the bus returns are filtered here: ask for all it gives.
        asked = limits.MAX_SEARCH_LIMIT if op.filter else min(want, limits.MAX_SEARCH_LIMIT)
        reply = await self.memory.search(
            query, limit=asked, mode=self.search_mode, tags=[tag], scope=self._scope
        )
        heads: list[tuple[_Piece, float]] = []
        seen: set[_Key] = set()
        for hit in reply.results:
            piece = _parse(hit)
            if piece is None or not self._under(piece, op.namespace_prefix):
                continue
            if (piece.namespace, piece.key) not in seen:  # one item per key, the best hit
                seen.add((piece.namespace, piece.key))
                heads.append((piece, hit.score))
        values = await self._resolve({(h.namespace, h.key): h for h, _ in heads})
        found = []
        for best, score in heads:
            resolved = values.get((best.namespace, best.key))
            if resolved is not None and (not op.filter or matches(resolved[1], op.filter)):
                found.append(_search_item(*resolved, score))
        return found

    async def _recent(self, tag: str, op: SearchOp, want: int) -> list[SearchItem]:
        found: list[SearchItem] = []
        seen: set[_Key] = set()
        pages = full_pages(self.memory, tags=[tag], scope=self._scope)
        async with contextlib.aclosing(pages):
            async for page in pages:
                heads = []
                for memory in page:  # newest first, one head a key
                    piece = _parse(memory)
                    if piece is None or not self._under(piece, op.namespace_prefix):
                        continue
                    if (piece.namespace, piece.key) not in seen:
                        seen.add((piece.namespace, piece.key))
                        heads.append(piece)
                values = await self._resolve({(h.namespace, h.key): h for h in heads})
                for head in heads:
                    resolved = values.get((head.namespace, head.key))
                    if resolved is not None and (not op.filter or matches(resolved[1], op.filter)):
                        found.append(_search_item(*resolved, None))
                if len(found) >= want:
                    break
        return found

    async def _list_namespaces(self, i: int, op: ListNamespacesOp, results: list[Result]) -> None:
        conditions = op.match_conditions or ()
        prefix = next((c.path for c in conditions if c.match_type == "prefix"), ())
        fixed = tuple(itertools.takewhile(lambda label: label != "*", prefix))
        if len(fixed) > MAX_DEPTH:
            results[i] = []
            return
        tag = namespace_tag(fixed) if fixed else MARKER
        # One memory per namespace (its deepest tag names it) tells its labels.
        named: dict[str, str] = {}
        async for page in compact_pages(self.memory, tags=[tag], scope=self._scope):
            for item in page:
                deepest = max(item.tags, key=_tag_depth, default="")
                if _tag_depth(deepest) and deepest not in named:
                    named[deepest] = item.id
        namespaces: set[tuple[str, ...]] = set()
        for ids in chunked(list(named.values()), limits.MAX_IDS):
            got = await self.memory.get(ids)
            for memory in got.memories:
                piece = _parse(memory)
                if piece is not None:
                    namespaces.add(piece.namespace)
        kept = [ns for ns in namespaces if all(_namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = [ns[: op.max_depth] for ns in kept]
        results[i] = sorted(set(kept))[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------------ writes

    async def _put(self, ops: list[PutOp]) -> None:
        prepared = [self._prepare(op) for op in ops]  # every value checked before any write
        split = [p for p in prepared if len(p.metadatas) > 1]
        # A value in parts: its parts first (each value's in one atomic `apply`, measured
        # before anything is sent), so that a head is never written before its parts.
        written = time.monotonic()
        try:
            heads, _ = await asyncio.gather(
                self._heads([p.key for p in prepared]),
                write_groups(self.memory, [self._part_actions(p) for p in split]),
            )
        except BaseException:
            await asyncio.gather(*(self._forget(p) for p in split))
            raise
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def settle(p: _Prepared) -> None:
            async with limit:
                await self._settle(p, heads.get(p.key), written)

        outcomes = await asyncio.gather(*(settle(p) for p in prepared), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _settle(self, p: _Prepared, head: _Piece | None, written: float) -> None:
        """Write the head (or delete it) at the version read; read it again and retry when
        another write of the key landed first; then delete the parts nothing names."""
        for attempt in range(_ATTEMPTS):
            if len(p.metadatas) > 1 and time.monotonic() - written > _HEAD_WINDOW_S:
                # Parts this old may be swept as orphans by another put: never name them.
                await self._forget(p)
                raise Conflict(
                    f"The put of {p.op.key!r} in {p.op.namespace} took over"
                    f" {_HEAD_WINDOW_S:.0f} s between writing its value's parts and its"
                    " head, and was given up (nothing of it is stored): retry it."
                )
            try:
                await self._write_head(p, head)
            except (Conflict, NotFound) as lost:
                # Refused whole: another put or delete of the key landed since the read (a
                # delete finds the head gone); anything else is not a race.
                if isinstance(lost, NotFound) and p.value is not None:
                    raise
                await _backoff(attempt)
                head = (await self._heads([p.key])).get(p.key)
                continue
            await self._clean(p, head)
            return
        await self._forget(p)
        raise Conflict(
            f"The put of {p.op.key!r} in {p.op.namespace} lost the race to other writes of"
            f" that key {_ATTEMPTS} times in a row (nothing of it is stored): retry it."
        )

    async def _write_head(self, p: _Prepared, head: _Piece | None) -> None:
        if p.value is None:
            if head is not None:
                delete = ApplyDelete(id=head.memory.id, expected_version=head.memory.version)
                await self.memory.apply([delete])
            return
        op = p.op
        ttl_s, idle_ttl_s = self._lifetime(op.ttl)
        await self.memory.add(
            self.type,
            p.text,
            tags=[
                MARKER,
                *(namespace_tag(op.namespace[:depth]) for depth in range(1, len(op.namespace) + 1)),
                key_tag(op.namespace, op.key),
            ],
            metadata=p.metadatas[0],
            dedup="none",
            scope=self._scope,
            ttl_s=ttl_s,
            idle_ttl_s=idle_ttl_s,
            key=self._name(p.key),
            expected_version=head.memory.version if head is not None else 0,
        )

    def _part_actions(self, p: _Prepared) -> list[ApplyAdd]:
        """The adds of a value's continuation parts."""
        op = p.op
        tags = [PART_TAG, key_tag(op.namespace, op.key), version_tag(p.version)]
        path = _path(op.namespace, op.key)
        ttl_s, idle_ttl_s = self._lifetime(op.ttl)
        return [
            ApplyAdd(
                type=self.type,
                content=f"{path} (part {part + 1})",
                tags=tags,
                metadata=metadata,
                dedup="none",
                scope=self._scope,
                ttl_s=ttl_s,
                idle_ttl_s=idle_ttl_s,
            )
            for part, metadata in enumerate(p.metadatas)
            if part > 0
        ]

    async def _clean(self, p: _Prepared, replaced: _Piece | None) -> None:
        """After the head changed: delete the parts of the version it replaced (no head
        names that version any more) and orphans old enough that no put still running can
        name them. The put has landed, so a failure here is only logged."""
        old = replaced.version if replaced is not None and replaced.parts > 1 else None
        if old is None and len(p.metadatas) <= 1:
            return  # no parts involved: nothing to look for
        try:
            cutoff = datetime.now(UTC) - _ORPHAN_AGE
            doomed: list[str] = []
            tag = key_tag(*p.key)
            async for page in full_pages(self.memory, tags=[tag], scope=self._scope):
                for piece in map(_parse, page):
                    if (
                        piece is not None
                        and piece.part > 0
                        and (piece.namespace, piece.key) == p.key
                        and piece.version != p.version
                        and (piece.version == old or piece.memory.created_at < cutoff)
                    ):
                        doomed.append(piece.memory.id)
            await self._delete(doomed)
        except BusError as exc:
            log.warning("langgraph.parts_left", key=p.op.key, error=exc.message)

    async def _forget(self, p: _Prepared) -> None:
        """Delete the parts of a write that will not be a head (best effort)."""
        if len(p.metadatas) <= 1:
            return
        try:
            ids: list[str] = []
            tags = [version_tag(p.version)]
            async for page in full_pages(self.memory, tags=tags, scope=self._scope):
                ids.extend(m.id for m in page)
            await self._delete(ids)
        except BusError as exc:
            log.warning("langgraph.parts_left", key=p.op.key, error=exc.message)

    async def _delete(self, ids: Sequence[str]) -> None:
        for group in chunked(list(dict.fromkeys(ids)), limits.MAX_IDS):
            await self.memory.delete(group)  # one gone meanwhile is only `missing`

    def _prepare(self, op: PutOp) -> _Prepared:
        version = uuid.uuid4().hex
        path = _path(op.namespace, op.key)
        if op.value is None:
            return _Prepared(op, None, "", version, [])
        if not isinstance(op.value, Mapping):
            raise TypeError(f"A store value is a mapping (a JSON object); got {type(op.value)}")
        value = plain_json(dict(op.value))
        header = {"kind": KIND, "namespace": list(op.namespace), "key": op.key, "version": version}
        metadatas = pack(header, "value", value)
        if op.index is False:
            return _Prepared(op, value, path, version, metadatas)
        texts: list[str] = []
        for field in op.index if op.index is not None else self.fields:
            texts.extend([render(value)] if field == "$" else get_text_at_path(value, field))
        text = content_text("\n".join(texts), fallback=path)
        return _Prepared(op, value, text, version, metadatas)

    def _lifetime(self, ttl: float | None) -> tuple[int | None, int | None]:
        """LangGraph's TTL (minutes, refreshed by reads by default) as the memory's
        (`ttl_s`, `idle_ttl_s`); None: the type's."""
        if ttl is None:
            return None, None
        seconds = max(1, math.ceil(ttl * 60))
        if (self.ttl_config or {}).get("refresh_on_read", True):
            return None, max(60, seconds)
        return seconds, None


def _search_item(head: _Piece, value: dict[str, Any], score: float | None) -> SearchItem:
    return SearchItem(
        namespace=head.namespace,
        key=head.key,
        value=value,
        created_at=head.memory.created_at,
        updated_at=head.memory.updated_at,
        score=score,
    )
