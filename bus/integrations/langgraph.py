"""LangGraph's long-term memory store on the bus: `MemoryBusStore(bus, **options)`.

A `langgraph.store.base.BaseStore`, so a graph compiled with `store=MemoryBusStore(bus)`
keeps what its nodes `put` in the bus, where every agent of the namespace can find it, and
`search` goes through the bus's own ranking (hybrid vector and BM25 by default).

How LangGraph's model maps onto memories (one item is one memory, type `knowledge` by
default, in the store's workflow or general):

- **Namespaces are tags.** An item in `("users", "u1", "memories")` carries one tag per
  prefix of its namespace, `lg.ns1:<digest of ("users",)>`, `lg.ns2:<digest of ("users",
  "u1")>`, `lg.ns3:...`, plus `langgraph`, the tag of every item. Searching
  `("users", "u1")` is then one tag filter, and prefix search works at every depth. Tags
  hold digests because a tag is lower-case `[a-z0-9_:.-]` of at most 64 characters, and a
  namespace label may be anything; the namespace itself is in the item's metadata and is
  checked on every read. A namespace is at most 30 labels deep (a memory has 32 tags).
  Workflows are not used for namespaces (a workflow id cannot hold a prefix relation):
  `workflow_id=` puts the whole store in one workflow, and by default its items are
  general memories, which every workflow's reads see.
- **Keys** are a tag too, `lg.key:<digest of (namespace, key)>`, so `get` is one `list`
  by tag (several gets share one, 32 keys a request) and the key comes back exactly as
  given, from the metadata.
- **Values** are kept exactly in `metadata`: `{"kind": "langgraph.item", "namespace",
  "key", "version", "value"}` (`created_at` too once the key has been written before). A
  value whose JSON exceeds the bus's metadata limits (8 KiB, 8 levels) is written in pieces
  over several memories in one atomic `apply` (continuation parts carry only
  `langgraph.part` and the key's tag): about 150 KiB of JSON at most (200 KiB of text that
  needs few JSON escapes). `content` is the text that is embedded and searched: the
  fields of the store's `fields` (or of `put(..., index=[...])`, LangGraph's JSON paths),
  by default the whole value rendered as `field: value` lines; `index=False` keeps only
  the item's path (`users/u1/memories/<key>`).
- **A put** is one `apply`: delete the key's current memory, add the new one; both or
  neither. A put that lost a race with a delete of the same memory is retried; two puts of
  a new key at the same moment may both land, and reads then take the newest (the next put
  removes both). A delete is `put(..., None)`: the key's memories are deleted.
- **Timestamps**: `updated_at` is when the current value was written, `created_at` when
  the key was first written (kept across puts in the metadata).
- **Search** with `query` is the bus's `search` under the prefix's tag (`SearchItem.score`
  is the bus's score); without one it lists the prefix's items, most recently written
  first. `filter` (LangGraph's syntax: exact values, `$eq`, `$ne`, `$gt`, `$gte`, `$lt`,
  `$lte`) is applied here to the values read: with a query, among the bus's best 100.
  `offset + limit` of a query search is at most 100.
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
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple

import msgspec
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
from bus.errors import Conflict
from bus.integrations._documents import (
    Incomplete,
    Refused,
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
from contracts.messages import ApplyAction, ApplyAdd, ApplyDelete, Memory

__all__ = ["MemoryBusStore"]

# Every item (its first memory) carries this tag; continuation parts carry PART_TAG.
MARKER = "langgraph"
PART_TAG = "langgraph.part"
KIND = "langgraph.item"
_NS_TAG = "lg.ns"
_KEY_TAG = "lg.key:"
# The marker, the key's tag, and one tag per namespace prefix.
MAX_DEPTH = limits.MAX_TAGS - 2
# Puts that lost a race with a delete of the memory they replace are tried again (each
# lost race is another write of the key that succeeded).
_ATTEMPTS = 8
_encoder = msgspec.json.Encoder()


def namespace_tag(prefix: Sequence[str]) -> str:
    """The tag every item under `prefix` (non-empty) carries."""
    return f"{_NS_TAG}{len(prefix)}:{digest(*prefix)}"


def key_tag(namespace: Sequence[str], key: str) -> str:
    return f"{_KEY_TAG}{digest(list(namespace), key)}"


def _tag_depth(tag: str) -> int:
    """The depth of a namespace tag (`lg.ns3:...` is 3); 0 for any other tag."""
    head, sep, _ = tag.partition(":")
    if not sep or not head.startswith(_NS_TAG) or not head[len(_NS_TAG) :].isdigit():
        return 0
    return int(head[len(_NS_TAG) :])


class _Piece(NamedTuple):
    """One memory of an item's value (a whole value is part 0 of 1)."""

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


def _newest_first(piece: _Piece) -> tuple[datetime, str]:
    return piece.memory.created_at, piece.memory.id


def _latest(pieces: Iterable[_Piece]) -> tuple[_Piece, dict[str, Any]] | None:
    """The newest complete version among one key's memories: its first part and value."""
    versions: dict[str, list[_Piece]] = {}
    for piece in pieces:
        versions.setdefault(piece.version, []).append(piece)
    heads = [head for parts in versions.values() for head in parts if head.part == 0]
    for head in sorted(heads, key=_newest_first, reverse=True):
        value = _value(versions[head.version])
        if value is not None:
            return head, value
    return None


def _value(pieces: Sequence[_Piece]) -> dict[str, Any] | None:
    by_id = {p.memory.id: p.memory.metadata for p in pieces}  # a page may repeat a memory
    try:
        value = unpack("value", list(by_id.values()))
    except Incomplete:
        return None
    return value if isinstance(value, dict) else None


def _created_at(head: _Piece) -> datetime:
    kept = head.memory.metadata.get("created_at")
    if isinstance(kept, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(kept)
    return head.memory.created_at


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
    """A put checked and rendered before anything is sent."""

    op: PutOp
    value: dict[str, Any] | None
    text: str


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

    async def _pieces_of(self, keys: Sequence[tuple[tuple[str, ...], str]]) -> list[_Piece]:
        """Every memory of these keys (each version, each part)."""

        async def some(group: Sequence[tuple[tuple[str, ...], str]]) -> list[_Piece]:
            tags = [key_tag(ns, key) for ns, key in group]
            wanted = set(group)
            found = []
            async for page in full_pages(self.memory, tags=tags, scope=self._scope):
                for memory in page:
                    piece = _parse(memory)
                    # The metadata decides: a digest says where to look, not what was found.
                    if piece is not None and (piece.namespace, piece.key) in wanted:
                        found.append(piece)
            return found

        groups = await asyncio.gather(*(some(g) for g in chunked(keys, limits.MAX_TAGS)))
        return [piece for group in groups for piece in group]

    async def _gets(self, gets: list[tuple[int, GetOp]], results: list[Result]) -> None:
        keys = list(dict.fromkeys((op.namespace, op.key) for _, op in gets))
        by_key: dict[tuple[tuple[str, ...], str], list[_Piece]] = {}
        for piece in await self._pieces_of(keys):
            by_key.setdefault((piece.namespace, piece.key), []).append(piece)
        for i, op in gets:
            latest = _latest(by_key.get((op.namespace, op.key), []))
            if latest is not None:
                head, value = latest
                results[i] = Item(
                    value=value,
                    key=head.key,
                    namespace=head.namespace,
                    created_at=_created_at(head),
                    updated_at=head.memory.updated_at,
                )

    async def _values(self, heads: Sequence[_Piece]) -> dict[str, dict[str, Any]]:
        """The value of each head's version (by version), reading the other parts of the
        values kept in several memories; an incomplete one is left out."""
        values: dict[str, dict[str, Any]] = {}
        split = []
        for head in heads:
            if head.parts == 1:
                value = _value([head])
                if value is not None:
                    values[head.version] = value
            else:
                split.append(head)
        if split:
            pieces = await self._pieces_of([(h.namespace, h.key) for h in split])
            for head in split:
                value = _value([p for p in pieces if p.version == head.version])
                if value is not None:
                    values[head.version] = value
        return values

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
        return piece is not None and piece.part == 0 and piece.namespace[: len(prefix)] == prefix

    async def _semantic(self, query: str, tag: str, op: SearchOp, want: int) -> list[SearchItem]:
        # With a filter, the best the bus returns are filtered here: ask for all it gives.
        asked = limits.MAX_SEARCH_LIMIT if op.filter else min(want, limits.MAX_SEARCH_LIMIT)
        reply = await self.memory.search(
            query, limit=asked, mode=self.search_mode, tags=[tag], scope=self._scope
        )
        heads: list[tuple[_Piece, float]] = []
        seen: set[tuple[tuple[str, ...], str]] = set()
        for hit in reply.results:
            piece = _parse(hit)
            if piece is None or not self._under(piece, op.namespace_prefix):
                continue
            if (piece.namespace, piece.key) not in seen:  # one item per key, the best hit
                seen.add((piece.namespace, piece.key))
                heads.append((piece, hit.score))
        values = await self._values([head for head, _ in heads])
        found = []
        for head, score in heads:
            value = values.get(head.version)
            if value is not None and (not op.filter or matches(value, op.filter)):
                found.append(_search_item(head, value, score))
        return found

    async def _recent(self, tag: str, op: SearchOp, want: int) -> list[SearchItem]:
        found: list[SearchItem] = []
        seen: set[tuple[tuple[str, ...], str]] = set()
        pages = full_pages(self.memory, tags=[tag], scope=self._scope)
        async with contextlib.aclosing(pages):
            async for page in pages:
                heads = []
                for memory in page:  # newest first: a key's first memory is its current one
                    piece = _parse(memory)
                    if piece is None or not self._under(piece, op.namespace_prefix):
                        continue
                    if (piece.namespace, piece.key) not in seen:
                        seen.add((piece.namespace, piece.key))
                        heads.append(piece)
                values = await self._values(heads)
                for head in heads:
                    value = values.get(head.version)
                    if value is not None and (not op.filter or matches(value, op.filter)):
                        found.append(_search_item(head, value, None))
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
        pending = [self._prepare(op) for op in ops]  # every value checked before any write
        for _ in range(_ATTEMPTS):
            keys = [(p.op.namespace, p.op.key) for p in pending]
            current: dict[tuple[tuple[str, ...], str], list[_Piece]] = {}
            for piece in await self._pieces_of(keys):
                current.setdefault((piece.namespace, piece.key), []).append(piece)
            groups = [
                self._actions(p, current.get(key, [])) for p, key in zip(pending, keys, strict=True)
            ]
            try:
                await write_groups(self.memory, groups)
                return
            except Refused as refused:
                # A memory to replace went meanwhile: what follows is read and sent again.
                pending = pending[refused.first :]
        raise Conflict(
            f"{len(pending)} put(s) kept racing with other writes of the same keys; retry."
        )

    def _prepare(self, op: PutOp) -> _Prepared:
        path = _path(op.namespace, op.key)
        if op.value is None:
            return _Prepared(op, None, "")
        if not isinstance(op.value, Mapping):
            raise TypeError(f"A store value is a mapping (a JSON object); got {type(op.value)}")
        value = plain_json(dict(op.value))
        if op.index is False:
            return _Prepared(op, value, path)
        texts: list[str] = []
        for field in op.index if op.index is not None else self.fields:
            texts.extend([render(value)] if field == "$" else get_text_at_path(value, field))
        return _Prepared(op, value, content_text("\n".join(texts), fallback=path))

    def _actions(self, prepared: _Prepared, current: list[_Piece]) -> list[ApplyAction]:
        """Delete the key's memories; add the new value's (one `apply`: both or neither)."""
        op = prepared.op
        actions: list[ApplyAction] = [
            ApplyDelete(id=mid) for mid in dict.fromkeys(p.memory.id for p in current)
        ]
        if prepared.value is None:
            return actions
        header: dict[str, Any] = {
            "kind": KIND,
            "namespace": list(op.namespace),
            "key": op.key,
            "version": uuid.uuid4().hex,
        }
        latest = _latest(current)
        if latest is not None:
            header["created_at"] = _created_at(latest[0]).isoformat()
        metadatas = pack(header, "value", prepared.value)
        tag = key_tag(op.namespace, op.key)
        head_tags = [
            MARKER,
            *(namespace_tag(op.namespace[:depth]) for depth in range(1, len(op.namespace) + 1)),
            tag,
        ]
        path = _path(op.namespace, op.key)
        ttl_s, idle_ttl_s = self._lifetime(op.ttl)
        for part, metadata in enumerate(metadatas):
            actions.append(
                ApplyAdd(
                    type=self.type,
                    content=prepared.text if part == 0 else f"{path} (part {part + 1})",
                    tags=head_tags if part == 0 else [PART_TAG, tag],
                    metadata=metadata,
                    dedup="none",
                    scope=self._scope,
                    ttl_s=ttl_s,
                    idle_ttl_s=idle_ttl_s,
                )
            )
        return actions

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
        created_at=_created_at(head),
        updated_at=head.memory.updated_at,
        score=score,
    )
