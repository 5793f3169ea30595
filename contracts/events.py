"""The events of the wire protocol: a memory added, updated or deleted, and a durable
write rejected. Read leniently, as replies are."""

from __future__ import annotations

from datetime import datetime

import msgspec

from contracts.fields import MemoryStore


class Event(msgspec.Struct, kw_only=True):
    action: str
    id: str
    type: str
    workflow_id: str | None
    agent_id: str | None
    at: datetime
    preview: str
    # The memory's workspace (absent when it has none).
    workspace: str | msgspec.UnsetType = msgspec.UNSET
    # The memory's store.
    store: MemoryStore = "private"
    # The durable write's `Nats-Msg-Id` that made this change (absent for request/reply).
    request_id: str | msgspec.UnsetType = msgspec.UNSET
    # v4: the memory's version after this change (a deleted memory's last one).
    version: int = 1
    # v4: true on the `deleted` event of an erasure (`delete` with `erase`), whose preview
    # is empty: a receiver that kept the memory's text forgets it too.
    erased: bool | msgspec.UnsetType = msgspec.UNSET


class RejectedEvent(msgspec.Struct, kw_only=True):
    """A durable write that can never succeed (bad input), on
    `mem.<ns>.events._rejected.<op>.rejected`: it is not retried."""

    request_id: str
    code: str
    error: str
