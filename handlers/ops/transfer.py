"""`export` and `import` (PROTOCOL v2 "Export and import", this project's extension): a
namespace's memories out, whole and page by page, and back in as they were: the same ids,
times, expiry, counters and stores. Both need full trust (they cross every store)."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import msgspec
import numpy as np

from contracts import limits
from contracts.messages import (
    ExportedMemory,
    ExportReply,
    ExportRequest,
    ImportedMemory,
    ImportReply,
    ImportRequest,
)
from contracts.types import STATE_TYPE
from handlers.errors import InvalidRequest
from handlers.ops.checks import (
    check_content,
    check_metadata,
    check_narrative,
    check_no_nul,
    type_config,
)
from handlers.ops.clock import dt_to_ms
from handlers.ops.deps import Deps
from handlers.ops.events import publish_event
from handlers.ops.registry import handles
from handlers.ops.replies import as_record, to_exported
from handlers.ops.vectors import embed_texts, given_vector
from handlers.ops.writes import content_hash
from handlers.store.record import PERMANENT_MS, Entry, Record, expiry, lifetime

_encoder = msgspec.json.Encoder()
# Room in a reply for everything but its memories (the envelope, cursor, pending ids).
_REPLY_ROOM = 8 * 1024 + limits.MAX_EXPORT_LIMIT * (limits.MAX_ID_CHARS + 4)


@handles(ExportRequest)
async def export(ns: str, req: ExportRequest, deps: Deps) -> ExportReply:
    meta = await deps.store.meta(ns)
    now = deps.clock()
    cursor: str | None = None
    if req.ids is not None:
        ids = list(dict.fromkeys(req.ids))
    else:
        ids, after = await deps.store.transfer.scan(ns, int(req.cursor), req.limit)
        cursor = str(after) if after else None
    live = [f for f in await deps.store.reads.fetch(ns, ids, now, count_access=False) if f]
    vectors = (
        await deps.store.reads.vectors(ns, [f.record.id for f in live]) if req.embeddings else {}
    )
    memories: list[ExportedMemory] = []
    pending: list[str] = []
    room = deps.max_payload - _REPLY_ROOM
    for f in live:
        vec = vectors.get(f.record.id)
        item = to_exported(
            f,
            [float(x) for x in vec] if vec is not None else None,
            embedding_digest(meta.embedder, meta.dimension, f.record.content)
            if vec is not None
            else None,
        )
        size = len(_encoder.encode(item)) + 1
        # Whole memories or none: what does not fit is named in `pending`, never cut.
        if pending or (size > room and memories):
            pending.append(f.record.id)
            continue
        room -= size
        memories.append(item)
    return ExportReply(
        memories=memories,
        cursor=cursor,
        pending=pending,
        embedder=meta.embedder,
        dimension=meta.dimension,
    )


def embedding_digest(embedder: str, dimension: int, content: str) -> str:
    """What an exported vector is of (`embedding_of`): the embedder, its dimension and the
    embedded text. An import takes the vector only for the same three."""
    raw = f"{embedder}\0{dimension}\0{content}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


class _Checked(NamedTuple):
    line: ImportedMemory
    rec: Record
    # When an idle memory was last kept alive: its keys expire `idle_ttl_s` after it.
    accessed_ms: int


def _record(m: ImportedMemory, deps: Deps, now: int) -> _Checked:
    """The stored form of an imported memory, checked as an add checks it. What the store
    derives from a memory's values (its dedup key, an idle memory's expiry; the index's
    flags, word counts and vector follow in the write) is computed here from the imported
    values, never taken from the line: a line edited by hand stays consistent."""
    type_config(deps.settings.types, m.type)
    check_narrative(m.narrative)
    check_no_nul(title=m.title, narrative=m.narrative, facts=m.facts)
    check_content(m.content)
    created = dt_to_ms(m.created_at)
    rec = as_record(
        m,
        tags=tuple(m.tags),
        created_at=created,
        updated_at=dt_to_ms(m.updated_at) if m.updated_at else created,
        expires_at=dt_to_ms(m.expires_at) if m.expires_at else PERMANENT_MS,
        metadata=check_metadata(m.metadata) if m.metadata else None,
    )
    if m.content_hash != "":  # "": added with dedup "none", and kept out of dedup
        rec = msgspec.structs.replace(rec, content_hash=content_hash(rec))
    # Its last access or write, never ahead of now (that would keep an idle memory longer
    # than its idle time).
    last = dt_to_ms(m.last_accessed_at) if m.last_accessed_at else 0
    accessed = min(max(rec.updated_at, last), now)
    if rec.idle_ttl_s is not None:
        accessed, cap = _idle_times(rec.idle_ttl_s, accessed, rec.expires_at, now)
        rec = msgspec.structs.replace(rec, **lifetime(accessed, cap, rec.idle_ttl_s))
    return _Checked(m, rec, accessed)


def _idle_times(idle_ttl_s: int, last_ms: int, exported_ms: int, now: int) -> tuple[int, int]:
    """An idle memory's last keep-alive and TTL's end (PERMANENT_MS: none known), from its
    last access and the expiry it was exported with. An expiry before the last access's
    own is its TTL's end, kept. A later one says that reads which count no access (`list`)
    kept it alive: it is taken, but never more than `idle_ttl_s` from now (what a read now
    would give)."""
    idle_ms = idle_ttl_s * 1000
    if exported_ms >= PERMANENT_MS:  # none exported: from the last access
        return last_ms, PERMANENT_MS
    if exported_ms < last_ms + idle_ms:
        return last_ms, exported_ms
    return min(exported_ms - idle_ms, now), PERMANENT_MS


async def _vectors(ns: str, todo: list[_Checked], deps: Deps) -> list[np.ndarray]:
    """Each memory's vector: its exported one where it is the vector of this content by the
    namespace's embedder (`embedding_of`; checked as an `add`'s), else this handler's
    embedding of the content, in one batch."""
    meta = await deps.store.meta(ns)
    out: list[np.ndarray | None] = []
    for m, rec, _ in todo:
        if m.embedding is None or m.embedding_of != embedding_digest(
            meta.embedder, meta.dimension, rec.content
        ):
            out.append(None)
            continue
        try:
            out.append(given_vector(ns, meta, m.embedding))
        except InvalidRequest as exc:
            raise InvalidRequest(
                f"Memory {m.id!r}: {exc.message} Import into a namespace of the same embedder,"
                " or leave `embedding` out (export without --embeddings) to embed the content."
            ) from None
    texts = [c.rec.content for c, v in zip(todo, out, strict=True) if v is None]
    if texts:
        embedded = iter(await embed_texts(ns, deps, meta, texts))
        out = [v if v is not None else next(embedded) for v in out]
    return [v for v in out if v is not None]


@handles(ImportRequest)
async def import_(ns: str, req: ImportRequest, deps: Deps) -> ImportReply:
    now = deps.clock()
    reply = ImportReply()
    ids = [m.id for m in req.memories]
    if len(set(ids)) != len(ids):
        raise InvalidRequest("`memories` names the same id twice; send each memory once.")
    # Every memory is checked before any is written: a bad one fails the request whole.
    checked = [_record(m, deps, now) for m in req.memories]
    present = await deps.store.transfer.existing(ns, ids)
    todo: list[_Checked] = []
    for c in checked:
        m, rec = c.line, c.rec
        if expiry(rec, c.accessed_ms) <= now:
            reply.expired.append(m.id)
        elif m.id in present:
            reply.existing.append(m.id)
        elif rec.type == STATE_TYPE and rec.workspace is None:
            raise InvalidRequest(f"State {m.id!r} has no workspace; a state lives in one.")
        else:
            todo.append(c)
    if not todo:
        return reply
    vectors = await _vectors(ns, todo, deps)
    for (m, rec, accessed), vec in zip(todo, vectors, strict=True):
        added = Entry(
            event="added", at=rec.created_at, agent_id=rec.agent_id, session_id=rec.session_id
        )
        last = dt_to_ms(m.last_accessed_at) if m.last_accessed_at else None
        if await deps.store.transfer.write(ns, rec, vec, m.access_count, last, accessed, added):
            reply.created.append(rec.id)
            await publish_event(deps, ns, "added", rec, now)
        else:  # written meanwhile (the same import, run twice at once)
            reply.existing.append(rec.id)
    return reply
