"""The operations of PROTOCOL.md as plain async functions: `(ns, request, deps) -> reply`.

They know nothing of NATS; `handlers.dispatch` turns bytes into requests and replies into
bytes. Reads and writes go through `handlers.store`, vectors come from `handlers.embed`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from handlers.ops.coop import people, timeline
from handlers.ops.deps import Deps
from handlers.ops.history import history
from handlers.ops.reads import describe, get, list_
from handlers.ops.recall import recall
from handlers.ops.search import search
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
