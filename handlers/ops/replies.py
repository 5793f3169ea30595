"""Stored records as the protocol shows them: `Memory`, `ScoredMemory`, `CompactMemory`."""

from __future__ import annotations

from typing import Any

import msgspec

from contracts.messages import CompactMemory, ExportedMemory, Memory, ScoredMemory, preview
from handlers.ops.clock import expiry_dt, ms_to_dt
from handlers.store.record import Record, Summary

_EMPTY_OBJECT = msgspec.Raw(b"{}")


def _fields(rec: Record, access_count: int, last_accessed_ms: int | None) -> dict[str, Any]:
    return {
        "id": rec.id,
        "type": rec.type,
        "content": rec.content,
        "tags": list(rec.tags),
        "importance": rec.importance,
        "workflow_id": rec.workflow_id,
        "agent_id": rec.agent_id,
        "source": rec.source,
        # Returned exactly as the writer sent it.
        "metadata": msgspec.Raw(rec.metadata) if rec.metadata else _EMPTY_OBJECT,
        "created_at": ms_to_dt(rec.created_at),
        "updated_at": ms_to_dt(rec.updated_at),
        "expires_at": expiry_dt(rec.expires_at),
        "access_count": access_count,
        "last_accessed_at": ms_to_dt(last_accessed_ms) if last_accessed_ms else None,
        "mention_count": rec.mention_count,
        "session_id": rec.session_id,
        "title": rec.title,
        "facts": rec.facts,
        "narrative": rec.narrative,
        "related_files": rec.related_files,
        "related_people": rec.related_people,
        "superseded_by": rec.superseded_by,
        "workspace": rec.workspace,
        "store": rec.store,
    }


def to_memory(rec: Record, access_count: int = 0, last_accessed_ms: int | None = None) -> Memory:
    return Memory(**_fields(rec, access_count, last_accessed_ms))


def to_exported(
    rec: Record,
    access_count: int,
    last_accessed_ms: int | None,
    embedding: list[float] | None = None,
) -> ExportedMemory:
    return ExportedMemory(
        **_fields(rec, access_count, last_accessed_ms),
        content_hash=rec.content_hash,
        embedding=embedding,
    )


def to_scored(
    rec: Record,
    access_count: int,
    last_accessed_ms: int | None,
    *,
    score: float,
    similarity: float,
    text_score: float,
) -> ScoredMemory:
    return ScoredMemory(
        **_fields(rec, access_count, last_accessed_ms),
        score=score,
        similarity=similarity,
        text_score=text_score,
    )


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
