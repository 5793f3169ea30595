"""Conversions between stored hashes and reply records, and between times and epoch ms."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import msgspec

from contracts.messages import CompactMemory, Memory, ScoredMemory, preview
from handlers.schema import PERMANENT_MS
from handlers.store import StoredMemory

_EMPTY_OBJECT = msgspec.Raw(b"{}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ms_to_dt(ms: int) -> datetime:
    # Integer arithmetic keeps millisecond timestamps exact (no float rounding to .122999).
    return datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def dt_to_ms(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    # Exact integer arithmetic: float timestamps can lose the last millisecond.
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def expiry_dt(expires_ms: int) -> datetime | None:
    return None if expires_ms >= PERMANENT_MS else ms_to_dt(expires_ms)


def split_tags(raw: str | None) -> list[str]:
    return [t for t in raw.split(",") if t] if raw else []


def _common(m: StoredMemory) -> dict[str, object]:
    f = m.fields
    return {
        "id": f["id"],
        "type": f["type"],
        "content": f.get("content", ""),
        "tags": split_tags(f.get("tags")),
        "importance": float(f.get("importance", 0.0)),
        "workflow_id": f.get("wf"),
        "agent_id": f.get("agent_id"),
        "source": f.get("source"),
        # Returned exactly as the writer sent it.
        "metadata": msgspec.Raw(f["metadata"]) if f.get("metadata") else _EMPTY_OBJECT,
        "created_at": ms_to_dt(int(f["created_at"])),
        "updated_at": ms_to_dt(int(f.get("updated_at", f["created_at"]))),
        "expires_at": expiry_dt(int(f["expires_at"])),
        "access_count": m.access_count,
        "last_accessed_at": ms_to_dt(m.last_accessed_ms) if m.last_accessed_ms else None,
        "mention_count": int(f.get("mention_count", 1)),
    }


def to_memory(m: StoredMemory) -> Memory:
    return Memory(**_common(m))  # type: ignore[arg-type]


def to_scored(
    m: StoredMemory, score: float, similarity: float, text_score: float = 0.0
) -> ScoredMemory:
    return ScoredMemory(
        **_common(m),  # type: ignore[arg-type]
        score=score,
        similarity=similarity,
        text_score=text_score,
    )


def estimate_tokens(text: str) -> int:
    """The token estimate of PROTOCOL's `max_tokens`: one token per 4 characters, rounded up."""
    return (len(text) + 3) // 4


def fits_budget(text: str, spent: int, budget: int | None) -> tuple[bool, int]:
    """Whether `text` still fits in the budget after `spent` tokens, and the new total."""
    total = spent + estimate_tokens(text)
    return budget is None or total <= budget, total


def to_compact(m: StoredMemory) -> CompactMemory:
    f = m.fields
    return CompactMemory(
        id=f["id"],
        type=f["type"],
        preview=preview(f.get("content", "")),
        tags=split_tags(f.get("tags")),
        importance=float(f.get("importance", 0.0)),
        workflow_id=f.get("wf"),
        created_at=ms_to_dt(int(f["created_at"])),
    )
