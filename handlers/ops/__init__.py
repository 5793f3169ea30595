"""The operations of PROTOCOL.md as plain async functions: `(ns, request, deps) -> reply`.

They know nothing of NATS; `handlers.dispatch` turns bytes into requests and replies into
bytes. Reads and writes go through `handlers.store`, vectors come from `handlers.embed`.
Each function binds itself to its operation with `@handles(<its request type>)`; importing
this package imports every module in it (so a new one needs no line here), and refuses to
start with an operation left unbound.
"""

from __future__ import annotations

import importlib
import pkgutil

from contracts.operations import OPERATIONS
from handlers.ops.deps import Deps
from handlers.ops.registry import HANDLERS, Handler

for _module in pkgutil.iter_modules(__path__, f"{__name__}."):
    importlib.import_module(_module.name)

_unbound = [op for op in OPERATIONS if op not in HANDLERS]
if _unbound:
    raise ImportError(f"operations without a handler function: {', '.join(_unbound)}")

__all__ = ["HANDLERS", "Deps", "Handler"]
