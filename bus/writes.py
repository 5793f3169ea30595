"""An agent's writes: add, update, delete, apply, clear_by_type, compact, capture, each
sent by request and reply, and those that JetStream may carry (`mem.durable`) built by the
same request builders."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import msgspec

from bus.build import build as _build
from bus.build import opt_list as _opt_list
from bus.errors import InvalidRequest
from bus.handle import AgentHandle
from bus.jetstream import Accepted
from contracts.messages import (
    AddReply,
    AddRequest,
    ApplyAction,
    ApplyReply,
    ApplyRequest,
    CaptureRequest,
    ClearByTypeReply,
    ClearByTypeRequest,
    CompactRequest,
    DeleteReply,
    DeleteRequest,
    Request,
    UpdateReply,
    UpdateRequest,
)

R = TypeVar("R", bound=msgspec.Struct)
P = ParamSpec("P")


def _signed(
    send: Any, build: Callable[..., Any], owner: str, op: str, returns: str, doc: str
) -> None:
    """What help() and inspect show of a write made from a builder: the builder's
    parameters, the write's own name, reply type and text."""
    send.__signature__ = inspect.signature(build).replace(return_annotation=returns)
    send.__annotations__ = {**build.__annotations__, "return": returns}
    send.__name__ = op
    send.__qualname__ = f"{owner}.{op}"
    send.__module__ = build.__module__
    send.__doc__ = doc


def _replying(
    op: str, reply: type[R], build: Callable[Concatenate[AgentWrites, P], Request], doc: str
) -> Callable[Concatenate[AgentWrites, P], Coroutine[Any, Any, R]]:
    """A write of `AgentMemory` from its request builder: the parameters are the builder's,
    spelled once; the write sends the request and waits for the handler's reply."""

    async def send(self: AgentWrites, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.bus.request(op, build(self, *args, **kwargs), reply)

    _signed(send, build, "AgentMemory", op, reply.__name__, doc)
    return send


def _durably(
    op: str, build: Callable[Concatenate[AgentWrites, P], Request]
) -> Callable[Concatenate[DurableWrites, P], Coroutine[Any, Any, Accepted]]:
    """The same write through JetStream (see `DurableWrites`), from the same builder."""

    async def send(self: DurableWrites, /, *args: P.args, **kwargs: P.kwargs) -> Accepted:
        memory = self.memory
        return await memory.bus.durable(op, build(memory, *args, **kwargs), self.request_id)

    doc = f"`{op}` through JetStream: returns `Accepted` once the stream has it."
    _signed(send, build, "DurableWrites", op, "Accepted", doc)
    return send


class AgentWrites(AgentHandle):
    """The writes of `AgentMemory`, with its identity; `durable` sends them through
    JetStream."""

    __slots__ = ()

    def add_request(
        self,
        type: str,
        content: str | None = None,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        scope: Literal["general", "workflow"] | None = None,
        ttl_s: int | None = None,
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
        embedding: Sequence[float] | None = None,
        dedup: Literal["exact", "semantic", "none"] = "exact",
        dedup_threshold: float | None = None,
        title: str | None = None,
        facts: Sequence[str] = (),
        narrative: str | None = None,
        related_files: Sequence[str] = (),
        related_people: Sequence[str] = (),
        supersedes: Sequence[str] = (),
        workspace: str | None = None,
        store: Literal["private", "shared", "social"] | None = None,
        valid_from: datetime | None = None,
        valid_until: datetime | None = None,
        idle_ttl_s: int | None = None,
        key: str | None = None,
        expected_version: int | None = None,
    ) -> AddRequest:
        """The request of `add` (see it), with this handle's identity and workspace."""
        return _build(
            AddRequest,
            type=type,
            content=content,
            tags=list(tags),
            importance=importance,
            workflow_id=self._workflow_id,
            scope=scope,
            ttl_s=ttl_s,
            agent_id=self._agent_id,
            source=source,
            metadata=metadata,
            embedding=_opt_list(embedding),
            dedup=dedup,
            dedup_threshold=dedup_threshold,
            title=title,
            facts=list(facts),
            narrative=narrative,
            related_files=list(related_files),
            related_people=list(related_people),
            supersedes=list(supersedes),
            workspace=workspace or self._workspace,
            store=store,
            valid_from=valid_from,
            valid_until=valid_until,
            idle_ttl_s=idle_ttl_s,
            key=key,
            expected_version=expected_version,
            context=self._context,
        )

    add = _replying(
        "add",
        AddReply,
        add_request,
        """Store a memory. A repeat of live content (same type and scope) is not stored
        twice: the reply's `duplicate_of` names the memory whose `mention_count` went up.
        An observation may leave `content` out and give a `title` (with `narrative`,
        `facts`, ...): the content is then composed from them. `supersedes` names older
        memories this one replaces: reads then leave those out (reply: `superseded`,
        `missing`).

        `store` picks the trust-gated store (default: the connection's trust decides).
        `valid_from` / `valid_until` say when the fact held in the world (v3); a memory
        whose `valid_until` has passed is left out of reads unless they ask `as_of`.
        `idle_ttl_s` forgets it once no read has returned it for that long (never past
        its `ttl_s`).
        `key` (v4) names the memory: an add with a key that a current memory of the store
        holds replaces that memory in place (same id, `version` + 1, reply `replaced`);
        `expected_version` makes that conditional (0: only if none holds the key yet),
        else `Conflict`. Read keyed memories back with `get(keys=[...])`.
        Through JetStream instead: `mem.durable.add(...)` (see `DurableWrites`).""",
    )

    def update_request(
        self,
        id: str,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        ttl_s: int | None = None,
        valid_from: datetime | msgspec.UnsetType | None = msgspec.UNSET,
        valid_until: datetime | msgspec.UnsetType | None = msgspec.UNSET,
        expected_version: int | None = None,
    ) -> UpdateRequest:
        """The request of `update` (see it), with this handle's identity."""
        return _build(
            UpdateRequest,
            id=id,
            content=content,
            tags=_opt_list(tags),
            importance=importance,
            ttl_s=ttl_s,
            valid_from=valid_from,
            valid_until=valid_until,
            expected_version=expected_version,
            agent_id=self._agent_id,
            context=self._context,
        )

    update = _replying(
        "update",
        UpdateReply,
        update_request,
        """Change one memory; `ttl_s=0` makes it permanent; `valid_until=None` (or
        `valid_from=None`) opens that validity bound. Unknown id: `NotFound`. With
        `expected_version`, only if the memory is still at that version (else `Conflict`,
        whose `current_version` says where it is now).
        Through JetStream: `mem.durable.update(...)` (an unknown id then comes back as a
        `rejected` event).""",
    )

    async def apply(self, actions: Sequence[ApplyAction | Mapping[str, Any]]) -> ApplyReply:
        """Write what an extractor decided (see `reconcile`) in one atomic step, in this
        handle's workflow, workspace and agent: all of `actions`, or, when any one is
        refused, none (the error names its index). Each is a contract struct (`ApplyAdd`,
        `ApplyUpdate`, `ApplySupersede`, `ApplyDelete`) or its JSON form, e.g.
        `{"action": "supersede", "id": old_id, "type": "fact", "content": "..."}`."""
        try:
            listed = [
                a if isinstance(a, msgspec.Struct) else msgspec.convert(a, ApplyAction)
                for a in actions
            ]
        except msgspec.ValidationError as exc:
            raise InvalidRequest(str(exc)) from None
        req = _build(
            ApplyRequest,
            actions=listed,
            workflow_id=self._workflow_id,
            workspace=self._workspace,
            agent_id=self._agent_id,
            context=self._context,
        )
        return await self._bus.request("apply", req, ApplyReply)

    def delete_request(self, ids: Sequence[str], *, erase: bool = False) -> DeleteRequest:
        """The request of `delete` (see it)."""
        return _build(
            DeleteRequest,
            ids=list(ids),
            agent_id=self._agent_id,
            erase=erase,
            context=self._context,
        )

    delete = _replying(
        "delete",
        DeleteReply,
        delete_request,
        """Delete memories; ids not found come back in `missing`. `erase=True` (full trust
        only) also takes their text out of everything the service keeps: their history
        stays as `erased` tombstones, and the reply counts what was erased (`erased`,
        `erased_messages`). Through JetStream: `mem.durable.delete(...)`.""",
    )

    async def clear_by_type(
        self, type: str, *, scope: Literal["workflow", "general"] = "workflow"
    ) -> ClearByTypeReply:
        req = _build(
            ClearByTypeRequest,
            type=type,
            workflow_id=self._workflow_id,
            scope=scope,
            context=self._context,
        )
        # Each call does a bounded share of the work; repeat until nothing remains.
        reply = await self._bus.request("clear_by_type", req, ClearByTypeReply)
        deleted = reply.deleted
        while reply.remaining:
            reply = await self._bus.request("clear_by_type", req, ClearByTypeReply)
            deleted += reply.deleted
        return ClearByTypeReply(deleted=deleted)

    async def compact(
        self,
        type: str,
        *,
        keep: int,
        by: Literal["importance", "recency", "accesses"],
        general: bool = False,
    ) -> ClearByTypeReply:
        """Keep the `keep` best current memories of `type` (by importance, newest, or most
        read) in this handle's workflow (or the general ones with `general`, or its
        workspace's when it has one and no workflow) and delete the rest; each deletion is
        announced and in the memory's history with reason "compacted"."""
        req = _build(
            CompactRequest,
            type=type,
            keep=keep,
            by=by,
            workflow_id=None if general else self._workflow_id,
            workspace=self._workspace,
            context=self._context,
        )
        reply = await self._bus.request("compact", req, ClearByTypeReply)
        deleted = reply.deleted
        while reply.remaining:  # each call does a bounded share of the work
            reply = await self._bus.request("compact", req, ClearByTypeReply)
            deleted += reply.deleted
        return ClearByTypeReply(deleted=deleted)

    def capture_request(
        self,
        tool: str,
        *,
        args: dict[str, Any] | None = None,
        output: str = "",
        error: bool = False,
        duration_ms: float | None = None,
    ) -> CaptureRequest:
        """The `capture` body of one tool run, with this handle's identity."""
        return _build(
            CaptureRequest,
            tool=tool,
            args=args or {},
            output=output,
            error=error,
            duration_ms=duration_ms,
            agent_id=self._agent_id,
            workflow_id=self._workflow_id,
            workspace=self._workspace,
            context=self._context,
        )

    capture = _replying(
        "capture",
        AddReply,
        capture_request,
        """Store one tool run as a `trace` and wait for the reply (through JetStream:
        `mem.durable.capture(...)`). To record runs without ever waiting or failing, wrap
        the tool with `bus.capture.captured` instead.""",
    )

    @property
    def durable(self) -> DurableWrites:
        """This handle's writes through JetStream: `await mem.durable.add(...)` returns
        JetStream's `Accepted` once the write is stored (never lost, applied at most once).
        `mem.durable(request_id="...")` names the next write, so a retry is applied once."""
        return DurableWrites(self)


class DurableWrites:
    """An agent's writes through the JetStream stream MEMBUS_WRITES (`mem.durable`): each
    returns JetStream's `Accepted` once the write is stored, so it is not lost through
    handler, NATS or Redis restarts, and it is applied at most once; its outcome is the
    write's event, which carries `accepted.request_id` (a refused one: a `rejected` event).
    The parameters are those of the same method of `AgentMemory`."""

    __slots__ = ("memory", "request_id")

    def __init__(self, memory: AgentWrites, request_id: str | None = None) -> None:
        self.memory = memory
        # The Nats-Msg-Id of the next write; None: a new one each write.
        self.request_id = request_id

    def __call__(self, request_id: str) -> DurableWrites:
        """Name the write (JetStream's Nats-Msg-Id): a retry with the same id is stored
        once, within the stream's duplicate window."""
        return DurableWrites(self.memory, request_id)

    add = _durably("add", AgentWrites.add_request)
    update = _durably("update", AgentWrites.update_request)
    delete = _durably("delete", AgentWrites.delete_request)
    capture = _durably("capture", AgentWrites.capture_request)
