"""The search ranking: `score = w_sim*similarity + w_imp*importance + w_rec*recency`."""

from __future__ import annotations

import msgspec

DAY_MS = 24 * 3600 * 1000


class RankWeights(msgspec.Struct, frozen=True, kw_only=True):
    similarity: float = 0.70
    importance: float = 0.15
    recency: float = 0.15
    # Weight of min(mention_count / 10, 1): how often the same content was added.
    mention: float = 0.0
    # Recency falls linearly from 1.0 (created now) to 0.0 at this age.
    recency_days: float = 30.0


def similarity(cosine_distance: float) -> float:
    """Cosine similarity clamped to 0..1 from a RediSearch COSINE distance (0..2)."""
    return min(1.0, max(0.0, 1.0 - cosine_distance))


def recency(created_ms: int, now_ms: int, days: float) -> float:
    age = max(0, now_ms - created_ms)
    return max(0.0, 1.0 - age / (days * DAY_MS))


def score(
    sim: float,
    importance: float,
    created_ms: int,
    now_ms: int,
    w: RankWeights,
    mentions: int = 1,
) -> float:
    return (
        w.similarity * sim
        + w.importance * importance
        + w.recency * recency(created_ms, now_ms, w.recency_days)
        + w.mention * min(mentions / 10, 1.0)
    )


def overfetch(limit: int) -> int:
    """Vector candidates fetched so importance and recency can reorder them."""
    return max(5 * limit, 50)
