"""The client agents import: `MemoryBus.connect(...)`, then one `AgentMemory` per agent.

The parts, one job each: the connection and its requests (`bus.connection`), writes through
JetStream (`bus.jetstream`), events (`bus.events`), the namespace's operations
(`bus.namespace`), and an agent's handle (`bus.handle`) with its reads, writes and states
(`bus.reads`, `bus.writes`, `bus.states`).
"""

from __future__ import annotations

from bus.build import build as _build
from bus.events import EventStream
from bus.handle import Filters
from bus.jetstream import Accepted, JetStreamConnection
from bus.namespace import NamespaceOperations
from bus.reads import AgentReads
from bus.states import AgentStates
from bus.writes import AgentWrites, DurableWrites
from contracts.messages import Context

__all__ = [
    "Accepted",
    "AgentMemory",
    "DurableWrites",
    "EventStream",
    "Filters",
    "MemoryBus",
]


class MemoryBus(NamespaceOperations, JetStreamConnection):
    """A connection to the memory bus for one namespace."""

    def agent(
        self,
        *,
        workflow_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        context: Context | None = None,
        workspace: str | None = None,
    ) -> AgentMemory:
        """A handle bound, for good, to one agent in one workflow (and, optionally, one
        session: its requests carry `context.session_id`, which writes record; and one
        workspace: its adds go into it, its reads look only inside it, and its state
        operations default to it)."""
        if session_id is not None:
            base = context or Context()
            context = _build(
                Context,
                session_id=session_id,
                goal=base.goal,
                memory=base.memory,
                constraints=base.constraints,
            )
        return AgentMemory(
            self,
            workflow_id=workflow_id,
            agent_id=agent_id,
            context=context,
            workspace=workspace,
        )


class AgentMemory(AgentReads, AgentWrites, AgentStates):
    """One agent's memory tool: `workflow_id` and `agent_id` are fixed when it is made."""

    __slots__ = ()
    _bus: MemoryBus

    def __init__(
        self,
        bus: MemoryBus,
        *,
        workflow_id: str | None,
        agent_id: str | None,
        context: Context | None = None,
        workspace: str | None = None,
    ) -> None:
        super().__init__(
            bus, workflow_id=workflow_id, agent_id=agent_id, context=context, workspace=workspace
        )

    @property
    def bus(self) -> MemoryBus:
        return self._bus
