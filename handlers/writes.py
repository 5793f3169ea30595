"""Write operations: add, update, delete, clear_by_type. Each change publishes its events."""

from __future__ import annotations

import hashlib

import numpy as np

from contracts.messages import (
    AddReply,
    AddRequest,
    ClearByTypeReply,
    ClearByTypeRequest,
    DeleteReply,
    DeleteRequest,
    UpdateReply,
    UpdateRequest,
)
from contracts.types import TypeConfig
from handlers.deps import (
    Deps,
    check_content,
    check_metadata,
    publish_event,
    query_vector,
    type_config,
)
from handlers.errors import NotFound
from handlers.ids import new_id
from handlers.ranking import similarity
from handlers.records import expiry_dt, ms_to_dt
from handlers.schema import GENERAL, PERMANENT_MS, read_filter
from handlers.scoping import ReadScope, storage_workflow
from handlers.store import Repeat

CLEAR_BATCH = 500


def content_hash(type_: str, workflow_id: str | None, content: str) -> str:
    """Exact-dedup key: the normalised content (case and runs of whitespace ignored) within
    one type and one scope (a workflow, or general)."""
    normal = " ".join(content.lower().split())
    raw = f"{type_}\0{workflow_id or ''}\0{normal}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def _repeat_reply(rep: Repeat) -> AddReply:
    return AddReply(
        id=rep.id,
        workflow_id=rep.workflow_id,
        importance=rep.importance,
        expires_at=expiry_dt(rep.expires_ms),
        duplicate_of=rep.id,
        mention_count=rep.mention_count,
    )


async def _announce_repeat(ns: str, rep: Repeat, deps: Deps, now: int) -> AddReply:
    await publish_event(
        deps,
        ns,
        "updated",
        memory_id=rep.id,
        type_=rep.type,
        workflow_id=rep.workflow_id,
        agent_id=rep.agent_id,
        content=rep.content,
        at_ms=now,
    )
    return _repeat_reply(rep)


async def _near_duplicate(
    ns: str, type_: str, workflow_id: str | None, vec: np.ndarray, threshold: float, deps: Deps
) -> Repeat | None:
    """Count a mention of the closest live memory of the same type and scope, if it is at
    least `threshold` similar."""
    scope = ReadScope(workflow_id=workflow_id, general=workflow_id is None)
    where = read_filter(None, scope, types=[type_])
    now = deps.clock()
    for cand in await deps.store.knn(ns, vec, where, 3):
        if int(cand.fields["expires_at"]) <= now:
            continue
        if similarity(cand.distance or 0.0) < threshold:
            return None
        count = await deps.store.mention(ns, cand.id, now)
        fields = await deps.store.read(ns, cand.id, now) if count else None
        if fields is None:
            continue
        return Repeat(
            id=cand.id,
            mention_count=count or 1,
            workflow_id=fields.get("wf"),
            importance=float(fields["importance"]),
            expires_ms=int(fields["expires_at"]),
            agent_id=fields.get("agent_id"),
            content=fields["content"],
            type=fields["type"],
        )
    return None


async def add(ns: str, req: AddRequest, deps: Deps) -> AddReply:
    cfg = type_config(deps.types, req.type)
    check_content(req.content)
    metadata = check_metadata(req.metadata)
    _, meta = await deps.store.namespace(ns)
    vec = await query_vector(ns, meta, req.content, req.embedding, deps)
    workflow_id = storage_workflow(cfg, req.scope, req.workflow_id)
    if req.dedup != "semantic":
        return await _write(ns, req, deps, cfg, workflow_id, vec, metadata)
    # The near-duplicate check and the write are one step across handlers: two similar adds
    # at the same moment must not both miss each other. Exact repeats need no lock (Lua).
    async with deps.store.exclusive(ns, f"dedup:{req.type}:{workflow_id or ''}"):
        threshold = req.dedup_threshold or deps.dedup_threshold
        near = await _near_duplicate(ns, req.type, workflow_id, vec, threshold, deps)
        if near is not None:
            return await _announce_repeat(ns, near, deps, deps.clock())
        return await _write(ns, req, deps, cfg, workflow_id, vec, metadata)


async def _write(
    ns: str,
    req: AddRequest,
    deps: Deps,
    cfg: TypeConfig,
    workflow_id: str | None,
    vec: np.ndarray,
    metadata: bytes | None,
) -> AddReply:
    importance = cfg.importance if req.importance is None else req.importance
    ttl_s = cfg.ttl_s if req.ttl_s is None else req.ttl_s
    now = deps.clock()
    expires = now + ttl_s * 1000 if ttl_s else PERMANENT_MS
    memory_id = new_id(now)
    chash = "" if req.dedup == "none" else content_hash(req.type, workflow_id, req.content)
    fields: dict[str, str | bytes | float | int] = {
        "id": memory_id,
        "type": req.type,
        "content": req.content,
        "importance": importance,
        "general": GENERAL if workflow_id is None else "0",
        "created_at": now,
        "updated_at": now,
        "expires_at": expires,
        "mention_count": 1,
        "embedding": vec.astype(np.float32).tobytes(),
    }
    optional = {
        "tags": ",".join(req.tags),
        "tagtext": " ".join(req.tags),
        "wf": workflow_id,
        "agent_id": req.agent_id,
        "source": req.source,
        "metadata": metadata,
        "chash": chash,
    }
    fields.update({k: v for k, v in optional.items() if v})
    repeat = await deps.store.add(ns, fields, expires, chash, now)
    if repeat is not None:
        return await _announce_repeat(ns, repeat, deps, now)
    await publish_event(
        deps,
        ns,
        "added",
        memory_id=memory_id,
        type_=req.type,
        workflow_id=workflow_id,
        agent_id=req.agent_id,
        content=req.content,
        at_ms=now,
    )
    return AddReply(
        id=memory_id,
        workflow_id=workflow_id,
        importance=importance,
        expires_at=expiry_dt(expires),
    )


async def update(ns: str, req: UpdateRequest, deps: Deps) -> UpdateReply:
    now = deps.clock()
    missing = NotFound(
        f'Memory "{req.id}" not found (it may have expired or been deleted).'
        f" Use mem.{ns}.list or mem.{ns}.search to find current ids."
    )
    rec = await deps.store.read(ns, req.id, now)
    if rec is None:
        raise missing
    changes: dict[str, str | bytes | float | int] = {"updated_at": now}
    old_chash = rec.get("chash", "")
    new_chash = old_chash
    content = rec["content"]
    if req.content is not None and req.content != content:
        check_content(req.content)
        _, meta = await deps.store.namespace(ns)
        vec = await query_vector(ns, meta, req.content, None, deps)
        content = req.content
        changes["content"] = content
        changes["embedding"] = vec.astype(np.float32).tobytes()
        if old_chash:  # a memory added with dedup "none" stays out of dedup
            new_chash = content_hash(rec["type"], rec.get("wf"), content)
            changes["chash"] = new_chash
    if req.tags is not None:
        changes["tags"] = ",".join(req.tags)
        changes["tagtext"] = " ".join(req.tags)
    importance = float(rec["importance"]) if req.importance is None else req.importance
    changes["importance"] = importance
    expires = int(rec["expires_at"])
    expiry = "keep"
    if req.ttl_s is not None:
        expires = now + req.ttl_s * 1000 if req.ttl_s else PERMANENT_MS
        expiry = str(expires) if req.ttl_s else "persist"
        changes["expires_at"] = expires
    applied = await deps.store.update(
        ns,
        req.id,
        changes,
        expiry=expiry,
        old_chash=old_chash,
        new_chash=new_chash,
        now_ms=now,
    )
    if not applied:
        raise missing
    await publish_event(
        deps,
        ns,
        "updated",
        memory_id=req.id,
        type_=rec["type"],
        workflow_id=rec.get("wf"),
        agent_id=req.agent_id or rec.get("agent_id"),
        content=content,
        at_ms=now,
    )
    return UpdateReply(
        id=req.id,
        workflow_id=rec.get("wf"),
        importance=importance,
        updated_at=ms_to_dt(now),
        expires_at=expiry_dt(expires),
    )


async def _delete_and_announce(ns: str, ids: list[str], deps: Deps) -> tuple[int, list[str]]:
    now = deps.clock()
    rows = await deps.store.delete(ns, ids, now)
    missing = []
    for mid, row in zip(ids, rows, strict=True):
        if row is None:
            missing.append(mid)
            continue
        _, type_, workflow_id, agent_id, content = row
        await publish_event(
            deps,
            ns,
            "deleted",
            memory_id=mid,
            type_=type_,
            workflow_id=workflow_id,
            agent_id=agent_id,
            content=content,
            at_ms=now,
        )
    return len(ids) - len(missing), missing


async def delete(ns: str, req: DeleteRequest, deps: Deps) -> DeleteReply:
    deleted, missing = await _delete_and_announce(ns, list(dict.fromkeys(req.ids)), deps)
    return DeleteReply(deleted=deleted, missing=missing)


async def clear_by_type(ns: str, req: ClearByTypeRequest, deps: Deps) -> ClearByTypeReply:
    type_config(deps.types, req.type)
    if req.scope == "general":
        scope = ReadScope(workflow_id=None, general=True)
    else:
        scope = ReadScope(workflow_id=req.workflow_id, general=False)
    total = 0
    while True:
        where = read_filter(deps.clock(), scope, types=[req.type])
        ids = await deps.store.ids(ns, where, CLEAR_BATCH)
        if not ids:
            break
        deleted, _ = await _delete_and_announce(ns, ids, deps)
        total += deleted
        if deleted == 0:
            # Everything we saw was removed by someone else meanwhile; the index has caught up.
            break
    return ClearByTypeReply(deleted=total)
