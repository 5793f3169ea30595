"""memory-bus client: connect, get a per-agent handle, call typed operations, follow events.

bus = await MemoryBus.connect("nats://127.0.0.1:4222", namespace="acme")
mem = bus.agent(workflow_id="wf_123", agent_id="researcher")
await mem.add("user_pref", "The user prefers short answers")
hits = await mem.search("how should answers be written?")
"""

from bus.client import AgentMemory, MemoryBus
from bus.errors import (
    BusError,
    BusTimeout,
    Conflict,
    Forbidden,
    Internal,
    InvalidRequest,
    NotFound,
    TooLarge,
    Unavailable,
)
from bus.events import EventStream
from bus.jetstream import Accepted
from bus.writes import DurableWrites

__all__ = [
    "Accepted",
    "AgentMemory",
    "BusError",
    "BusTimeout",
    "Conflict",
    "DurableWrites",
    "EventStream",
    "Forbidden",
    "Internal",
    "InvalidRequest",
    "MemoryBus",
    "NotFound",
    "TooLarge",
    "Unavailable",
]
