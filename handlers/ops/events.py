"""Events: every change is published on the namespace's event subjects."""

from __future__ import annotations

from typing import Literal

import msgspec

from contracts.messages import Event, preview
from contracts.subjects import event_subject
from handlers.ops.clock import ms_to_dt
from handlers.ops.deps import Deps
from handlers.ops.replies import wire_store
from handlers.store.record import Record

Action = Literal["added", "updated", "deleted"]
_encoder = msgspec.json.Encoder()


async def publish_event(
    deps: Deps,
    ns: str,
    action: Action,
    rec: Record,
    at_ms: int,
    agent_id: str | None = None,
    erased: bool = False,
) -> None:
    """Announce a change to `rec` (by `agent_id`, else the agent that stored it); an
    `erased` one carries no preview (PROTOCOL v4, "Erasure")."""
    event = Event(
        action=action,
        id=rec.id,
        type=rec.type,
        workflow_id=rec.workflow_id,
        agent_id=agent_id or rec.agent_id,
        at=ms_to_dt(at_ms),
        preview="" if erased else preview(rec.content),
        workspace=rec.workspace if rec.workspace is not None else msgspec.UNSET,
        store=wire_store(rec),
        request_id=deps.write.request_id if deps.write is not None else msgspec.UNSET,
        version=rec.version,
        erased=True if erased else msgspec.UNSET,
    )
    subject = event_subject(ns, rec.workflow_id, rec.type, action)
    await deps.publish(subject, _encoder.encode(event))
