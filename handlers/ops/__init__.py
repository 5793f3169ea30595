"""The operations of PROTOCOL.md as plain async functions: `(ns, request, deps) -> reply`.

They know nothing of NATS; `handlers.dispatch` turns bytes into requests and replies into
bytes. Reads and writes go through `handlers.store`, vectors come from `handlers.embed`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from handlers.ops.capture import capture
from handlers.ops.coop import people, timeline
from handlers.ops.deps import Deps
from handlers.ops.history import history
from handlers.ops.reads import describe, get, list_
from handlers.ops.recall import recall
from handlers.ops.search import search
from handlers.ops.transfer import export, import_
from handlers.ops.workspaces import (
    archive_state,
    archive_workspace,
    create_state,
    create_workspace,
    list_states,
    list_workspaces,
    load_state,
    load_workspace,
    update_workspace,
)
from handlers.ops.writes import add, clear_by_type, delete, update

Operation = Callable[[str, object, Deps], Awaitable[msgspec.Struct]]

OPERATIONS: dict[str, Operation] = {
    "add": add,  # type: ignore[dict-item]
    "search": search,  # type: ignore[dict-item]
    "describe": describe,  # type: ignore[dict-item]
    "list": list_,  # type: ignore[dict-item]
    "get": get,  # type: ignore[dict-item]
    "delete": delete,  # type: ignore[dict-item]
    "clear_by_type": clear_by_type,  # type: ignore[dict-item]
    "update": update,  # type: ignore[dict-item]
    "history": history,  # type: ignore[dict-item]
    "recall": recall,  # type: ignore[dict-item]
    "timeline": timeline,  # type: ignore[dict-item]
    "people": people,  # type: ignore[dict-item]
    "create_workspace": create_workspace,  # type: ignore[dict-item]
    "list_workspaces": list_workspaces,  # type: ignore[dict-item]
    "load_workspace": load_workspace,  # type: ignore[dict-item]
    "update_workspace": update_workspace,  # type: ignore[dict-item]
    "archive_workspace": archive_workspace,  # type: ignore[dict-item]
    "create_state": create_state,  # type: ignore[dict-item]
    "list_states": list_states,  # type: ignore[dict-item]
    "load_state": load_state,  # type: ignore[dict-item]
    "archive_state": archive_state,  # type: ignore[dict-item]
    "capture": capture,  # type: ignore[dict-item]
    "export": export,  # type: ignore[dict-item]
    "import": import_,  # type: ignore[dict-item]
}

__all__ = [
    "OPERATIONS",
    "Deps",
    "add",
    "clear_by_type",
    "delete",
    "describe",
    "get",
    "list_",
    "search",
    "update",
]
