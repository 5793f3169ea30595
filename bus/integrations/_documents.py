"""JSON documents kept exactly in memories, for the framework adapters.

A framework hands the adapters JSON documents (a LangGraph value, an Agents SDK item) that
must come back exactly as given, and text for search. The bus keeps a memory's `metadata`
as the JSON sent, unscanned and unchanged (up to 8 KiB, 8 levels deep), while `content` is
what is embedded and searched, and may be redacted by the deployment's secret policy. So a
document lives in `metadata`: as the object itself when it fits, else as its JSON text cut
into pieces over several memories ("parts", all written in one atomic `apply`); `content`
holds a text rendering for search. Also here: the digests that turn arbitrary strings into
tags, reading a tag's memories page by page, and writing groups of actions in as few
atomic `apply` requests as fit.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import msgspec
import structlog

from bus.client import AgentMemory
from bus.errors import NotFound, TooLarge
from bus.handle import Filters
from contracts import limits
from contracts.messages import (
    ApplyAction,
    CompactListReply,
    CompactMemory,
    ListReply,
    Memory,
    clip,
)

T = TypeVar("T")
# A page of `list`: full or compact.
Page = TypeVar("Page", ListReply, CompactListReply)

_encoder = msgspec.json.Encoder()
log = structlog.get_logger("membus.integrations")

# Each memory's metadata keeps this much room unused: the limit is the handler's, measured
# on the same compact encoding, so the margin only absorbs a header that grows by a digit.
_METADATA_MARGIN = 64
# An `apply` body beyond its actions: workflow, agent, context (a session id), framing.
_BODY_BUDGET = limits.MAX_BODY_BYTES - 8 * 1024
_CONTENT_BUDGET = limits.MAX_CONTENT_BYTES - 64  # `clip` appends a mark of what it cut
_LIST_PAGE = limits.MAX_LIST_LIMIT


def digest(*parts: object) -> str:
    """A 128-bit hex digest of JSON-encodable parts: a tag (`[a-z0-9_:.-]`, 64 characters at
    most) that stands for strings a tag cannot hold (any case, any character, any length)."""
    return hashlib.blake2b(_encoder.encode(parts), digest_size=16).hexdigest()


def plain_json(document: Any) -> Any:
    """The document as JSON gives it back (tuples become lists, and so on): what reads
    return, so that what is written is compared and sized as it will be read."""
    try:
        return msgspec.json.decode(_encoder.encode(document))
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"the document is not JSON: {exc}") from None


def pack(header: Mapping[str, Any], field: str, document: Any) -> list[dict[str, Any]]:
    """The metadata of each memory that keeps `document` (already `plain_json`): one,
    `{**header, field: document}`, when that fits the bus's metadata limits; else the
    document's JSON text in pieces, `{**header, "part": i, "parts": n, "json": piece}`."""
    whole = {**header, field: document}
    size = len(_encoder.encode(whole))
    if size <= limits.MAX_METADATA_BYTES - _METADATA_MARGIN and (
        limits.nesting(whole) <= limits.MAX_METADATA_NESTING
    ):
        return [whole]
    text = _encoder.encode(document).decode()
    frame = {**header, "part": 10**6, "parts": 10**6, "json": ""}
    budget = limits.MAX_METADATA_BYTES - _METADATA_MARGIN - len(_encoder.encode(frame))
    pieces = list(_pieces(text, budget))
    return [
        {**header, "part": i, "parts": len(pieces), "json": piece} for i, piece in enumerate(pieces)
    ]


def _escaped(text: str) -> int:
    """Bytes of `text` inside a JSON string (quotes, backslashes and control characters
    are escaped; the rest is UTF-8)."""
    return len(_encoder.encode(text)) - 2


def _pieces(text: str, budget: int) -> Iterator[str]:
    """`text` cut into the fewest pieces whose JSON string form fits `budget` bytes."""
    start = 0
    while start < len(text):
        if _escaped(text[start:]) <= budget:
            yield text[start:]
            return
        lo, hi = start + 1, len(text)  # the longest piece that fits ends in lo..hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _escaped(text[start:mid]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        yield text[start:lo]
        start = lo


def part_of(metadata: Mapping[str, Any]) -> tuple[int, int]:
    """(part, parts) of a memory's metadata: (0, 1) for a document kept whole."""
    part, parts = metadata.get("part", 0), metadata.get("parts", 1)
    if not isinstance(part, int) or not isinstance(parts, int):
        return -1, 0
    return part, parts


class Incomplete(Exception):
    """Some parts of a document are missing (deleted or expired meanwhile)."""


def unpack(field: str, metadatas: Sequence[Mapping[str, Any]]) -> Any:
    """The document kept in these memories' metadata (one whole, or every part of it, in
    any order); `Incomplete` when a part is missing."""
    if len(metadatas) == 1 and field in metadatas[0]:
        return metadatas[0][field]
    ordered = sorted(metadatas, key=lambda m: part_of(m)[0])
    count = part_of(ordered[0])[1] if ordered else 0
    if count < 1 or [part_of(m) for m in ordered] != [(i, count) for i in range(count)]:
        raise Incomplete
    pieces = [m.get("json") for m in ordered]
    if not all(isinstance(p, str) for p in pieces):
        raise Incomplete
    try:
        return msgspec.json.decode("".join(pieces))  # type: ignore[arg-type]
    except msgspec.DecodeError:
        raise Incomplete from None


def content_text(text: str, fallback: str) -> str:
    """`text` as a memory's `content`: no NUL (full-text search stops at one), at most the
    content limit, and never blank (then `fallback`)."""
    text = text.replace("\x00", " ")
    if not text.strip():
        text = fallback
    return clip(text, _CONTENT_BUDGET)


class Refused(Exception):
    """An `apply` was refused as `not_found` (a memory it deletes went meanwhile): groups
    from `first` on were not written; the ones before were."""

    def __init__(self, first: int, cause: NotFound) -> None:
        super().__init__(cause.message)
        self.first = first


async def write_groups(mem: AgentMemory, groups: Sequence[Sequence[ApplyAction]]) -> None:
    """Send each group of actions atomically (one `apply`), packing consecutive groups into
    as few requests as the limits allow (50 actions, 256 KiB). Every group is measured
    before anything is sent: one that cannot be one request is `TooLarge`, nothing written."""
    costs = [sum(len(_encoder.encode(a)) + 1 for a in group) for group in groups]
    for group, cost in zip(groups, costs, strict=True):
        if len(group) > limits.MAX_APPLY_ACTIONS or cost > _BODY_BUDGET:
            raise TooLarge(
                f"One document takes {len(group)} writes and {cost} bytes of request, more"
                f" than one atomic `apply` holds ({limits.MAX_APPLY_ACTIONS} actions,"
                f" {_BODY_BUDGET} bytes): keep each document under about 150 KiB of JSON."
            )
    batch: list[ApplyAction] = []
    size = first = 0
    for i, (group, cost) in enumerate(zip(groups, costs, strict=True)):
        if not group:
            continue
        full = len(batch) + len(group) > limits.MAX_APPLY_ACTIONS or size + cost > _BODY_BUDGET
        if batch and full:
            await _apply(mem, batch, first)
            batch, size = [], 0
        if not batch:
            first = i
        batch.extend(group)
        size += cost
    if batch:
        await _apply(mem, batch, first)


async def _apply(mem: AgentMemory, actions: list[ApplyAction], first: int) -> None:
    try:
        await mem.apply(actions)
    except NotFound as exc:
        raise Refused(first, exc) from None


async def full_pages(
    mem: AgentMemory, **filters: Unpack[Filters]
) -> AsyncGenerator[list[Memory], None]:
    """The memories a `list` with these filters finds, newest first, a page at a time."""
    pages = _pages(lambda at: mem.list(mode="full", limit=_LIST_PAGE, offset=at, **filters))
    async for page in pages:
        yield page.memories


async def compact_pages(
    mem: AgentMemory, **filters: Unpack[Filters]
) -> AsyncGenerator[list[CompactMemory], None]:
    """As `full_pages`, in compact form (ids, tags, previews: no content or metadata)."""
    pages = _pages(lambda at: mem.list(mode="compact", limit=_LIST_PAGE, offset=at, **filters))
    async for page in pages:
        yield page.memories


async def _pages(read: Callable[[int], Awaitable[Page]]) -> AsyncGenerator[Page, None]:
    """Every non-empty page `read(offset)` gives, from offset 0 on."""
    offset = 0
    while True:
        page = await read(offset)
        if page.memories:
            yield page
        # A page trimmed to fit the max payload holds fewer than asked: go on from there.
        offset += page.count
        if not page.count or offset >= page.total or not _more(offset, page.total):
            return


def _more(offset: int, total: int) -> bool:
    """RediSearch pages no further than `list`'s offset limit: past it, say what is left."""
    if offset <= limits.MAX_LIST_OFFSET:
        return True
    log.warning("integrations.list_cut", read=offset, total=total, limit=limits.MAX_LIST_OFFSET)
    return False


def chunked(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
