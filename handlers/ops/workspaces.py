"""Workspaces and states (docs/protocol.md, "Workspaces and states"): nine operations with
lean replies and recovery-oriented errors.

A workspace is a named container (its own Redis hash, see `store.spaces`); memories name it
in their `workspace` field. A state is an immutable save point: a memory of type `state` in
its workspace, whose name is claimed there forever in the same atomic step as its write.
So `search` with `types: ["state", "trace"]` and `workspace` is the seed's searchMemory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import msgspec

from contracts import limits
from contracts.messages import (
    WORKSPACE_FIELDS,
    ArchiveStateRequest,
    ArchiveWorkspaceRequest,
    CreateStateRequest,
    CreateWorkspaceRequest,
    Event,
    ListDataReply,
    ListStatesRequest,
    ListWorkspacesRequest,
    LoadStateRequest,
    LoadWorkspaceRequest,
    NamedItem,
    OkReply,
    State,
    StateReply,
    UpdateWorkspaceRequest,
    Workspace,
    WorkspaceReply,
    preview,
)
from contracts.subjects import event_subject
from contracts.types import STATE_TYPE
from handlers.errors import Conflict, InvalidRequest, NotFound, TooLarge
from handlers.ops.checks import check_content, check_no_nul, check_object, type_config
from handlers.ops.clock import expires_ms, ms_to_dt
from handlers.ops.deps import Deps
from handlers.ops.events import publish_event
from handlers.ops.history import entry
from handlers.ops.registry import handles
from handlers.ops.replies import as_record
from handlers.ops.scoping import storage_workflow
from handlers.ops.secrets import Secrets
from handlers.ops.vectors import request_vector
from handlers.store.ids import new_id
from handlers.store.spaces import NamedEntry, NoWorkspace, StoredWorkspace

# What a workspace's events are filed under (`mem.<ns>.events._general.workspace.<action>`).
WORKSPACE_EVENT_TYPE = "workspace"
_encoder = msgspec.json.Encoder()


def workspace_not_found(name: str) -> NotFound:
    return NotFound(
        f'Workspace "{name}" not found. Use list_workspaces to see available workspaces.'
    )


@contextlib.contextmanager
def _in_workspace(name: str) -> Iterator[None]:
    """Store calls that need the workspace `name` to exist: say so in the seed's words."""
    try:
        yield
    except NoWorkspace:
        raise workspace_not_found(name) from None


def state_not_found(name: str) -> NotFound:
    return NotFound(f'State "{name}" not found. Use list_states to see available states.')


def state_is_immutable(memory_id: str, op: str) -> InvalidRequest:
    return InvalidRequest(
        f'Memory "{memory_id}" is a state, and states are immutable: {op} cannot change it.'
        " Use archive_state to hide it from list_states, or create_state with a new name"
        " to save a newer state."
    )


def _listed(entries: list[NamedEntry], include_archived: bool) -> ListDataReply:
    return ListDataReply(
        data=[
            NamedItem(name=e.name, description=e.description, is_archived=e.is_archived)
            for e in entries
            if include_archived or not e.is_archived
        ]
    )


async def _workspace_event(deps: Deps, ns: str, action: str, ws: StoredWorkspace) -> None:
    """Workspaces are not memories, but their changes are announced the same way."""
    event = Event(
        action=action,
        id=ws.name,
        type=WORKSPACE_EVENT_TYPE,
        workflow_id=None,
        agent_id=None,
        at=ms_to_dt(ws.updated_at),
        preview=preview(ws.description),
    )
    subject = event_subject(ns, None, WORKSPACE_EVENT_TYPE, action)
    await deps.publish(subject, _encoder.encode(event))


# --------------------------------------------------------------------------- workspaces


@handles(CreateWorkspaceRequest)
async def create_workspace(ns: str, req: CreateWorkspaceRequest, deps: Deps) -> OkReply:
    secrets = Secrets(deps.settings.secrets)
    texts = _workspace_texts(vars_of(req), secrets)
    now = deps.clock()
    ws = StoredWorkspace(
        name=secrets.name("name", req.name),
        description=texts["description"],
        root_folder=texts["root_folder"],
        purpose=texts["purpose"],
        workflows=texts["workflows"],
        key_files=texts["key_files"],
        preferences=check_object(texts["preferences"], "preferences", "keep notes in memories"),
        created_at=now,
        updated_at=now,
    )
    created = await deps.store.spaces.create_workspace(ns, ws)
    if created == 0:
        raise Conflict(
            f'Workspace "{req.name}" already exists. Use list_workspaces to see existing'
            " workspaces."
        )
    if created < 0:
        raise TooLarge(
            f"This namespace already holds {limits.MAX_WORKSPACES} workspaces, the most it"
            " may (archived ones count). Reuse one: list_workspaces shows them."
        )
    await _workspace_event(deps, ns, "added", ws)
    return _ok(secrets)


def vars_of(req: CreateWorkspaceRequest | UpdateWorkspaceRequest) -> dict[str, Any]:
    """The workspace fields a request sets (those left out of an update are None)."""
    return {f: v for f in WORKSPACE_FIELDS if (v := getattr(req, f, None)) is not None}


def _workspace_texts(fields: dict[str, Any], secrets: Secrets) -> dict[str, Any]:
    """A workspace's fields with the secrets in its texts redacted (or refused)."""
    scan: dict[str, Any] = {
        "description": secrets.text,
        "root_folder": secrets.text,
        "purpose": secrets.text,
        "workflows": secrets.texts,
        "key_files": secrets.texts,
        "preferences": secrets.json,
    }
    return {f: scan[f](f, v) if f in scan else v for f, v in fields.items()}


def _ok(secrets: Secrets) -> OkReply:
    return OkReply() if secrets.redacted is None else OkReply(redacted=secrets.redacted)


@handles(ListWorkspacesRequest)
async def list_workspaces(ns: str, req: ListWorkspacesRequest, deps: Deps) -> ListDataReply:
    return _listed(await deps.store.spaces.workspaces(ns), req.include_archived)


@handles(LoadWorkspaceRequest)
async def load_workspace(ns: str, req: LoadWorkspaceRequest, deps: Deps) -> WorkspaceReply:
    ws = await deps.store.spaces.workspace(ns, req.name)
    if ws is None:
        raise workspace_not_found(req.name)
    return WorkspaceReply(
        data=Workspace(
            name=ws.name,
            description=ws.description,
            root_folder=ws.root_folder,
            purpose=ws.purpose,
            workflows=ws.workflows,
            key_files=ws.key_files,
            preferences=msgspec.json.decode(ws.preferences),
            is_archived=ws.is_archived,
            created_at=ms_to_dt(ws.created_at),
            updated_at=ms_to_dt(ws.updated_at),
        )
    )


async def _change_workspace(ns: str, name: str, fields: dict[str, Any], deps: Deps) -> None:
    outcome = await deps.store.spaces.update_workspace(ns, name, fields, deps.clock())
    if outcome == "missing":
        raise workspace_not_found(name)
    if outcome == "changed":  # a write that changes nothing is no event
        ws = await deps.store.spaces.workspace(ns, name)
        if ws is not None:
            await _workspace_event(deps, ns, "updated", ws)


@handles(UpdateWorkspaceRequest)
async def update_workspace(ns: str, req: UpdateWorkspaceRequest, deps: Deps) -> OkReply:
    secrets = Secrets(deps.settings.secrets)
    fields = _workspace_texts(vars_of(req), secrets)
    if "preferences" in fields:
        fields["preferences"] = check_object(
            fields["preferences"], "preferences", "keep notes in memories"
        )
    await _change_workspace(ns, req.name, fields, deps)
    return _ok(secrets)


@handles(ArchiveWorkspaceRequest)
async def archive_workspace(ns: str, req: ArchiveWorkspaceRequest, deps: Deps) -> OkReply:
    await _change_workspace(ns, req.name, {"is_archived": True}, deps)
    return OkReply()


# --------------------------------------------------------------------------- states


def state_content(req: CreateStateRequest) -> str:
    """The searchable text of a state: every field, labelled."""
    lines = [f"State: {req.name}"]
    if req.description:
        lines.append(req.description)
    lines += [f"Conversation: {req.conversation_context}", f"Active task: {req.active_task}"]
    if req.active_files:
        lines.append("Active files: " + ", ".join(req.active_files))
    if req.next_steps:
        lines += ["Next steps:", *(f"- {step}" for step in req.next_steps)]
    return "\n".join(lines)


def check_state_texts(req: CreateStateRequest, content: str) -> None:
    """A state's searchable text is all its fields together: an error names the fields."""
    texts: dict[str, list[str]] = {
        "conversation_context": [req.conversation_context],
        "active_task": [req.active_task],
        "description": [req.description or ""],
        "next_steps": req.next_steps,
        "active_files": req.active_files,
    }
    check_no_nul(**texts)
    try:
        check_content(content)
    except TooLarge:
        raise TooLarge(_too_large_state(texts, content)) from None


def _too_large_state(texts: dict[str, list[str]], content: str) -> str:
    sizes = {name: sum(len(t.encode()) for t in values) for name, values in texts.items()}
    # The fields that matter: the largest, and the next if it is a fair share too.
    ranked = sorted(sizes, key=lambda n: -sizes[n])
    largest = [n for n in ranked[:2] if sizes[n] * 4 >= sizes[ranked[0]]]

    def said(name: str) -> str:
        items = f" in {len(texts[name])} items" if name in ("next_steps", "active_files") else ""
        return f"`{name}` {sizes[name]:,} bytes{items}"

    return (
        f"The state's text (all its fields together) is {len(content.encode()):,} bytes; the"
        f" limit is {limits.MAX_CONTENT_BYTES:,} (32 KiB). Most of it:"
        f" {', '.join(map(said, largest))}. Shorten them, or keep the details in memories of"
        " their own and name them here."
    )


class _StateFields(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A state's own fields, kept in its memory's `metadata` under `state`."""

    conversation_context: str
    active_task: str
    active_files: list[str] = []
    next_steps: list[str] = []
    description: str | None = None


class _StateMetadata(msgspec.Struct):
    state: _StateFields


_state_metadata = msgspec.json.Decoder(_StateMetadata)


@handles(CreateStateRequest)
async def create_state(ns: str, req: CreateStateRequest, deps: Deps) -> OkReply:
    cfg = type_config(deps.settings.types, STATE_TYPE)
    # Before anything is stored or embedded: what is kept is what was scanned.
    secrets = Secrets(deps.settings.secrets)
    req = _state_without_secrets(req, secrets)
    content = state_content(req)
    check_state_texts(req, content)
    vec = await request_vector(ns, deps, text=content)
    now = deps.clock()
    fields = _StateFields(
        conversation_context=req.conversation_context,
        active_task=req.active_task,
        active_files=req.active_files,
        next_steps=req.next_steps,
        description=req.description,
    )
    rec = as_record(
        req,
        id=new_id(now),
        type=STATE_TYPE,
        content=content,
        tags=tuple(req.tags),
        importance=cfg.importance,
        workflow_id=storage_workflow(cfg, None, None),
        created_at=now,
        updated_at=now,
        expires_at=expires_ms(now, cfg.ttl_s),
        metadata=_encoder.encode(_StateMetadata(fields)).decode(),
        # Never folded by dedup: two states with the same texts are two save points.
        content_hash="",
        session_id=req.context.session_id if req.context else None,
        title=req.name,
        related_files=req.active_files,
    )
    added = entry("added", now, req, req.agent_id)
    with _in_workspace(req.workspace):
        outcome = await deps.store.spaces.create_state(
            ns, req.workspace, req.name, req.description, rec, vec, added
        )
    if outcome == "exists":
        raise Conflict(
            f'State "{req.name}" already exists. States are immutable - use a unique name'
            f' like "{req.name}-v2" or "{req.name}-2024-01".'
        )
    if outcome == "full":
        raise TooLarge(
            f'Workspace "{req.workspace}" holds the most states it may; create a new'
            " workspace for more."
        )
    await publish_event(deps, ns, "added", rec, now)
    return _ok(secrets)


def _state_without_secrets(req: CreateStateRequest, secrets: Secrets) -> CreateStateRequest:
    """The request with the secrets in each of its texts redacted (or refused); a name
    holding one is refused (`Secrets.name`)."""
    secrets.name("name", req.name)
    return msgspec.structs.replace(
        req,
        description=secrets.optional("description", req.description),
        conversation_context=secrets.text("conversation_context", req.conversation_context),
        active_task=secrets.text("active_task", req.active_task),
        active_files=secrets.texts("active_files", req.active_files),
        next_steps=secrets.texts("next_steps", req.next_steps),
        tags=secrets.tags("tags", req.tags),
    )


@handles(ListStatesRequest)
async def list_states(ns: str, req: ListStatesRequest, deps: Deps) -> ListDataReply:
    with _in_workspace(req.workspace):
        states = await deps.store.spaces.states(ns, req.workspace)
    return _listed(states, req.include_archived)


@handles(LoadStateRequest)
async def load_state(ns: str, req: LoadStateRequest, deps: Deps) -> StateReply:
    with _in_workspace(req.workspace):
        claimed = await deps.store.spaces.state(ns, req.workspace, req.name)
    if claimed is None:
        raise state_not_found(req.name)
    rec = await deps.store.reads.read(ns, claimed.id, deps.clock())
    if rec is None:  # its type was configured with a TTL, and it expired
        raise state_not_found(req.name)
    fields = _state_metadata.decode(rec.metadata or "{}").state
    return StateReply(
        data=State(
            name=req.name,
            workspace=req.workspace,
            conversation_context=fields.conversation_context,
            active_task=fields.active_task,
            active_files=fields.active_files,
            next_steps=fields.next_steps,
            description=fields.description,
            tags=list(rec.tags),
            is_archived=claimed.is_archived,
            created_at=ms_to_dt(rec.created_at),
            id=rec.id,
            agent_id=rec.agent_id,
            session_id=rec.session_id,
        )
    )


@handles(ArchiveStateRequest)
async def archive_state(ns: str, req: ArchiveStateRequest, deps: Deps) -> OkReply:
    now = deps.clock()
    done = entry("updated", now, req, None, {"is_archived": {"old": False, "new": True}})
    with _in_workspace(req.workspace):
        outcome, memory_id = await deps.store.spaces.archive_state(
            ns, req.workspace, req.name, done
        )
    if outcome == "missing":
        raise state_not_found(req.name)
    if memory_id is not None:
        rec = await deps.store.reads.read(ns, memory_id, now)
        if rec is not None:
            await publish_event(deps, ns, "updated", rec, now)
    return OkReply()
