"""An agent's handle, the part its reads, writes and states share: the bus it sends on,
its identity, and a read's `Filters` in its scope."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, TypedDict

from bus.build import opt_list as _opt_list
from bus.jetstream import JetStreamConnection
from contracts.messages import Context


class Filters(TypedDict, total=False):
    """What a read (`search`, `list`) may be narrowed by, on top of the handle's scope."""

    # both (default): this workflow's and general memories; workflow; general.
    scope: Literal["both", "workflow", "general"]
    # Only these types; only memories with ANY of these tags; naming ANY of these people.
    types: Sequence[str] | None
    tags: Sequence[str] | None
    people: Sequence[str] | None
    # Also memories a newer one superseded (default False).
    include_superseded: bool
    # Only this workspace's (default: the handle's, if it has one).
    workspace: str | None
    # v3: what was valid at this time, memories superseded since included (default: now,
    # current memories only).
    as_of: datetime | None


class AgentHandle:
    """What every operation of an agent's handle starts from: the bus, and the identity
    (workflow, agent, context, workspace) fixed when the handle is made. `AgentMemory`
    is its reads, writes and states together."""

    __slots__ = ("_agent_id", "_bus", "_context", "_workflow_id", "_workspace")

    def __init__(
        self,
        bus: JetStreamConnection,
        *,
        workflow_id: str | None,
        agent_id: str | None,
        context: Context | None = None,
        workspace: str | None = None,
    ) -> None:
        self._bus = bus
        self._workflow_id = workflow_id
        self._agent_id = agent_id
        self._context = context
        self._workspace = workspace

    @property
    def workspace(self) -> str | None:
        return self._workspace

    @property
    def workflow_id(self) -> str | None:
        return self._workflow_id

    @property
    def agent_id(self) -> str | None:
        return self._agent_id

    @property
    def session_id(self) -> str | None:
        return self._context.session_id if self._context else None

    @property
    def context(self) -> Context | None:
        """The `context` block every request of this handle carries."""
        return self._context

    @property
    def bus(self) -> JetStreamConnection:
        return self._bus

    def _scoped(self, filters: Filters) -> dict[str, Any]:
        """A read's filters as request fields, in this handle's workflow and workspace."""
        fields: dict[str, Any] = dict(filters)
        for name in ("types", "tags", "people"):
            if name in fields:
                fields[name] = _opt_list(fields[name])
        fields["workspace"] = fields.get("workspace") or self._workspace
        return {**fields, "workflow_id": self._workflow_id, "context": self._context}
