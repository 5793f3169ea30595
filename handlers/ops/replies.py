"""Stored records as the protocol shows them, and wire memories as they are stored.

The mapping goes by field name: a field that `Record` and a wire struct (`Memory`,
`ScoredMemory`, `ExportedMemory`, `ImportedMemory`, a request) both have is copied as it is;
`TO_WIRE` converts the few whose form differs (epoch ms <-> datetime, tuples, metadata kept
as JSON text), and `READ_ONLY` names the wire fields a read supplies itself. A field new in
`Record` and in the contracts is thereby stored, returned, exported and imported with no
other change (tests/unit/test_record.py checks that every wire field is accounted for).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, get_args

import msgspec

from contracts.messages import (
    CompactMemory,
    ExportedMemory,
    Memory,
    MemoryStore,
    ReadScope,
    RecalledMemory,
    ScoredMemory,
    preview,
)
from handlers.ops.clock import expiry_dt, ms_to_dt, opt_dt, opt_ms
from handlers.store import filters
from handlers.store.record import Fetched, Record, Summary, pushed_expiry

W = TypeVar("W", bound=msgspec.Struct)
L = TypeVar("L", bound=str)

# The values of the contract's Literal types that the store keeps as plain text.
_STORES: tuple[MemoryStore, ...] = get_args(MemoryStore)
_SCOPES: tuple[ReadScope, ...] = get_args(ReadScope)

_EMPTY_OBJECT = msgspec.Raw(b"{}")

# Record field -> its wire value, where the two forms differ.
TO_WIRE: dict[str, Callable[[Record], Any]] = {
    "tags": lambda r: list(r.tags),
    # Returned exactly as the writer sent it.
    "metadata": lambda r: msgspec.Raw(r.metadata) if r.metadata else _EMPTY_OBJECT,
    "created_at": lambda r: ms_to_dt(r.created_at),
    "updated_at": lambda r: ms_to_dt(r.updated_at),
    "expires_at": lambda r: expiry_dt(r.expires_at),
    "valid_from": lambda r: opt_dt(r.valid_from),
    "valid_until": lambda r: opt_dt(r.valid_until),
}
# Wire field -> its record value, where the two forms differ and `as_record` converts it.
FROM_WIRE: dict[str, Callable[[Any], Any]] = {
    "valid_from": opt_ms,
    "valid_until": opt_ms,
}
# Wire fields of a memory that its record does not hold: the read that returns it gives them.
READ_ONLY = frozenset(
    {
        "access_count",
        "last_accessed_at",
        "score",
        "similarity",
        "text_score",
        "path",
        "embedding",
        "embedding_of",
    }
)
_RECORD_FIELDS = frozenset(Record.__struct_fields__)


def as_wire(cls: type[W], rec: Record, **given: Any) -> W:
    """`rec` as the wire struct `cls`: its fields by name (`TO_WIRE` where converted), and
    `given` for what the read supplies."""
    values: dict[str, Any] = {}
    for name in cls.__struct_fields__:
        if name in given:
            values[name] = given[name]
        elif name in TO_WIRE:
            values[name] = TO_WIRE[name](rec)
        elif name in _RECORD_FIELDS:
            values[name] = getattr(rec, name)
    return cls(**values)


def as_record(source: msgspec.Struct, **given: Any) -> Record:
    """A record from a wire struct (an import's memory, a request): the fields `Record`
    shares with it by name, and `given` for those computed or converted."""
    values = {
        name: FROM_WIRE.get(name, _same)(getattr(source, name))
        for name in source.__struct_fields__
        if name in _RECORD_FIELDS and name not in given
    }
    return Record(**values, **given)


def one_of(value: str, allowed: tuple[L, ...]) -> L:
    """`value`, known only as text, as the Literal type whose values (`get_args`) are
    `allowed`; a ValueError if it is none of them."""
    for candidate in allowed:
        if value == candidate:
            return candidate
    raise ValueError(f"{value!r} is none of {', '.join(allowed)}")


def wire_store(rec: Record) -> MemoryStore:
    """The record's store as the protocol names it (the store writes only those)."""
    return one_of(rec.store, _STORES)


def wire_scope(scope: filters.ReadScope) -> ReadScope:
    """What a read covered, as the protocol's `scope` names it."""
    return one_of(scope.applied, _SCOPES)


def _same(value: Any) -> Any:
    return value


def _counters(access_count: int, last_accessed_ms: int | None, expires_ms: int) -> dict[str, Any]:
    # `expires_ms`: when the memory's keys expire after this request's own access (the read
    # gives it); a record's stored `expires_at` runs ahead of that for an idle memory.
    return {
        "access_count": access_count,
        "last_accessed_at": ms_to_dt(last_accessed_ms) if last_accessed_ms else None,
        "expires_at": expiry_dt(expires_ms),
    }


def to_memory(
    rec: Record,
    access_count: int = 0,
    last_accessed_ms: int | None = None,
    *,
    expires_ms: int,
) -> Memory:
    return as_wire(Memory, rec, **_counters(access_count, last_accessed_ms, expires_ms))


def to_exported(
    f: Fetched, embedding: list[float] | None = None, embedding_of: str | None = None
) -> ExportedMemory:
    """An exported memory: as it is, its expiry untouched by the export."""
    counters = _counters(f.access_count, f.last_accessed_ms, f.expires_ms)
    return as_wire(
        ExportedMemory, f.record, **counters, embedding=embedding, embedding_of=embedding_of
    )


def to_scored(
    f: Fetched,
    now_ms: int,
    *,
    score: float,
    similarity: float,
    text_score: float,
) -> ScoredMemory:
    """A found memory, read without counting its access, which is counted (and an idle
    memory's expiry pushed) at `now_ms`, right after the reply."""
    expires = pushed_expiry(f.record, f.expires_ms, now_ms)
    counters = _counters(f.access_count, f.last_accessed_ms, expires)
    scores = {"score": score, "similarity": similarity, "text_score": text_score}
    return as_wire(ScoredMemory, f.record, **counters, **scores)


def to_recalled(scored: ScoredMemory, path: str) -> RecalledMemory:
    """A recall's result: the scored memory and the `path` that found it."""
    return RecalledMemory(**msgspec.structs.asdict(scored), path=path)


def to_compact(s: Summary) -> CompactMemory:
    return CompactMemory(
        id=s.id,
        type=s.type,
        preview=preview(s.content),
        tags=list(s.tags),
        importance=s.importance,
        workflow_id=s.workflow_id,
        created_at=ms_to_dt(s.created_at),
    )
