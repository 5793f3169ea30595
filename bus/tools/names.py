"""The tools: their names, the operation each runs, and the fields a model never sets."""

from __future__ import annotations

import msgspec

from contracts.operations import TABLE

# Tool name -> operation. The memory tools carry a prefix (a bare `add` or `get` says nothing
# among a model's other tools); workspace and state tools already say what they act on.
TOOL_OPS: dict[str, str] = {
    "memory_add": "add",
    "memory_search": "search",
    "memory_describe": "describe",
    "memory_list": "list",
    "memory_get": "get",
    "memory_update": "update",
    "memory_delete": "delete",
    "memory_timeline": "timeline",
    "memory_history": "history",
    "memory_people": "people",
    "memory_reconcile": "reconcile",
    "memory_apply": "apply",
    "create_workspace": "create_workspace",
    "list_workspaces": "list_workspaces",
    "load_workspace": "load_workspace",
    "update_workspace": "update_workspace",
    "archive_workspace": "archive_workspace",
    "create_state": "create_state",
    "list_states": "list_states",
    "load_state": "load_state",
    "archive_state": "archive_state",
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_OPS)

# Set by the executor from its configuration, never by a model: identity must not be
# something a model can invent, and a model cannot compute the namespace's embeddings.
HIDDEN_FIELDS: tuple[str, ...] = ("context", "workflow_id", "agent_id", "embedding")

# Every request with a `workspace` field gets the configured one when the model leaves it
# out; these need one (`workspace` is required by their contract: the state operations).
STATE_OPS = frozenset(
    op.name
    for op in TABLE
    if any(f.name == "workspace" and f.required for f in msgspec.structs.fields(op.request))
)
