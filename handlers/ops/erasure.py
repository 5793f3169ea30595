"""`delete` with `erase` (PROTOCOL v4, "Erasure"): the memories' text taken out of every place
the service keeps data before the reply is sent.

In order: the store's script deletes the memories and scrubs their histories (an `erased`
tombstone appended; `store.erasure`); the texts it returns (the record's, and past contents
from the history) tell which embedding-cache entries to drop; the ids leave every recall
session; the bus's JetStream streams lose every message holding an id or a text
(`handlers.streams`); then the `deleted` events go out, with `erased: true` and no preview.
An id that is gone already is `missing`, as `delete` answers it, but what an earlier delete
left of it (its history, its stream messages) is erased too.
"""

from __future__ import annotations

import msgspec
import structlog

from contracts.messages import DeleteReply, DeleteRequest
from contracts.subjects import FULL_TRUST
from contracts.types import STATE_TYPE
from handlers.embed.cache import CachedEmbedder, cache_model, entry_key
from handlers.errors import Forbidden, Unavailable
from handlers.ops.deps import Deps
from handlers.ops.events import publish_event
from handlers.ops.history import entry
from handlers.ops.rerank import E5_CACHE_MODEL
from handlers.ops.workspaces import state_is_immutable
from handlers.store.erasure import Erased
from handlers.store.keys import EMBED_CACHE
from handlers.store.record import Entry, Record
from handlers.store.writes import Immutable
from handlers.streams import Sought, strings

log = structlog.get_logger("membus.operations")


def check_may_erase(deps: Deps) -> None:
    if deps.access.trust != FULL_TRUST:
        raise Forbidden(
            f"`erase` needs full trust (mem.<ns>.delete); at trust {deps.access.trust!r} a"
            " delete without `erase` is allowed. Ask a full-trust agent or the operator to"
            " erase."
        )


def _metadata_strings(raw: str | None) -> list[str]:
    if not raw:
        return []
    try:
        return list(strings(msgspec.json.decode(raw)))
    except msgspec.DecodeError:
        return [raw]


def record_texts(rec: Record) -> list[str]:
    """Every text of a memory that erasure takes away (PROTOCOL v4: content, title, facts,
    narrative, metadata strings, source)."""
    texts = [rec.content, *rec.facts, *_metadata_strings(rec.metadata)]
    texts += [t for t in (rec.title, rec.narrative, rec.source) if t]
    return [t for t in texts if t]


def past_contents(history: list[Entry]) -> list[str]:
    """The contents a memory had, as its history's updates recorded them."""
    out = []
    for e in history:
        change = e.changes.get("content") or {}
        out += [v for v in (change.get("old"), change.get("new")) if isinstance(v, str) and v]
    return out


async def erase(ns: str, ids: list[str], req: DeleteRequest, deps: Deps) -> DeleteReply:
    now = deps.clock()
    keep_ms = deps.settings.history_after_delete_s * 1000
    tombstone = entry("erased", now, req, req.agent_id)
    try:
        done = await deps.store.erasure.erase(ns, ids, now, tombstone, keep_ms, STATE_TYPE)
    except Immutable as exc:
        raise state_is_immutable(exc.memory_id, "delete") from None
    contents: list[str] = []
    texts: list[str] = []
    for e in done:
        past = past_contents(e.history)
        contents += past
        texts += past
        if e.record is not None:
            contents.append(e.record.content)
            texts += record_texts(e.record)
    await _forget_embeddings(ns, contents, deps)
    await deps.store.erasure.forget_in_sessions(ns, ids)
    messages, whole = await _erase_in_streams(ns, ids, texts, deps)
    for mid, e in zip(ids, done, strict=True):
        if e.record is not None:
            await publish_event(deps, ns, "deleted", e.record, now, erased=True)
            log.info("erase.done", id=mid)
    return _reply(ids, done, messages, whole)


def _reply(ids: list[str], done: list[Erased], messages: int, whole: bool) -> DeleteReply:
    live = [mid for mid, e in zip(ids, done, strict=True) if e.record is not None]
    return DeleteReply(
        deleted=len(live),
        missing=[mid for mid in ids if mid not in set(live)],
        erased=sum(e.erased for e in done),
        erased_messages=messages,
        scan_complete=whole,
    )


async def _forget_embeddings(ns: str, contents: list[str], deps: Deps) -> None:
    """Drop the cached vectors of the contents (every handler's cache is the one in Redis;
    this handler's own recent ones too)."""
    if not contents:
        return
    if isinstance(deps.embedder, CachedEmbedder):
        deps.embedder.forget(contents)
    if deps.reranker is not None:
        deps.reranker.forget(contents)
    meta = await deps.store.meta(ns)
    # The second opinion's vectors too (handlers/ops/rerank.py), whether or not this
    # handler has it on: another may.
    models = dict.fromkeys([cache_model(meta.embedder, meta.dimension), E5_CACHE_MODEL])
    drop = [entry_key(EMBED_CACHE, t, m) for t in dict.fromkeys(contents) for m in models]
    await deps.store.erasure.drop(drop)


async def _erase_in_streams(
    ns: str, ids: list[str], texts: list[str], deps: Deps
) -> tuple[int, bool]:
    if deps.streams is None:
        return 0, True
    try:
        return await deps.streams.erase(ns, Sought(frozenset(ids), frozenset(texts)))
    except Exception as exc:
        log.warning("erase.streams_failed", exc_info=True)
        raise Unavailable(
            "The memories are erased from the store, but the bus's JetStream streams could"
            f" not be scrubbed ({type(exc).__name__}). Send the same erase again once NATS"
            " answers: it looks for the same ids in the streams."
        ) from None
