"""The operations of PROTOCOL.md as plain async functions: `(ns, request, deps) -> reply`.

They know nothing of NATS; `handlers.dispatch` turns bytes into requests and replies into
bytes. Reads and writes go through `handlers.store`, vectors come from `handlers.embed`.
Each function binds itself to its operation with `@handles(<its request type>)`; importing
this package imports them all, and refuses to start with an operation left unbound.
"""

from __future__ import annotations

from contracts.operations import OPERATIONS
from handlers.ops.apply import apply
from handlers.ops.capture import capture
from handlers.ops.coop import people, timeline
from handlers.ops.deps import Deps
from handlers.ops.history import history
from handlers.ops.reads import describe, get, list_
from handlers.ops.recall import recall
from handlers.ops.reconcile import reconcile
from handlers.ops.registry import HANDLERS, Handler
from handlers.ops.search import search
from handlers.ops.transfer import export, import_
from handlers.ops.workspaces import create_state
from handlers.ops.writes import add, clear_by_type, compact, delete, update

_unbound = [op for op in OPERATIONS if op not in HANDLERS]
if _unbound:
    raise ImportError(f"operations without a handler function: {', '.join(_unbound)}")

__all__ = [
    "HANDLERS",
    "Deps",
    "Handler",
    "add",
    "apply",
    "capture",
    "clear_by_type",
    "compact",
    "create_state",
    "delete",
    "describe",
    "export",
    "get",
    "history",
    "import_",
    "list_",
    "people",
    "recall",
    "reconcile",
    "search",
    "timeline",
    "update",
]
