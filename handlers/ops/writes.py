"""Write operations: add, update, delete, clear_by_type. Each change publishes its events."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import msgspec
import numpy as np
from redisvl.query.filter import FilterExpression

from contracts.messages import (
    AddReply,
    AddRequest,
    ClearByTypeReply,
    ClearByTypeRequest,
    CompactRequest,
    DeleteReply,
    DeleteRequest,
    UpdateReply,
    UpdateRequest,
    compose_content,
)
from contracts.types import STATE_TYPE
from handlers.errors import Conflict, Forbidden, InvalidRequest, NotFound, VersionConflict
from handlers.ops.checks import (
    check_content,
    check_metadata,
    check_narrative,
    check_no_nul,
    type_config,
    unseen_ids,
)
from handlers.ops.clock import expires_ms, expiry_dt, ms_to_dt, opt_ms
from handlers.ops.deps import Deps
from handlers.ops.erasure import check_may_erase, erase
from handlers.ops.events import publish_event
from handlers.ops.history import entry, update_changes
from handlers.ops.ranking import similarity
from handlers.ops.registry import handles
from handlers.ops.replies import as_record
from handlers.ops.scoping import read_scope, storage_workflow
from handlers.ops.secrets import Secrets
from handlers.ops.vectors import request_vector
from handlers.ops.workspaces import state_is_immutable, workspace_not_found
from handlers.store.batch import Refused, Step
from handlers.store.filters import ReadScope, in_store, read_filter
from handlers.store.ids import derived_id, new_id
from handlers.store.reads import record_row
from handlers.store.record import PERMANENT_MS, Entry, Record, lifetime
from handlers.store.record import expiry as record_expiry
from handlers.store.writes import AlreadyApplied, Immutable, Stale

# clear_by_type deletes in batches this small, so that Redis (which runs each batch's script
# alone) keeps serving others between them, and stops after CLEAR_BUDGET_S, so that one call
# ends well before a caller's timeout; the reply says how many are left for the next call.
CLEAR_BATCH = 100
CLEAR_BUDGET_S = 1.0


def content_hash(rec: Record) -> str:
    """Exact-dedup key of a memory: its normalised content (case and runs of whitespace
    ignored) within one type, one scope (a workflow, or general), one workspace (or none) and
    one store. An observation (one with a `title`) is the same when its title and facts are,
    whatever its narrative says."""
    if rec.title is not None:
        # The facts as a set: the same facts in another order are the same observation.
        parts = [" ".join(part.lower().split()) for part in (rec.title, *rec.facts)]
        normal = "\0".join([parts[0], *sorted(parts[1:])])
        normal = f"title\0{normal}"  # never equal to a plain content's key
    else:
        normal = " ".join(rec.content.lower().split())
    # Outside any workspace the key is what it was before workspaces existed.
    where = f"{rec.workflow_id or ''}"
    if rec.workspace is not None:
        where += f"\0ws\0{rec.workspace}"
    # In the private store too (a full-trust agent's default).
    if rec.store != "private":
        where += f"\0store\0{rec.store}"
    raw = f"{rec.type}\0{where}\0{normal}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def _added(rec: Record, expires_ms: int, repeated: bool = False) -> AddReply:
    """The reply to an add that stored `rec`, or that repeated it (mention counted); its
    keys expire at `expires_ms`."""
    return AddReply(
        id=rec.id,
        workflow_id=rec.workflow_id,
        importance=rec.importance,
        expires_at=expiry_dt(expires_ms),
        duplicate_of=rec.id if repeated else None,
        mention_count=rec.mention_count,
        version=rec.version,
    )


def superseded_already(ns: str, memory_id: str, version: int) -> VersionConflict:
    return VersionConflict(
        f'Memory "{memory_id}" is superseded already (version {version}): a memory is'
        " superseded once, and nothing was written. Use mem."
        f"{ns}.get to see what supersedes it (`superseded_by`), and supersede that one.",
        memory_id,
        version,
    )


def version_moved(memory_id: str, expected: int, version: int) -> VersionConflict:
    return VersionConflict(
        f'Memory "{memory_id}" is at version {version}, not {expected}: it changed since you'
        " read it, and nothing was written. Read it again and retry with"
        f" expected_version {version} if your change still applies.",
        memory_id,
        version,
    )


async def _check_current(ns: str, ids: list[str], deps: Deps) -> None:
    """Refuse (`conflict`) a supersede of memories that are superseded already."""
    targets = list(dict.fromkeys(ids))
    read = await deps.store.reads.fetch(ns, targets, deps.clock(), count_access=False)
    for mid, found in zip(targets, read, strict=True):
        rec = found.record if found is not None else None
        if rec is not None and rec.superseded_by and deps.access.sees(rec.store):
            raise superseded_already(ns, mid, rec.version)


async def _write_superseding(
    ns: str, req: AddRequest, rec: Record, vec: np.ndarray, deps: Deps
) -> AddReply:
    """An add with `supersedes`: the memory (or the live one it repeats) and the supersede
    of every target in one atomic step (`Batches.apply`), so that a target superseded by
    another writer meanwhile refuses the whole add (`conflict`), and two adds superseding
    one memory leave one successor. Targets missing or unseen are reported in `missing`."""
    now = rec.created_at
    targets = [mid for mid in dict.fromkeys(req.supersedes) if mid != rec.id]
    missing = await unseen_ids(ns, targets, deps)
    added = entry("added", now, req, req.agent_id)
    closed = entry("superseded", now, req, req.agent_id)
    start = rec.valid_from if rec.valid_from is not None else rec.created_at
    while True:
        live = [mid for mid in targets if mid not in missing]
        steps = [Step.add(0, ns, rec, vec, now, added)]
        steps += [
            Step.supersede(i, ns, mid, rec.id, start, now, closed, follows=True)
            for i, mid in enumerate(live, 1)
        ]
        try:
            out = await deps.store.batches.apply(ns, steps, now, STATE_TYPE)
            break
        except Refused as exc:
            mid = live[exc.action - 1] if exc.action else rec.id
            if exc.why == "missing":
                missing.add(mid)  # gone since: the others are superseded without it
            elif exc.why == "exists":  # the same durable add, written meanwhile
                done = await deps.store.reads.read(ns, rec.id, now)
                if done is None:
                    return _added(rec, record_expiry(rec, now))
                return _added(done, await _unpushed(ns, done, deps))
            elif exc.why == "superseded":
                raise superseded_already(ns, mid, int(exc.detail)) from None
            elif exc.why == "immutable":
                raise state_is_immutable(mid, "supersedes") from None
            else:
                raise Conflict(
                    "The namespace was being set up again while this add was written;"
                    " nothing was written: retry it."
                ) from None
    repeat = record_row(out[0]) if isinstance(out[0], list) else None
    if repeat is not None:
        reply = await _repeated(ns, repeat, deps, now)
    else:
        reply = _added(rec, record_expiry(rec, now))
        await publish_event(deps, ns, "added", rec, now)
    for mid, got in zip(live, out[1:], strict=True):
        old = record_row(got[0]) if isinstance(got, list) and isinstance(got[0], list) else None
        if old is None:
            reply.missing.append(mid)  # the memory it repeated is that one: none supersedes itself
        else:
            reply.superseded.append(mid)
            await publish_event(deps, ns, "updated", old, now, agent_id=req.agent_id)
    reply.missing.extend(mid for mid in req.supersedes if mid in missing or mid == rec.id)
    return reply


async def _repeated(ns: str, rec: Record, deps: Deps, now: int) -> AddReply:
    await publish_event(deps, ns, "updated", rec, now)
    return _added(rec, await _unpushed(ns, rec, deps), repeated=True)


async def _unpushed(ns: str, rec: Record, deps: Deps) -> int:
    """When a memory that this request wrote without pushing its expiry (a mention, or a
    durable write applied before) expires: an idle one's keys are asked, as reads move
    them; any other's is its record's."""
    if rec.idle_ttl_s is None:
        return rec.expires_at
    [at] = await deps.store.reads.expiries(ns, [rec.id])
    return record_expiry(rec, rec.updated_at) if at is None else at


async def _near_duplicate(
    ns: str, req: AddRequest, workflow_id: str | None, store: str, vec: np.ndarray, deps: Deps
) -> Record | None:
    """Count a mention of the closest live, current memory of the same type, scope and
    store, if it is at least the threshold similar; that memory after the mention."""
    threshold = req.dedup_threshold or deps.settings.dedup_threshold
    scope = ReadScope(workflow_id=workflow_id, general=workflow_id is None, workspace=req.workspace)
    where = read_filter(None, scope, types=[req.type], current=True) & in_store(store)
    now = deps.clock()
    for cand in await deps.store.queries.knn(ns, vec, where, 3, ended_by=now):
        if cand.expires_at <= now:
            continue
        if similarity(cand.distance or 0.0) < threshold:
            return None
        mentioned = entry("mentioned", now, req, req.agent_id)
        # Without a workspace the filter cannot exclude other workspaces' memories: the
        # mention checks that the candidate has none either.
        rec = await deps.store.writes.mention(ns, cand.id, now, mentioned, req.workspace)
        if rec is not None:
            return rec
    return None


def target_store(req: AddRequest, deps: Deps) -> str:
    """The store an add writes to: the one asked for, if the caller can see it, else the
    caller's default."""
    access = deps.access
    store = req.store or access.default_store or ""
    if not access.sees(store):
        raise Forbidden(
            f'At trust "{access.trust}" you cannot write to the {store or "any"} store; you'
            f" see: {', '.join(access.visible) or 'none'}. Leave `store` out to write to"
            f" {access.default_store or 'none'}."
        )
    return store


class PreparedAdd(NamedTuple):
    """A new memory as an add would write it, checked, with its vector."""

    rec: Record
    vec: np.ndarray
    # What was redacted from its text.
    secrets: Secrets


@handles(AddRequest)
async def add(ns: str, req: AddRequest, deps: Deps) -> AddReply:
    write = deps.write
    durable_id = None if write is None else derived_id(write.published_ms, write.request_id)
    if durable_id is not None and (
        done := await deps.store.reads.read(ns, durable_id, deps.clock())
    ):
        # A durable add applied before (its mark lost with a handler): nothing to do, no
        # embedding, and no dedup, which would count the memory as a mention of itself.
        return _added(done, await _unpushed(ns, done, deps))
    if req.supersedes and req.type != STATE_TYPE:
        # Checked before the write: a state never changes, not even its `superseded_by`.
        found = await deps.store.reads.types(ns, req.supersedes)
        for mid, type_ in zip(req.supersedes, found, strict=True):
            if type_ == STATE_TYPE:
                raise state_is_immutable(mid, "supersedes")
    rec, vec, secrets = await prepare_add(ns, req, deps, durable_id)
    if req.supersedes and req.dedup != "semantic":
        reply = await _write_superseding(ns, req, rec, vec, deps)
    elif req.dedup != "semantic":
        reply = await _write(ns, req, rec, vec, deps)
    else:
        await _check_current(ns, req.supersedes, deps)
        # The near-duplicate check and the write are one step across handlers: two similar
        # adds at the same moment must not both miss each other. Exact repeats need no lock.
        lock = f"dedup:{req.type}:{rec.workflow_id or ''}:{rec.store}"
        async with deps.store.exclusive(ns, lock):
            near = await _near_duplicate(ns, req, rec.workflow_id, rec.store, vec, deps)
            if near is not None:
                reply = await _repeated(ns, near, deps, deps.clock())
            else:
                reply = await _write(ns, req, rec, vec, deps)
    if req.supersedes and req.dedup == "semantic":
        await _supersede(ns, req, reply, deps, rec.valid_from or rec.created_at)
    if secrets.redacted:
        reply = msgspec.structs.replace(reply, redacted=secrets.redacted)
    return reply


async def prepare_add(
    ns: str, req: AddRequest, deps: Deps, memory_id: str | None = None
) -> PreparedAdd:
    """Check an add as its own operation does (type, store, workspace, texts, secrets,
    metadata) and make its record (with `memory_id`, else a new id) and vector."""
    if req.type == STATE_TYPE:
        raise InvalidRequest(
            "States are not added with add: use create_state (a state needs a workspace and"
            " a name unique in it)."
        )
    if req.key is not None and (req.supersedes or req.dedup == "semantic"):
        raise InvalidRequest(
            "An add with a `key` replaces the current memory holding that key: it takes"
            ' neither `supersedes` nor `dedup: "semantic"`. Leave the key out to supersede'
            " or fold near-duplicates."
        )
    store = target_store(req, deps)
    cfg = type_config(deps.settings.types, req.type)
    if req.workspace is not None and not await deps.store.spaces.workspace_exists(
        ns, req.workspace
    ):
        raise workspace_not_found(req.workspace)
    content = req.content or ""  # the request composed it from the title when left out
    check_narrative(req.narrative)
    check_no_nul(title=req.title, narrative=req.narrative, facts=req.facts)
    composed = req.title is not None and content == compose_content(
        req.title, req.narrative, req.facts
    )
    # Before anything is stored or embedded: what is kept is what was scanned.
    secrets = Secrets(deps.settings.secrets)
    req, content = _without_secrets(req, content, composed, secrets)
    check_content(content, composed=composed)
    metadata = check_metadata(secrets.json("metadata", req.metadata))
    vec = await request_vector(ns, deps, text=content, given=req.embedding)
    now = deps.clock()
    workflow_id = storage_workflow(cfg, req.scope, req.workflow_id)
    rec = as_record(
        req,
        id=memory_id or new_id(now),
        content=content,
        tags=tuple(req.tags),
        importance=cfg.importance if req.importance is None else req.importance,
        workflow_id=workflow_id,
        created_at=now,
        updated_at=now,
        **lifetime(
            now,
            expires_ms(now, cfg.ttl_s if req.ttl_s is None else req.ttl_s),
            cfg.idle_ttl_s if req.idle_ttl_s is None else req.idle_ttl_s,
        ),
        metadata=metadata,
        session_id=req.context.session_id if req.context else None,
        store=store,
    )
    # A keyed memory is named by its key, not its content: it is outside exact dedup.
    if req.dedup != "none" and req.key is None:
        rec = msgspec.structs.replace(rec, content_hash=content_hash(rec))
    return PreparedAdd(rec, vec, secrets)


def _without_secrets(
    req: AddRequest, content: str, composed: bool, secrets: Secrets
) -> tuple[AddRequest, str]:
    """The request and its content with the secrets in every text it stores redacted (or
    refused: `Secrets`); a composed content is composed again from the redacted parts.
    `metadata` is scanned by the caller, with its check. A `key` (v4) is a name: one holding
    a secret is refused."""
    if req.key is not None:
        secrets.name("key", req.key)
    title = secrets.optional("title", req.title)
    narrative = secrets.optional("narrative", req.narrative)
    facts = secrets.texts("facts", req.facts)
    if composed and title is not None:
        content = compose_content(title, narrative, facts)
    else:
        content = secrets.text("content", content)
    source = secrets.optional("source", req.source)
    tags = secrets.tags("tags", req.tags)
    files = secrets.texts("related_files", req.related_files)
    people = secrets.texts("related_people", req.related_people)
    if secrets.redacted is None:
        return req, content
    return msgspec.structs.replace(
        req,
        title=title,
        narrative=narrative,
        facts=facts,
        content=content,
        source=source,
        tags=tags,
        related_files=files,
        related_people=people,
    ), content


async def _write(ns: str, req: AddRequest, rec: Record, vec: np.ndarray, deps: Deps) -> AddReply:
    now = rec.created_at
    try:
        done = await deps.store.writes.add(
            ns, rec, vec, now, entry("added", now, req, req.agent_id), req.expected_version
        )
    except AlreadyApplied:
        # The same durable add, written meanwhile by another handler (its claim lapsed while
        # this one was still at work; `add` checks first otherwise): nothing more to do.
        written = await deps.store.reads.read(ns, rec.id, now)
        if written is None:
            return _added(rec, record_expiry(rec, now))
        return _added(written, await _unpushed(ns, written, deps))
    except Stale as exc:
        raise key_moved(str(req.key), req.expected_version or 0, exc) from None
    if done.repeated:
        return await _repeated(ns, done.record, deps, now)
    if done.replaced:
        await publish_event(deps, ns, "updated", done.record, now, agent_id=req.agent_id)
        # Its keys' PEXPIREAT as the replace wrote them (the add's `new_hash`).
        replaced = _added(done.record, record_expiry(done.record, now))
        return msgspec.structs.replace(replaced, replaced=True)
    await publish_event(deps, ns, "added", rec, now)
    # Its keys' PEXPIREAT as the add wrote them (`new_hash`).
    return _added(rec, record_expiry(rec, now))


def key_moved(key: str, expected: int, exc: Stale) -> VersionConflict:
    """A keyed add that found its key's memory at another version than expected."""
    if exc.version == 0:
        return VersionConflict(
            f"No current memory holds key {key!r}, not at version {expected}: nothing was"
            " written. Add it with expected_version 0 (or none) to create it.",
            None,
            0,
        )
    if expected == 0:
        hint = "expected_version 0 asks that none does"
    else:
        hint = f"not at version {expected}"
    return VersionConflict(
        f'Key {key!r} is held by memory "{exc.memory_id}" at version {exc.version} ({hint}):'
        " nothing was written. Read it, then add again with expected_version"
        f" {exc.version} to replace it if your change still applies.",
        exc.memory_id,
        exc.version,
    )


async def _supersede(ns: str, req: AddRequest, reply: AddReply, deps: Deps, start_ms: int) -> None:
    """Mark the memories the add replaces (a memory never supersedes itself, nor one in a
    store the caller cannot see: that is missing), closing their validity at `start_ms`,
    when the new one holds from."""
    now = deps.clock()
    ids = [mid for mid in dict.fromkeys(req.supersedes) if mid != reply.id]
    unseen = await unseen_ids(ns, ids, deps)
    if unseen:
        ids = [mid for mid in ids if mid not in unseen]
        reply.missing.extend(unseen)
    done = await deps.store.writes.supersede(
        ns, ids, reply.id, start_ms, now, entry("superseded", now, req, req.agent_id)
    )
    for mid, rec in zip(ids, done, strict=True):
        if isinstance(rec, int):
            raise superseded_already(ns, mid, rec)
        if rec is None:
            reply.missing.append(mid)
        else:
            reply.superseded.append(mid)
            await publish_event(deps, ns, "updated", rec, now, agent_id=req.agent_id)
    reply.missing.extend(mid for mid in req.supersedes if mid == reply.id)


# The request fields of an update, each one's last durable write marked on the memory.
_UPDATABLE = ("content", "tags", "importance", "ttl_s", "valid_from", "valid_until")
# Those where null is a value (an open bound), and leaving out is UNSET.
_NULLABLE = frozenset({"valid_from", "valid_until"})


def _given(req: UpdateRequest, name: str) -> bool:
    return getattr(req, name) is not (msgspec.UNSET if name in _NULLABLE else None)


def _left_out(names: set[str]) -> dict[str, Any]:
    """Request fields that say "unchanged"."""
    return {name: msgspec.UNSET if name in _NULLABLE else None for name in names}


def _mark(position: tuple[int, int]) -> str:
    created, seq = position
    return f"{created}:{seq}"


def _marked(mark: str) -> tuple[int, int]:
    created, _, seq = mark.partition(":")
    return int(created), int(seq or 0)


def missing_memory(ns: str, memory_id: str) -> NotFound:
    return NotFound(
        f'Memory "{memory_id}" not found (it may have expired or been deleted).'
        f" Use mem.{ns}.list or mem.{ns}.search to find current ids."
    )


@handles(UpdateRequest)
async def update(ns: str, req: UpdateRequest, deps: Deps) -> UpdateReply:
    """Change a memory, one update of it at a time across handlers (each reads what the one
    before wrote, so content, vector and dedup key stay one). Durable updates take effect
    in stream order whatever order the handlers apply them in: a field that this write or
    one later in the stream has set already is left as it is (a write left with nothing to
    set changes nothing and announces nothing)."""
    async with deps.store.exclusive(ns, f"update:{req.id}"):
        write = deps.write
        if write is None:
            return await _update(ns, req, deps)
        marks = await deps.store.writes.write_marks(ns, req.id, _UPDATABLE)
        later = {
            name
            for name, mark in zip(_UPDATABLE, marks, strict=True)
            if mark and _marked(mark) >= write.position
        }
        given = {name for name in _UPDATABLE if _given(req, name)}
        if given <= later:
            now = deps.clock()
            rec = await deps.store.reads.read(ns, req.id, now)
            if rec is None or not deps.access.sees(rec.store):
                raise missing_memory(ns, req.id)
            return _updated(rec, rec.updated_at, await _unpushed(ns, rec, deps))
        if later & given:
            req = msgspec.structs.replace(req, **_left_out(later & given))
        at = _mark(write.position)
        return await _update(ns, req, deps, {name: at for name in given - later})


def _updated(rec: Record, at_ms: int, expires_ms: int) -> UpdateReply:
    return UpdateReply(
        id=rec.id,
        workflow_id=rec.workflow_id,
        importance=rec.importance,
        updated_at=ms_to_dt(at_ms),
        expires_at=expiry_dt(expires_ms),
        version=rec.version,
    )


class PreparedUpdate(NamedTuple):
    """A memory as an update would leave it, checked: before and after, the new vector
    when its content changed, and its history entry."""

    old: Record
    new: Record
    vec: np.ndarray | None
    entry: Entry
    secrets: Secrets


async def _update(
    ns: str, req: UpdateRequest, deps: Deps, marks: dict[str, str] | None = None
) -> UpdateReply:
    now = deps.clock()
    old, new, vec, done, secrets = await prepare_update(ns, req, deps, now)
    try:
        version = await deps.store.writes.update(
            ns, old, new, vec, now, done, marks, req.expected_version
        )
    except Stale as exc:
        raise version_moved(req.id, req.expected_version or 0, exc.version) from None
    if version is None:
        raise missing_memory(ns, req.id)
    new = msgspec.structs.replace(new, version=version)
    await publish_event(deps, ns, "updated", new, now, agent_id=req.agent_id)
    # An update is an access: its keys' expiry as the update set it (`update_call`).
    reply = _updated(new, now, record_expiry(new, now))
    if secrets.redacted:
        reply = msgspec.structs.replace(reply, redacted=secrets.redacted)
    return reply


async def prepare_update(ns: str, req: UpdateRequest, deps: Deps, now: int) -> PreparedUpdate:
    """Check an update as its own operation does (a live memory the caller sees, not a
    state; content, secrets, validity) and make the memory as it would leave it."""
    old = await deps.store.reads.read(ns, req.id, now)
    if old is None or not deps.access.sees(old.store):
        raise missing_memory(ns, req.id)
    if old.type == STATE_TYPE:
        raise state_is_immutable(old.id, "update")
    if req.expected_version is not None and old.version != req.expected_version:
        raise version_moved(old.id, req.expected_version, old.version)
    new = msgspec.structs.replace(old, updated_at=now, version=old.version + 1)
    vec = None
    secrets = Secrets(deps.settings.secrets)
    if req.content is not None:
        req = msgspec.structs.replace(req, content=secrets.text("content", req.content))
    if req.tags is not None:
        req = msgspec.structs.replace(req, tags=secrets.tags("tags", req.tags))
    if req.content is not None and req.content != old.content:
        check_content(req.content)
        vec = await request_vector(ns, deps, text=req.content)
        new = msgspec.structs.replace(new, content=req.content)
        # A memory added with dedup "none" stays out of dedup, and a superseded one too (its
        # key went with the superseding: the same text added again is a new, current memory).
        if old.content_hash and old.superseded_by is None:
            new = msgspec.structs.replace(new, content_hash=content_hash(new))
    if req.tags is not None:
        new = msgspec.structs.replace(new, tags=tuple(req.tags))
    if req.importance is not None:
        new = msgspec.structs.replace(new, importance=req.importance)
    if new.idle_ttl_s is not None:
        # An update is an access: an idle memory's expiry moves (to its new TTL's end at most).
        cap = new.ttl_until or PERMANENT_MS
        cap = cap if req.ttl_s is None else expires_ms(now, req.ttl_s)
        new = msgspec.structs.replace(new, **lifetime(now, cap, new.idle_ttl_s))
    elif req.ttl_s is not None:
        new = msgspec.structs.replace(new, expires_at=expires_ms(now, req.ttl_s))
    new = _revalidated(req, new)
    done = entry("updated", now, req, req.agent_id, update_changes(old, new))
    return PreparedUpdate(old, new, vec, done, secrets)


def _revalidated(req: UpdateRequest, new: Record) -> Record:
    """`new` with the update's validity bounds (null opens one), checked together with the
    bound it keeps."""
    if not isinstance(req.valid_from, msgspec.UnsetType):
        new = msgspec.structs.replace(new, valid_from=opt_ms(req.valid_from))
    if not isinstance(req.valid_until, msgspec.UnsetType):
        new = msgspec.structs.replace(new, valid_until=opt_ms(req.valid_until))
    start, end = new.valid_from, new.valid_until
    if start is not None and end is not None and end <= start:
        raise InvalidRequest(
            f"After this update memory {new.id!r} would hold from {ms_to_dt(start)} until"
            f" {ms_to_dt(end)}: `valid_until` must be after `valid_from`. Give both, or"
            " null to open one."
        )
    return new


async def _delete_and_announce(
    ns: str,
    ids: list[str],
    req: DeleteRequest | ClearByTypeRequest | CompactRequest,
    deps: Deps,
    reason: str | None = None,
) -> tuple[int, list[str]]:
    now = deps.clock()
    keep_ms = deps.settings.history_after_delete_s * 1000
    who = req.agent_id if isinstance(req, DeleteRequest) else None
    gone = msgspec.structs.replace(entry("deleted", now, req, who), reason=reason)
    try:
        deleted = await deps.store.writes.delete(ns, ids, now, gone, keep_ms, STATE_TYPE)
    except Immutable as exc:
        raise state_is_immutable(exc.memory_id, "delete") from None
    missing = []
    for mid, rec in zip(ids, deleted, strict=True):
        if rec is None:
            missing.append(mid)
        else:
            await publish_event(deps, ns, "deleted", rec, now)
    return len(ids) - len(missing), missing


@handles(DeleteRequest)
async def delete(ns: str, req: DeleteRequest, deps: Deps) -> DeleteReply:
    ids = list(dict.fromkeys(req.ids))
    if req.erase:
        check_may_erase(deps)  # full trust: it sees every store, no id is unseen
        return await erase(ns, ids, req, deps)
    unseen = await unseen_ids(ns, ids, deps)
    deleted, missing = await _delete_and_announce(
        ns, [mid for mid in ids if mid not in unseen], req, deps
    )
    # In request order, those of invisible stores among them.
    gone = set(missing) | unseen
    return DeleteReply(deleted=deleted, missing=[mid for mid in ids if mid in gone])


@handles(ClearByTypeRequest)
async def clear_by_type(ns: str, req: ClearByTypeRequest, deps: Deps) -> ClearByTypeReply:
    type_config(deps.settings.types, req.type)
    if req.type == STATE_TYPE:
        raise InvalidRequest(
            "States are immutable: clear_by_type cannot delete them. Use archive_state to hide"
            " a state from list_states."
        )
    stores = deps.access.stores
    if req.scope == "general":
        scope = ReadScope(workflow_id=None, general=True, stores=stores)
    else:
        scope = ReadScope(workflow_id=req.workflow_id, general=False, stores=stores)

    async def batch() -> tuple[list[str], int]:
        where = read_filter(deps.clock(), scope, types=[req.type])
        return await deps.store.queries.ids(ns, where, CLEAR_BATCH)

    return await _delete_in_bounded_calls(ns, req, deps, batch)


async def _delete_in_bounded_calls(
    ns: str,
    req: ClearByTypeRequest | CompactRequest,
    deps: Deps,
    batch: Callable[[], Awaitable[tuple[list[str], int]]],
    reason: str | None = None,
) -> ClearByTypeReply:
    """Delete what `batch` names (ids, and how many are left to delete counting them)
    until it names nothing, or for about CLEAR_BUDGET_S (call again while `remaining`)."""
    total = 0
    stop_at = time.monotonic() + CLEAR_BUDGET_S
    while True:
        ids, left = await batch()
        if not ids:
            return ClearByTypeReply(deleted=total)
        if total and time.monotonic() >= stop_at:  # every call deletes at least one batch
            return ClearByTypeReply(deleted=total, remaining=left)
        deleted, _ = await _delete_and_announce(ns, ids, req, deps, reason)
        total += deleted
        if deleted == 0:
            # Everything we saw was removed by someone else meanwhile; the index has caught up.
            return ClearByTypeReply(deleted=total)


# The index field each `compact` order ranks by (highest kept); `accesses` is read from
# the access counters, which are kept out of the index.
_COMPACT_FIELDS = {"importance": "importance", "recency": "created_at"}


@handles(CompactRequest)
async def compact(ns: str, req: CompactRequest, deps: Deps) -> ClearByTypeReply:
    """Keep the best `keep` current memories of a type in scope and delete the rest, in
    calls bounded like clear_by_type's (call again while `remaining` > 0). A workflow's
    memories with `workflow_id`, a workspace's with `workspace` alone, else the general
    ones; only the stores the caller sees."""
    type_config(deps.settings.types, req.type)
    # As `add` does: a misspelt workspace is an error, not "nothing to compact".
    if req.workspace is not None and not await deps.store.spaces.workspace_exists(
        ns, req.workspace
    ):
        raise workspace_not_found(req.workspace)
    flow = "workflow" if req.workflow_id is not None else "general"
    scope = read_scope(flow, req.workflow_id, req.workspace, deps.access.stores)

    async def batch() -> tuple[list[str], int]:
        now = deps.clock()
        where = read_filter(now, scope, types=[req.type], current=True)
        doomed, matching = await _beyond_keep(ns, where, req, deps, now)
        return doomed, max(0, matching - req.keep)

    return await _delete_in_bounded_calls(ns, req, deps, batch, reason="compacted")


async def _beyond_keep(
    ns: str, where: FilterExpression, req: CompactRequest, deps: Deps, now: int
) -> tuple[list[str], int]:
    """Up to a batch of the memories ranked below the `keep` best, and how many match (the
    current ones at `now`)."""
    queries = deps.store.queries
    field = _COMPACT_FIELDS.get(req.by)
    if field is not None:
        return await queries.ids(
            ns, where, CLEAR_BATCH, sort_by=field, offset=req.keep, ended_by=now
        )
    _, matching = await queries.ids(ns, where, 0, ended_by=now)
    if matching <= req.keep:
        return [], matching
    # Newest first, so that among equally read memories the newer ones stay.
    ids, matching = await deps.store.queries.ids(ns, where, matching, sort_by="created_at")
    counts = await deps.store.reads.access_counts(ns, ids)
    ranked = sorted(zip(ids, counts, strict=True), key=lambda pair: -pair[1])
    return [mid for mid, _ in ranked[req.keep :]][:CLEAR_BATCH], matching
