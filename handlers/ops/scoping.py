"""Scope rules of PROTOCOL.md: where `add` stores a memory and what a read covers."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from contracts.types import TypeConfig
from handlers.ops.clock import dt_to_ms
from handlers.store.filters import ReadScope

if TYPE_CHECKING:
    from handlers.ops.deps import Deps


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


class ReadTime(NamedTuple):
    """Which memories a read sees in time: the current ones (`current`), those valid at
    `as_of_ms` (v3), or, with `include_superseded` and no `as_of`, all of them."""

    current: bool
    as_of_ms: int | None


async def read_time(
    ns: str, as_of: datetime | None, include_superseded: bool, deps: Deps, now_ms: int
) -> ReadTime:
    """A read's time rule, with the namespace made ready for it: an `as_of` read needs
    every memory's validity window (`Store.as_of_ready`); a current read first flags those
    whose validity ended by now (`Store.current_at`)."""
    if as_of is not None:
        await deps.store.as_of_ready(ns)
        return ReadTime(current=False, as_of_ms=dt_to_ms(as_of))
    if include_superseded:
        return ReadTime(current=False, as_of_ms=None)
    await deps.store.current_at(ns, now_ms)
    return ReadTime(current=True, as_of_ms=None)
