"""Scope rules of PROTOCOL.md: where `add` stores a memory and what a read covers."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from contracts.types import TypeConfig
from handlers.ops.clock import dt_to_ms
from handlers.store import validity
from handlers.store.filters import ReadScope
from handlers.store.validity import ReadTime

if TYPE_CHECKING:
    pass


def storage_workflow(
    type_cfg: TypeConfig, scope: str | None, workflow_id: str | None
) -> str | None:
    """The `workflow_id` a new memory is stored with (None: general)."""
    if scope == "general":
        return None
    if scope == "workflow":
        return workflow_id
    return workflow_id if type_cfg.scope == "workflow" else None


def read_scope(
    scope: str,
    workflow_id: str | None,
    workspace: str | None = None,
    stores: tuple[str, ...] | None = None,
) -> ReadScope:
    """`workflow` or `both` without a workflow id means general only. A workspace without a
    workflow id means all of the workspace's memories, whatever workflow wrote them (the
    seed's searchMemory is scoped by workspace alone); with one, the rules apply within it.
    `stores` cuts it to a reduced-trust caller's visible stores (`Access.stores`)."""
    if workspace is not None and workflow_id is None:
        return ReadScope(None, general=False, workspace=workspace, stores=stores)
    if scope == "general" or workflow_id is None:
        return ReadScope(None, general=True, workspace=workspace, stores=stores)
    if scope == "workflow":
        return ReadScope(workflow_id, general=False, workspace=workspace, stores=stores)
    return ReadScope(workflow_id, general=True, workspace=workspace, stores=stores)


def read_time(as_of: datetime | None, include_superseded: bool, now_ms: int) -> ReadTime:
    """A read's time rule (`validity.read_time`): pass its `ended_by` to the queries."""
    as_of_ms = dt_to_ms(as_of) if as_of is not None else None
    return validity.read_time(as_of_ms, include_superseded, now_ms)
