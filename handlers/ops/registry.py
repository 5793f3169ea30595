"""Where each operation's function is bound to its request type (`contracts.operations`).

`@handles(AddRequest)` checks, statically, that the function takes that request, and at run
time, that the request type is an operation's and that no other function claimed it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from contracts.messages import Request
from contracts.operations import BY_REQUEST
from handlers.ops.deps import Deps

R = TypeVar("R", bound=Request)
S = TypeVar("S", bound=msgspec.Struct)

Handler = Callable[[str, Any, Deps], Awaitable[msgspec.Struct]]
# Operation name -> its function, filled as the modules of handlers.ops are imported.
HANDLERS: dict[str, Handler] = {}


def handles(
    request: type[R],
) -> Callable[[Callable[[str, R, Deps], Awaitable[S]]], Callable[[str, R, Deps], Awaitable[S]]]:
    op = BY_REQUEST.get(request)
    if op is None:
        raise TypeError(f"{request.__name__} is no operation's request (contracts.operations)")

    def bind(fn: Callable[[str, R, Deps], Awaitable[S]]) -> Callable[[str, R, Deps], Awaitable[S]]:
        if op.name in HANDLERS:
            raise TypeError(f"operation {op.name!r} is bound twice: {HANDLERS[op.name]} and {fn}")
        HANDLERS[op.name] = fn
        return fn

    return bind
