"""An agent's save points: named, immutable states in a workspace."""

from __future__ import annotations

from collections.abc import Sequence

from bus.build import build as _build
from bus.errors import InvalidRequest
from bus.handle import AgentHandle
from contracts.messages import (
    ArchiveStateRequest,
    CreateStateRequest,
    ListDataReply,
    ListStatesRequest,
    LoadStateRequest,
    OkReply,
    State,
    StateReply,
)


class AgentStates(AgentHandle):
    """The state operations of `AgentMemory`, in its workspace unless given one."""

    __slots__ = ()

    def _in_workspace(self, given: str | None) -> str:
        ws = given or self._workspace
        if ws is None:
            raise InvalidRequest(
                "States live in a workspace: pass `workspace=...` or make the handle with"
                " bus.agent(..., workspace=...)."
            )
        return ws

    async def create_state(
        self,
        name: str,
        *,
        conversation_context: str,
        active_task: str,
        active_files: Sequence[str],
        next_steps: Sequence[str],
        description: str | None = None,
        tags: Sequence[str] = (),
        workspace: str | None = None,
    ) -> OkReply:
        """Save an immutable, named save point in the workspace (this handle's unless
        given). Its name is unique in the workspace forever: a repeat is `Conflict`. The
        reply's `redacted` names the kinds of secret redacted from its texts, if any."""
        req = _build(
            CreateStateRequest,
            workspace=self._in_workspace(workspace),
            name=name,
            conversation_context=conversation_context,
            active_task=active_task,
            active_files=list(active_files),
            next_steps=list(next_steps),
            description=description,
            tags=list(tags),
            agent_id=self._agent_id,
            context=self._context,
        )
        return await self._bus.request("create_state", req, OkReply)

    async def list_states(
        self, *, include_archived: bool = False, workspace: str | None = None
    ) -> ListDataReply:
        """`reply.data`: `{name, description}` of each state, oldest first."""
        req = ListStatesRequest(
            workspace=self._in_workspace(workspace),
            include_archived=include_archived,
            context=self._context,
        )
        return await self._bus.request("list_states", req, ListDataReply)

    async def load_state(self, name: str, *, workspace: str | None = None) -> State:
        req = _build(
            LoadStateRequest,
            workspace=self._in_workspace(workspace),
            name=name,
            context=self._context,
        )
        return (await self._bus.request("load_state", req, StateReply)).data

    async def archive_state(self, name: str, *, workspace: str | None = None) -> None:
        """Hide a state from `list_states`; it stays loadable, and its name stays taken."""
        req = _build(
            ArchiveStateRequest,
            workspace=self._in_workspace(workspace),
            name=name,
            context=self._context,
        )
        await self._bus.request("archive_state", req, OkReply)
