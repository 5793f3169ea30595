"""The one place that turns request bytes into a message, runs the operation, and turns the
result or error into reply bytes. Every endpoint shares this error path."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec
import msgspec.inspect as mi
import numpy as np
import structlog
from opentelemetry import trace

from contracts import limits
from contracts.messages import NAME_PATTERN, Context, ErrorReply, Request
from contracts.operations import FULL_TRUST_OPERATIONS, REQUEST_TYPES
from contracts.subjects import (
    FULL_TRUST,
    NAMESPACE_PATTERN,
    REDUCED_TRUST,
    is_valid_namespace,
    parse_request_subject,
)
from handlers.errors import Forbidden, HandlerError, InvalidRequest, TooLarge, VersionConflict
from handlers.fit import fitted
from handlers.ops import HANDLERS, Deps
from handlers.ops.checks import check_context
from handlers.ops.deps import ACCESS, Access, DurableWrite
from handlers.store.failures import as_unavailable, redis_error_kind
from handlers.tracing import SERVER_FAULTS, note_reply, start_request_span, trace_id

if TYPE_CHECKING:
    from handlers.metrics import Metrics

log = structlog.get_logger("membus.dispatch")

FULL_TRUST_ONLY = frozenset(FULL_TRUST_OPERATIONS)
_decoders = {op: msgspec.json.Decoder(cls) for op, cls in REQUEST_TYPES.items()}
_encoder = msgspec.json.Encoder()
_UNKNOWN_FIELD_RE = re.compile(r"unknown field `([^`]*)`")
_FIELD_PATH_RE = re.compile(r"at `\$\.(\w+)`$")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
# Bracket byte -> depth step; every other byte 0.
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


def nesting_depth(body: bytes) -> int:
    """How deep a JSON body's arrays and objects nest, in passes linear in its size.

    Brackets inside strings do not nest. Escapes are dropped first (`\\\\` before `\\"`, as a
    JSON reader pairs backslashes from the left), so every remaining quote opens or closes
    a string, and the text outside strings is every other piece between quotes. (A regex
    that skips strings backtracks quadratically on an unterminated run of escaped quotes.)
    """
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])
    steps = _STEP[np.frombuffer(outside, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def check_nesting(body: bytes, max_depth: int = limits.MAX_NESTING) -> None:
    """Refuse absurd nesting before the decoder recurses into it."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return
    if nesting_depth(body) > max_depth:
        raise InvalidRequest(
            f"The request nests deeper than {max_depth} levels; flatten its free-form"
            " objects (`metadata`, `preferences`, `args`)."
        )


# How to get a field right, for the errors whose bare message would not say.
_NAME_HINT = (
    "is a name: 1 to 128 characters of printable text (spaces allowed), without line breaks"
    " and without leading or trailing blanks."
)
_FIELD_HINTS = {
    "ttl_s": f"ttl_s is whole seconds, 1 to {limits.MAX_TTL_S} (100 years); 0 is permanent.",
    "name": f"name {_NAME_HINT}",
    "workspace": f"workspace {_NAME_HINT}",
}


@functools.cache
def _request_info(op: str) -> mi.Type:
    """The request's type as msgspec describes it. Cached: `type_info` evaluates every
    annotation of the request, about a sixth of a handler's time under a burst of bad
    requests."""
    return mi.type_info(REQUEST_TYPES[op])


@functools.cache
def _allowed_values(op: str, name: str) -> tuple[object, ...]:
    """The values a Literal field of the request accepts (empty if it is not one)."""
    info = _request_info(op)
    for f in info.fields if isinstance(info, mi.StructType) else ():
        if f.name == name:
            for t in _members(f.type):
                if isinstance(t, mi.LiteralType):
                    return tuple(t.values)
    return ()


def _explain(op: str, exc: msgspec.ValidationError) -> str:
    text = str(exc)
    # The operation's own fields first, then those every request has (`context`).
    base = Request.__struct_fields__
    fields = [f for f in REQUEST_TYPES[op].__struct_fields__ if f not in base] + list(base)
    if match := _UNKNOWN_FIELD_RE.search(text):
        name, where = match.group(1), f"{op} request"
        if text.endswith("at `$.context`"):
            fields, where = list(Context.__struct_fields__), "`context`"
        close = difflib.get_close_matches(name, fields, n=1)
        hint = f' Did you mean "{close[0]}"?' if close else ""
        return f'Unknown field "{name}" in {where}.{hint} Known fields: {", ".join(fields)}.'
    # A name's regex says nothing to a reader; the hint below says it in words.
    text = text.replace(f"`str` matching regex {NAME_PATTERN!r}", "a name")
    # A check's own message (a ValueError in __post_init__) may end its sentence already.
    message = f"Invalid {op} request: {text.removesuffix('.')}."
    if match := _FIELD_PATH_RE.search(text):
        name = match.group(1)
        if allowed := _allowed_values(op, name):
            message += f" {name} must be one of: {', '.join(map(str, allowed))}."
        elif name in _FIELD_HINTS:
            message += f" {_FIELD_HINTS[name]}"
    return message


def decode_request(op: str, body: bytes) -> Request:
    if len(body) > limits.MAX_BODY_BYTES:
        raise TooLarge(
            f"The request body is {len(body)} bytes; the limit is {limits.MAX_BODY_BYTES}"
            " (256 KiB). Send less: content up to 32 KiB, metadata up to 8 KiB."
        )
    if not body.strip():
        body = b"{}"
    check_nesting(body)
    try:
        return _decoders[op].decode(body)
    except msgspec.ValidationError as exc:
        # What JSON libraries of other languages write for what we mean: an absent optional
        # field as null (taken as absent where the field has a default and takes no null),
        # a whole number as 10.0 (taken as 10 where an integer is wanted), a day as
        # 2026-01-31 (its first moment, UTC, where a time is wanted). Decoded again, only on
        # this path, so a valid request is decoded once.
        if (again := _as_meant(op, body)) is not None:
            try:
                return _decoders[op].decode(again)
            except msgspec.ValidationError as exc_again:
                raise InvalidRequest(_explain(op, exc_again)) from None
        raise InvalidRequest(_explain(op, exc)) from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(
            f"The request body is not valid JSON ({exc}). Send one UTF-8 JSON object."
        ) from None
    except UnicodeDecodeError:
        raise InvalidRequest(
            "The request body is not valid UTF-8 (a string holds bytes of another encoding)."
            " Send one UTF-8 JSON object."
        ) from None
    except RecursionError:
        raise InvalidRequest(
            "The request nests too deeply; flatten its free-form objects (`metadata`,"
            " `preferences`, `args`)."
        ) from None


def _as_meant(op: str, body: bytes) -> bytes | None:
    """The body without the nulls of fields that have a default but take no null, with
    whole numbers written as floats (10.0) as integers where an integer is wanted and days
    as their first moment (UTC) where a time is wanted, at any depth the request's types
    reach; None when it holds none of them."""
    try:
        value = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    changed = [0]
    value = _meant(value, _request_info(op), changed)
    return _encoder.encode(value) if changed[0] else None


def _members(info: mi.Type) -> tuple[mi.Type, ...]:
    return info.types if isinstance(info, mi.UnionType) else (info,)


def _meant(value: object, info: mi.Type, changed: list[int]) -> object:
    if isinstance(value, str) and _DATE_RE.fullmatch(value):
        if any(isinstance(t, mi.DateTimeType) for t in _members(info)):
            changed[0] += 1
            return f"{value}T00:00:00Z"  # a date: its first moment, UTC
        return value
    if isinstance(value, float) and value.is_integer():
        kinds = _members(info)
        if any(isinstance(t, mi.IntType) for t in kinds) and not any(
            isinstance(t, mi.FloatType) for t in kinds
        ):
            changed[0] += 1
            return int(value)
        return value
    if isinstance(value, list) and isinstance(info, mi.ListType):
        return [_meant(v, info.item_type, changed) for v in value]
    if not isinstance(value, dict):
        return value
    if isinstance(info, mi.UnionType):
        # The object's struct: the one its tag names, or the only one.
        shapes = [t for t in info.types if isinstance(t, mi.StructType)]
        tagged = [t for t in shapes if t.tag_field and value.get(t.tag_field) == t.tag]
        if not shapes:
            return value
        info = (tagged or shapes)[0]
    if not isinstance(info, mi.StructType):
        return value
    fields = {f.encode_name: f for f in info.fields}
    out: dict[str, object] = {}
    for name, v in value.items():
        field = fields.get(name)
        if field is None:
            out[name] = v  # unknown: the decoder refuses it by name
        elif v is None and not field.required and not _takes_null(field.type):
            changed[0] += 1
        else:
            out[name] = _meant(v, field.type, changed)
    return out


def _takes_null(info: mi.Type) -> bool:
    return any(isinstance(t, mi.NoneType | mi.AnyType) for t in _members(info))


def _result_count(reply: msgspec.Struct) -> int | None:
    for name in ("results", "memories", "data"):
        items = getattr(reply, name, None)
        if isinstance(items, list):
            return len(items)
    for name in ("deleted", "total"):
        value = getattr(reply, name, None)
        if isinstance(value, int):
            return value
    return None


def error_body(error: HandlerError) -> bytes:
    if isinstance(error, VersionConflict):
        return _encoder.encode(
            ErrorReply(
                code=error.code,
                error=error.message,
                id=error.memory_id if error.memory_id is not None else msgspec.UNSET,
                current_version=error.current_version,
            )
        )
    return _encoder.encode(ErrorReply(code=error.code, error=error.message))


def caller_access(op: str, trust: str, explicit: bool = False) -> Access:
    """The caller's access from the subject's trust token; `forbidden` where it has none.
    `explicit`: the subject spells the token out (`mem.<ns>.<op>.<trust>`). Full trust has
    no token (PROTOCOL "Trust and stores"), so a spelt-out `full` is unknown like any other:
    otherwise a permission written for the three reduced tokens would not cover it."""
    access = None if explicit and trust == FULL_TRUST else ACCESS.get(trust)
    if access is None:
        raise InvalidRequest(
            f"Unknown trust level {trust!r} in the subject. Use mem.<ns>.{op} (full trust) or"
            f" mem.<ns>.{op}.<trust> with one of: {', '.join(REDUCED_TRUST)}."
        )
    if not access.visible:
        raise Forbidden(
            f"Trust {trust!r} sees no memory store, so every operation is forbidden to it."
            " Ask the operator for a higher trust level (inner or familiar)."
        )
    if op in FULL_TRUST_ONLY and trust != FULL_TRUST:
        raise Forbidden(
            f"{op} needs full trust (mem.<ns>.{op}); at trust {trust!r} only memory operations"
            " in your visible stores are allowed (add, search, recall, list, get, ...)."
        )
    return access


async def dispatch(
    op: str,
    subject: str,
    body: bytes,
    deps: Deps,
    write: DurableWrite | None = None,
    headers: Mapping[str, str] | None = None,
    received: float | None = None,
) -> tuple[bytes, HandlerError | None]:
    """Reply bytes, and the error when the reply is one. `write` is set for a durable write:
    its request id names the request in the logs and in the events it causes. `headers`
    (the request message's) carry the caller's trace context; `received` (perf_counter) is
    when the request arrived, so that its wait for a slot counts in its measured duration."""
    started = time.perf_counter()
    request_id = write.request_id if write is not None else uuid.uuid4().hex[:16]
    parsed = parse_request_subject(subject)
    ns, trust = (parsed[0], parsed[2]) if parsed else ("", FULL_TRUST)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id, op=op, ns=ns)
    if trust != FULL_TRUST:
        structlog.contextvars.bind_contextvars(trust=trust)
    if deps.tracer is None:
        out, error = await _run(op, subject, body, deps, write, ns, trust, request_id)
    else:
        span = start_request_span(
            deps.tracer, op, subject, ns, headers, durable=write is not None, request_id=request_id
        )
        if (tid := trace_id(span)) is not None:
            structlog.contextvars.bind_contextvars(trace_id=tid)
        # Current while the operation runs, so that its Redis commands are its children.
        with trace.use_span(span, end_on_exit=True):
            out, error = await _run(op, subject, body, deps, write, ns, trust, request_id)
            note_reply(span, error)
    if deps.metrics is not None:
        _measure(
            deps.metrics,
            op,
            error,
            time.perf_counter() - (started if received is None else received),
        )
    return out, error


def shed(
    op: str,
    subject: str,
    deps: Deps,
    error: HandlerError,
    headers: Mapping[str, str] | None = None,
    received: float | None = None,
) -> None:
    """Count and trace a request that admission refused (it never reached `dispatch`)."""
    if deps.tracer is not None:
        parsed = parse_request_subject(subject)
        ns = parsed[0] if parsed else ""
        span = start_request_span(deps.tracer, op, subject, ns, headers, durable=False)
        note_reply(span, error)
        span.end()
    if deps.metrics is not None:
        waited = time.perf_counter() - received if received is not None else 0.0
        _measure(deps.metrics, op, error, waited)


def _measure(metrics: Metrics, op: str, error: HandlerError | None, seconds: float) -> None:
    metrics.request_done(op, "ok" if error is None else error.code, seconds)
    if error is not None:
        count_redis_error(metrics, error)


def count_redis_error(metrics: Metrics | None, error: HandlerError) -> None:
    """Count the Redis error behind a failure of the handler's own, if one is."""
    if metrics is not None and error.code in SERVER_FAULTS:
        kind = redis_error_kind(error)
        if kind is not None:
            metrics.redis_error(kind)


async def _run(
    op: str,
    subject: str,
    body: bytes,
    deps: Deps,
    write: DurableWrite | None,
    ns: str,
    trust: str,
    request_id: str,
) -> tuple[bytes, HandlerError | None]:
    started = time.perf_counter()
    error: HandlerError | None = None
    count: int | None = None
    try:
        if not is_valid_namespace(ns):
            raise InvalidRequest(
                f"Namespace {ns!r} in subject {subject!r} must match {NAMESPACE_PATTERN}."
            )
        access = caller_access(op, trust, explicit=subject.count(".") == 3)
        if access is not deps.access or write is not None:
            deps = dataclasses.replace(deps, access=access, write=write)
        request = decode_request(op, body)
        if request.context is not None:
            check_context(request.context)
            if request.context.session_id:
                structlog.contextvars.bind_contextvars(session_id=request.context.session_id)
        # On a Redis Cluster, a pooled namespace's keys carry its pool's tag.
        ns = await deps.store.locate(ns)
        reply = await HANDLERS[op](ns, request, deps)
        out = fitted(reply, deps.max_payload)
        count = _result_count(reply)
    except HandlerError as exc:
        error = exc
    except Exception as exc:
        # A Redis failure that reached here past the store's guard is still `unavailable`.
        error = as_unavailable(exc)
        if error is not None:  # where the traceback shows the call that lacks a guard
            log.warning("request.unguarded_redis_failure", exc_info=True)
        else:
            log.exception("request.failed")
            error = HandlerError(
                f"Internal error (correlation id {request_id}); the handler logs have the details."
            )
    if error is not None:
        out = error_body(error)
    log.info(
        "request.done",
        ms=round((time.perf_counter() - started) * 1000, 3),
        count=count,
        code=error.code if error else None,
    )
    return out, error
