"""Scope rules of PROTOCOL.md: where `add` stores a memory and what a read covers."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.types import TypeConfig


def storage_workflow(
    type_cfg: TypeConfig, scope: str | None, workflow_id: str | None
) -> str | None:
    """The `workflow_id` a new memory is stored with (None: general)."""
    if scope == "general":
        return None
    if scope == "workflow":
        return workflow_id
    return workflow_id if type_cfg.scope == "workflow" else None


@dataclass(frozen=True, slots=True)
class ReadScope:
    """What a read covers: one workflow's memories, the general ones, or both."""

    workflow_id: str | None
    general: bool

    @property
    def applied(self) -> str:
        if self.workflow_id is None:
            return "general"
        return "both" if self.general else "workflow"


def read_scope(scope: str, workflow_id: str | None) -> ReadScope:
    # `workflow` or `both` without a workflow id means general only.
    if scope == "general" or workflow_id is None:
        return ReadScope(workflow_id=None, general=True)
    if scope == "workflow":
        return ReadScope(workflow_id=workflow_id, general=False)
    return ReadScope(workflow_id=workflow_id, general=True)
