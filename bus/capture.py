"""Capture of tool runs: wrap an agent's async tools so that every call is stored as a
`trace` memory (PROTOCOL v2, "Capture of tool runs"), with its arguments, output, error
flag and duration.

    @captured(mem)
    async def read_file(path: str) -> str: ...

    async with capturing(mem, "shell", {"cmd": cmd}) as run:
        run.output = await shell(cmd)

A capture is published and forgotten: it never waits for a handler, never slows the tool
down by more than encoding one message, and a capture that fails is logged, never raised.
The tool's own result and exceptions pass through untouched.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, ParamSpec, TypeVar

import msgspec
import structlog

from bus.client import AgentMemory
from contracts import limits
from contracts.messages import clip

log = structlog.get_logger("membus.capture")

P = ParamSpec("P")
T = TypeVar("T")
# A string argument longer than this is cut before it is sent (the trace keeps 2 KiB of
# arguments in all, so more would only cost bandwidth).
_ARG_BYTES = limits.CAPTURE_ARGS_BYTES


class Run:
    """What `capturing` records of a run: set `output` to what the tool produced."""

    __slots__ = ("output",)

    def __init__(self) -> None:
        self.output: Any = ""


def _builtin(value: Any) -> Any:
    """A JSON-ready copy of an argument: unknown objects as their repr, long strings cut."""
    plain = msgspec.to_builtins(value, enc_hook=repr, str_keys=True)
    if isinstance(plain, str):
        return clip(plain, _ARG_BYTES)
    if isinstance(plain, dict):
        return {k: _builtin(v) for k, v in plain.items()}
    if isinstance(plain, list):
        return [_builtin(v) for v in plain]
    return plain


def _text(result: Any) -> str:
    if isinstance(result, str):
        text = result
    elif isinstance(result, bytes):
        text = result.decode(errors="replace")
    else:
        text = msgspec.json.encode(result, enc_hook=repr).decode()
    return clip(text, limits.CAPTURE_OUTPUT_BYTES)


async def send_capture(
    memory: AgentMemory,
    tool: str,
    args: dict[str, Any],
    output: Any,
    error: bool,
    duration_ms: float,
    durable: bool = False,
) -> bool:
    """Publish one tool run; False (and a log line) when it could not be sent. `durable`:
    through JetStream, waiting for its acknowledgement (so the run is not lost even when no
    handler is up), instead of a plain publish."""
    try:
        req = memory.capture_request(
            tool,
            args=_builtin(args),
            output=_text(output),
            error=error,
            duration_ms=round(duration_ms, 3),
        )
        if durable:
            await memory.bus.durable("capture", req)
        else:
            await memory.bus.publish("capture", req)
    except Exception as exc:  # a capture must never break the tool it records
        log.warning("capture.failed", tool=tool, error=f"{type(exc).__name__}: {exc}")
        return False
    return True


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def captured(
    memory: AgentMemory, tool: str | None = None, *, durable: bool = False
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """Decorate an async tool so that each call is captured (named `tool`, by default the
    function's name). Arguments are recorded by parameter name. `durable`: each capture
    goes through JetStream and waits for its acknowledgement (see `send_capture`)."""

    def wrap(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"captured() wraps async functions; {fn!r} is not one")
        name = tool or fn.__name__
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                bound = signature.bind_partial(*args, **kwargs).arguments
            except TypeError:
                bound = {"args": list(args), **kwargs}
            call_args = {k: v for k, v in bound.items() if k not in ("self", "cls")}
            start = time.perf_counter()
            try:
                result = await fn(*args, **kwargs)
            except Exception as exc:
                ms = (time.perf_counter() - start) * 1000
                await send_capture(memory, name, call_args, _error_text(exc), True, ms, durable)
                raise
            ms = (time.perf_counter() - start) * 1000
            await send_capture(memory, name, call_args, result, False, ms, durable)
            return result

        return run

    return wrap


@asynccontextmanager
async def capturing(
    memory: AgentMemory, tool: str, args: dict[str, Any] | None = None, *, durable: bool = False
) -> AsyncIterator[Run]:
    """Capture the run of a block: set `run.output`; an exception marks it as an error
    (and goes on up)."""
    run = Run()
    start = time.perf_counter()
    try:
        yield run
    except Exception as exc:
        ms = (time.perf_counter() - start) * 1000
        await send_capture(memory, tool, args or {}, _error_text(exc), True, ms, durable)
        raise
    ms = (time.perf_counter() - start) * 1000
    await send_capture(memory, tool, args or {}, run.output, False, ms, durable)
