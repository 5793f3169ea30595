"""An agent's reads: search, describe, list, get, recall, timeline, reconcile, people,
history, and following its workflow's events."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Unpack, overload

from bus.build import build as _build
from bus.build import opt_list as _opt_list
from bus.errors import InvalidRequest
from bus.events import EventStream
from bus.handle import AgentHandle, Filters
from contracts.messages import (
    CompactListReply,
    CompactTimelineReply,
    DescribeReply,
    DescribeRequest,
    GetReply,
    GetRequest,
    HistoryReply,
    HistoryRequest,
    ListReply,
    ListRequest,
    PeopleReply,
    PeopleRequest,
    RecallReply,
    RecallRequest,
    ReconcileFact,
    ReconcileReply,
    ReconcileRequest,
    SearchReply,
    SearchRequest,
    TimelineReply,
    TimelineRequest,
)


class AgentReads(AgentHandle):
    """The reads of `AgentMemory`, in its scope."""

    __slots__ = ()

    async def search(
        self,
        query: str | None = None,
        *,
        limit: int = 10,
        min_score: float | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        embedding: Sequence[float] | None = None,
        mode: Literal["vector", "text", "hybrid"] | None = None,
        fusion: Literal["linear", "rrf"] | None = None,
        max_tokens: int | None = None,
        diversify: float | None = None,
        **filters: Unpack[Filters],
    ) -> SearchReply:
        """Memories ranked by relevance, importance and recency (`Filters` narrow them)."""
        req = _build(
            SearchRequest,
            query=query,
            limit=limit,
            min_score=min_score,
            since=since,
            until=until,
            embedding=_opt_list(embedding),
            mode=mode,
            fusion=fusion,
            max_tokens=max_tokens,
            diversify=diversify,
            **self._scoped(filters),
        )
        return await self._bus.request("search", req, SearchReply)

    async def describe(
        self,
        *,
        scope: Literal["both", "workflow", "general"] = "both",
        workspace: str | None = None,
    ) -> DescribeReply:
        req = _build(
            DescribeRequest,
            workflow_id=self._workflow_id,
            scope=scope,
            workspace=workspace or self._workspace,
            context=self._context,
        )
        return await self._bus.request("describe", req, DescribeReply)

    @overload
    async def list(
        self,
        *,
        mode: Literal["full"] = "full",
        limit: int = 20,
        offset: int = 0,
        max_tokens: int | None = None,
        **filters: Unpack[Filters],
    ) -> ListReply: ...

    @overload
    async def list(
        self,
        *,
        mode: Literal["compact"],
        limit: int = 20,
        offset: int = 0,
        max_tokens: int | None = None,
        **filters: Unpack[Filters],
    ) -> CompactListReply: ...

    async def list(
        self,
        *,
        mode: Literal["full", "compact"] = "full",
        limit: int = 20,
        offset: int = 0,
        max_tokens: int | None = None,
        **filters: Unpack[Filters],
    ) -> ListReply | CompactListReply:
        """Memories newest first, a page at a time (`Filters` narrow them)."""
        req = _build(
            ListRequest,
            mode=mode,
            limit=limit,
            offset=offset,
            max_tokens=max_tokens,
            **self._scoped(filters),
        )
        reply_type = CompactListReply if mode == "compact" else ListReply
        return await self._bus.request("list", req, reply_type)

    async def get(
        self, ids: Sequence[str] | None = None, *, keys: Sequence[str] | None = None
    ) -> GetReply:
        """Memories by id and (v4) by key: those missing are in `missing` and
        `missing_keys`."""
        req = GetRequest(
            ids=list(ids) if ids is not None else None,
            keys=list(keys) if keys is not None else None,
            context=self._context,
        )
        return await self._bus.request("get", req, GetReply)

    async def recall(
        self,
        message: str | Sequence[str],
        *,
        session_id: str | None = None,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        people: Sequence[str] | None = None,
        source: str = "user",
        turn: int | None = None,
        limit: int = 20,
        recent_s: int = 21600,
        min_importance: float = 0.8,
        dedup_threshold: float = 0.85,
        reinject_after: int = 10,
        max_tokens: int | None = None,
        include_superseded: bool = False,
        workspace: str | None = None,
        as_of: datetime | None = None,
    ) -> RecallReply:
        """Before a model turn: the memories to put in the prompt (`reply.block` is ready
        text), leaving out what this session was given in its last `reinject_after` turns.
        `message` is the turn's text, or a burst of short messages. The session is this
        handle's unless `session_id` is given."""
        sid = session_id or self.session_id
        if sid is None:
            raise InvalidRequest(
                "recall needs a session: bus.agent(..., session_id=...) or recall(session_id=...)"
            )
        req = _build(
            RecallRequest,
            message=message if isinstance(message, str) else None,
            messages=[] if isinstance(message, str) else list(message),
            session_id=sid,
            workflow_id=self._workflow_id,
            scope=scope,
            types=_opt_list(types),
            people=_opt_list(people),
            source=source,
            turn=turn,
            limit=limit,
            recent_s=recent_s,
            min_importance=min_importance,
            dedup_threshold=dedup_threshold,
            reinject_after=reinject_after,
            max_tokens=max_tokens,
            include_superseded=include_superseded,
            workspace=workspace or self._workspace,
            as_of=as_of,
            context=self._context,
        )
        return await self._bus.request("recall", req, RecallReply)

    @overload
    async def timeline(
        self,
        anchor: str,
        *,
        before: int = 5,
        after: int = 5,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        mode: Literal["compact"] = "compact",
        include_superseded: bool = False,
        as_of: datetime | None = None,
        workspace: str | None = None,
    ) -> CompactTimelineReply: ...

    @overload
    async def timeline(
        self,
        anchor: str,
        *,
        before: int = 5,
        after: int = 5,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        mode: Literal["full"],
        include_superseded: bool = False,
        as_of: datetime | None = None,
        workspace: str | None = None,
    ) -> TimelineReply: ...

    async def timeline(
        self,
        anchor: str,
        *,
        before: int = 5,
        after: int = 5,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        mode: Literal["compact", "full"] = "compact",
        include_superseded: bool = False,
        as_of: datetime | None = None,
        workspace: str | None = None,
    ) -> TimelineReply | CompactTimelineReply:
        """The memories just before and after `anchor` (an id) in this agent's scope (and
        workspace: the handle's unless given), oldest first;
        `reply.memories[reply.anchor_index]` is the anchor."""
        req = _build(
            TimelineRequest,
            anchor=anchor,
            before=before,
            after=after,
            workflow_id=self._workflow_id,
            scope=scope,
            types=_opt_list(types),
            mode=mode,
            include_superseded=include_superseded,
            as_of=as_of,
            workspace=workspace or self._workspace,
            context=self._context,
        )
        reply_type = TimelineReply if mode == "full" else CompactTimelineReply
        return await self._bus.request("timeline", req, reply_type)

    async def reconcile(
        self,
        facts: Sequence[str | ReconcileFact],
        *,
        limit: int = 3,
    ) -> ReconcileReply:
        """For facts an extractor (an LLM) proposes, the nearest current memories in this
        handle's workflow and workspace and a suggested action each: `noop` (known already),
        `supersede` (`target` says something else about it), `add`. Writes nothing."""
        req = _build(
            ReconcileRequest,
            facts=[ReconcileFact(content=f) if isinstance(f, str) else f for f in facts],
            workflow_id=self._workflow_id,
            workspace=self._workspace,
            limit=limit,
            context=self._context,
        )
        return await self._bus.request("reconcile", req, ReconcileReply)

    async def people(
        self,
        query: str | None = None,
        *,
        scope: Literal["both", "workflow", "general"] = "both",
        limit: int = 20,
    ) -> PeopleReply:
        """Who the memories in scope name, most recently mentioned first; `query` matches
        part of a name, case-insensitively."""
        req = _build(
            PeopleRequest,
            query=query,
            workflow_id=self._workflow_id,
            scope=scope,
            limit=limit,
            context=self._context,
        )
        return await self._bus.request("people", req, PeopleReply)

    async def history(self, id: str) -> HistoryReply:
        """What happened to one memory, oldest first (readable for a while after a delete).
        Unknown id: `NotFound`."""
        req = _build(HistoryRequest, id=id, context=self._context)
        return await self._bus.request("history", req, HistoryReply)

    async def subscribe(self, *, type: str | None = None, action: str | None = None) -> EventStream:
        """Follow this agent's workflow (or general memories, for an agent without one)."""
        return await self._bus.subscribe(
            self._workflow_id, general=self._workflow_id is None, type=type, action=action
        )
