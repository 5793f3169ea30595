"""`apply` (PROTOCOL.md v3): the writes an extractor decided on (`reconcile`), all at once.

Every action is first checked as its own operation would check it (`prepare_add`,
`prepare_update`, the target of a supersede or delete live, visible and not a state); any
failure refuses the whole batch, naming the action's index, and writes nothing. Then all of
them run in one Redis script (`Batches.apply`), which checks each precondition again before it
writes anything: a memory deleted or changed meanwhile refuses the batch there too. Events
follow the write, one per memory changed, as the separate operations would publish them.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import msgspec

from contracts.messages import (
    AddRequest,
    Applied,
    ApplyAction,
    ApplyAdd,
    ApplyDelete,
    ApplyReply,
    ApplyRequest,
    ApplySupersede,
    ApplyUpdate,
)
from contracts.types import STATE_TYPE
from handlers.errors import (
    Conflict,
    HandlerError,
    InvalidRequest,
    NotFound,
    Unavailable,
    VersionConflict,
)
from handlers.ops.deps import Deps
from handlers.ops.events import publish_event
from handlers.ops.history import entry
from handlers.ops.registry import handles
from handlers.ops.replies import one_of
from handlers.ops.workspaces import state_is_immutable
from handlers.ops.writes import (
    PreparedUpdate,
    missing_memory,
    prepare_add,
    prepare_update,
    superseded_already,
    version_moved,
)
from handlers.store.batch import Refused, Step
from handlers.store.reads import record_row
from handlers.store.record import Record

# An action's tag, as `Applied.action` names it.
ActionKind = Literal["add", "update", "supersede", "delete"]
_KINDS: tuple[ActionKind, ...] = get_args(ActionKind)


class _Planned(NamedTuple):
    """An action made ready: its steps, and what to announce once they ran."""

    steps: list[Step]
    added: Record | None = None
    updated: PreparedUpdate | None = None
    # The memory a delete removes.
    deleted: str | None = None
    # The kinds of secret redacted from what it stores.
    redacted: list[str] | None = None


@handles(ApplyRequest)
async def apply(ns: str, req: ApplyRequest, deps: Deps) -> ApplyReply:
    """v4: each memory an action names is read once, and the batch applies only if every
    one is still at the version read when its script runs: of concurrent batches touching
    one memory, exactly one applies and the others are `conflict`, refused whole."""
    _one_action_per_memory(req)
    try:
        return await _apply_once(ns, req, deps)
    except Refused as exc:
        raise _refusal(ns, req, exc) from None


def _one_action_per_memory(req: ApplyRequest) -> None:
    seen: dict[str, int] = {}
    for i, action in enumerate(req.actions):
        if isinstance(action, ApplyAdd):
            continue
        if action.id in seen:
            raise InvalidRequest(
                f"actions[{i}] ({_kind(action)}) acts on memory {action.id!r}, as"
                f" actions[{seen[action.id]}] does: give each memory at most one action."
            )
        seen[action.id] = i


async def _apply_once(ns: str, req: ApplyRequest, deps: Deps) -> ApplyReply:
    now = deps.clock()
    planned = []
    for i, action in enumerate(req.actions):
        try:
            planned.append(await _plan(ns, i, action, req, deps, now))
        except NotFound as exc:
            raise NotFound(f"actions[{i}] ({_kind(action)}): {exc.message}") from None
        except VersionConflict as exc:
            where = f"actions[{i}] ({_kind(action)}): "
            raise VersionConflict(where + exc.message, exc.memory_id, exc.current_version) from None
        except Unavailable:
            raise
        except HandlerError as exc:
            # The contract's refusals are `invalid_request` and `not_found`: a store the
            # caller cannot write to, or metadata too large, refuse the batch as invalid.
            raise InvalidRequest(f"actions[{i}] ({_kind(action)}): {exc.message}") from None
    steps = [step for plan in planned for step in plan.steps]
    out = await deps.store.batches.apply(ns, steps, now, STATE_TYPE)
    return await _announce(ns, req, deps, now, planned, out)


async def _plan(
    ns: str,
    i: int,
    action: ApplyAction,
    req: ApplyRequest,
    deps: Deps,
    now: int,
) -> _Planned:
    if isinstance(action, ApplyUpdate):
        # Checks, as `update` does, that the memory is live and in a store the caller sees.
        upd = msgspec.structs.replace(
            action, agent_id=action.agent_id or req.agent_id, context=action.context or req.context
        )
        prepared = await prepare_update(ns, upd, deps, now)
        step = Step.update(
            i, ns, prepared.old, prepared.new, prepared.vec, now, prepared.entry,
            action.expected_version,
        )  # fmt: skip
        return _Planned([step], updated=prepared, redacted=prepared.secrets.redacted)
    if isinstance(action, ApplyDelete):
        read = await _live_target(ns, action, deps, now)
        gone = entry("deleted", now, req)
        keep_ms = deps.settings.history_after_delete_s * 1000
        step = Step.delete(
            i, ns, action.id, now, gone, keep_ms, STATE_TYPE, action.expected_version, read
        )
        return _Planned([step], deleted=action.id)
    if action.key is not None:
        raise InvalidRequest(
            "an action of apply takes no `key`: add keyed memories with add (a keyed add"
            " replaces the memory holding its key, with expected_version for a conditional"
            " replace)"
        )
    if action.supersedes or action.dedup == "semantic":
        raise InvalidRequest(
            'an action of apply takes neither `supersedes` nor `dedup: "semantic"`: use a'
            ' `supersede` action (`{"action": "supersede", "id": <old>, ...}`), and'
            " `reconcile` to find near-duplicates first"
        )
    add = _as_add(action, req)
    read = 0
    if isinstance(action, ApplySupersede):
        read = await _live_target(ns, action, deps, now)
        # The new memory is always a memory of its own: were it a repeat of a live one,
        # that one would supersede the target, and might be the target itself.
        add = msgspec.structs.replace(add, dedup="none")
    rec, vec, secrets = await prepare_add(ns, add, deps)
    steps = [Step.add(i, ns, rec, vec, now, entry("added", now, add, add.agent_id))]
    if isinstance(action, ApplySupersede):
        closed = entry("superseded", now, add, add.agent_id)
        start = rec.valid_from if rec.valid_from is not None else rec.created_at
        steps.append(
            Step.supersede(
                i, ns, action.id, rec.id, start, now, closed, action.expected_version, read=read
            )
        )
    return _Planned(steps, added=rec, redacted=secrets.redacted)


def _as_add(action: ApplyAdd | ApplySupersede, req: ApplyRequest) -> AddRequest:
    """The action as the `add` it is, with the batch's defaults."""
    fields = {f: getattr(action, f) for f in AddRequest.__struct_fields__}
    fields["workflow_id"] = action.workflow_id or req.workflow_id
    fields["workspace"] = action.workspace or req.workspace
    fields["agent_id"] = action.agent_id or req.agent_id
    fields["context"] = action.context or req.context
    if isinstance(action, ApplySupersede):
        fields["expected_version"] = None  # the superseded memory's, not the new one's
    return AddRequest(**fields)


async def _live_target(ns: str, action: ApplySupersede | ApplyDelete, deps: Deps, now: int) -> int:
    """A live memory in a store the caller sees (else not found, so that no id leaks
    across trust levels), not a state, at the version the action expects, and (for a
    supersede) not superseded already: its version as read. The batch's script checks it
    all again, and that the memory is still at that version."""
    rec = await deps.store.reads.read(ns, action.id, now)
    if rec is None or not deps.access.sees(rec.store):
        raise missing_memory(ns, action.id)
    if rec.type == STATE_TYPE:
        raise state_is_immutable(action.id, _kind(action))
    if action.expected_version is not None and rec.version != action.expected_version:
        raise version_moved(action.id, action.expected_version, rec.version)
    if isinstance(action, ApplySupersede) and rec.superseded_by:
        raise superseded_already(ns, action.id, rec.version)
    return rec.version


def _kind(action: ApplyAction) -> ActionKind:
    return one_of(str(type(action).__struct_config__.tag), _KINDS)


def _refusal(ns: str, req: ApplyRequest, exc: Refused) -> HandlerError:
    """The error of a batch the script refused: its precondition changed after the check."""
    action = req.actions[exc.action]
    where = f"actions[{exc.action}] ({_kind(action)})"
    target = getattr(action, "id", None)
    if exc.why == "missing":
        # It was live when the batch read it: another writer deleted it (or it expired).
        return Conflict(
            f"{where}: memory {target!r} was deleted (or expired) by another writer while the"
            " batch was prepared; nothing was written. Read again and send the batch again"
            " without it."
        )
    if exc.why == "immutable":
        return InvalidRequest(f"{where}: {state_is_immutable(str(target), 'apply').message}")
    if exc.why == "unset":
        return Conflict(f"{where}: the namespace was being set up again; retry the batch.")
    if exc.why in ("version", "superseded"):
        version = int(exc.detail)
        if exc.why == "superseded":
            error = superseded_already(ns, str(target), version)
        else:
            error = version_moved(
                str(target), getattr(action, "expected_version", None) or 0, version
            )
        return VersionConflict(f"{where}: {error.message}", str(target), version)
    if exc.why == "meets":
        return Conflict(
            f"{where}: this add repeats memory {exc.detail!r} (its exact content is live there),"
            " which another action of the batch changes: the two would meet on one memory."
            " Nothing was written: drop one of the two actions, or add with"
            ' `dedup: "none"`.'
        )
    if exc.why == "changed":
        version = int(exc.detail)
        return VersionConflict(
            f"{where}: memory {target!r} changed while the batch was prepared (it is at version"
            f" {version} now); nothing was written. Read it again and send the batch again if"
            " it still applies.",
            str(target),
            version,
        )
    return Conflict(f"{where}: nothing was written ({exc.why}); retry the batch.")


async def _announce(
    ns: str,
    req: ApplyRequest,
    deps: Deps,
    now: int,
    planned: list[_Planned],
    out: list[object],
) -> ApplyReply:
    """The reply, and each write's events, in action order (`out`: each step's result)."""
    results: list[Applied] = []

    at = 0
    for i, (action, plan) in enumerate(zip(req.actions, planned, strict=True)):
        got, at = out[at : at + len(plan.steps)], at + len(plan.steps)
        kind = _kind(action)
        if plan.updated is not None:
            new = plan.updated.new
            by = getattr(action, "agent_id", None) or req.agent_id
            await publish_event(deps, ns, "updated", new, now, agent_id=by)
            results.append(Applied(index=i, id=new.id, action=kind))
            continue
        if plan.deleted is not None:
            rows = got[0]
            gone = record_row(rows[0]) if isinstance(rows, list) else None
            if gone is not None:
                await publish_event(deps, ns, "deleted", gone, now)
            results.append(Applied(index=i, id=plan.deleted, action=kind))
            continue
        repeat = record_row(got[0]) if isinstance(got[0], list) else None
        if repeat is not None:  # an add that repeated a live memory: its mention counted
            await publish_event(deps, ns, "updated", repeat, now)
            results.append(Applied(index=i, id=repeat.id, action=kind))
            continue
        rec = plan.added
        assert rec is not None  # neither an update nor a delete: an add or a supersede
        await publish_event(deps, ns, "added", rec, now)
        if len(got) > 1 and isinstance(got[1], list):
            old = record_row(got[1][0])
            if old is not None:
                await publish_event(deps, ns, "updated", old, now, agent_id=rec.agent_id)
        results.append(Applied(index=i, id=rec.id, action=kind))
    redacted = list(dict.fromkeys(k for plan in planned for k in plan.redacted or ()))
    if redacted:
        return ApplyReply(results=results, redacted=redacted)
    return ApplyReply(results=results)
