"""`export` and `import` (PROTOCOL v2 "Export and import", this project's extension): a
namespace's memories out, whole and page by page, and back in as they were: the same ids,
times, expiry, counters and stores. Both need full trust (they cross every store)."""

from __future__ import annotations

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
            f.record,
            f.access_count,
            f.last_accessed_ms,
            [float(x) for x in vec] if vec is not None else None,
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


def _record(m: ImportedMemory, deps: Deps) -> Record:
    """The stored form of an imported memory, checked as an add checks it."""
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
        content_hash=m.content_hash or "",
    )
    if m.content_hash is None:
        rec = msgspec.structs.replace(rec, content_hash=content_hash(rec))
    if rec.idle_ttl_s is not None:
        # Idle: it expires that long after its last access, as where it was exported.
        rec = msgspec.structs.replace(
            rec, **lifetime(_last_access(m, rec), PERMANENT_MS, rec.idle_ttl_s)
        )
    return rec


def _last_access(m: ImportedMemory, rec: Record) -> int:
    last = dt_to_ms(m.last_accessed_at) if m.last_accessed_at else 0
    return max(rec.updated_at, last)


async def _vectors(
    ns: str, todo: list[tuple[ImportedMemory, Record]], deps: Deps
) -> list[np.ndarray]:
    """Each memory's vector: its exported one where given (checked as an `add`'s), else this
    handler's embedding of its content, in one batch."""
    meta = await deps.store.meta(ns)
    out: list[np.ndarray | None] = []
    for m, _ in todo:
        if m.embedding is None:
            out.append(None)
            continue
        try:
            out.append(given_vector(ns, meta, m.embedding))
        except InvalidRequest as exc:
            raise InvalidRequest(
                f"Memory {m.id!r}: {exc.message} Import into a namespace of the same embedder,"
                " or leave `embedding` out (export without --embeddings) to embed the content."
            ) from None
    texts = [rec.content for (m, rec) in todo if m.embedding is None]
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
    checked = [(m, _record(m, deps)) for m in req.memories]
    present = await deps.store.transfer.existing(ns, ids)
    todo: list[tuple[ImportedMemory, Record]] = []
    for m, rec in checked:
        if expiry(rec, _last_access(m, rec)) <= now:
            reply.expired.append(m.id)
        elif m.id in present:
            reply.existing.append(m.id)
        elif rec.type == STATE_TYPE and rec.workspace is None:
            raise InvalidRequest(f"State {m.id!r} has no workspace; a state lives in one.")
        else:
            todo.append((m, rec))
    if not todo:
        return reply
    vectors = await _vectors(ns, todo, deps)
    for (m, rec), vec in zip(todo, vectors, strict=True):
        added = Entry(
            event="added", at=rec.created_at, agent_id=rec.agent_id, session_id=rec.session_id
        )
        last = dt_to_ms(m.last_accessed_at) if m.last_accessed_at else None
        if await deps.store.transfer.write(ns, rec, vec, m.access_count, last, added):
            reply.created.append(rec.id)
            await publish_event(deps, ns, "added", rec, now)
        else:  # written meanwhile (the same import, run twice at once)
            reply.existing.append(rec.id)
    return reply
