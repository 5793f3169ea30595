"""The search ranking: a candidate's relevance (cosine, BM25, or both fused) and its final
`score = w_sim*relevance + w_imp*importance + w_rec*recency (+ w_men*mentions)`."""

from __future__ import annotations

import numpy as np

from handlers.settings import RankWeights

DAY_MS = 24 * 3600 * 1000


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


RRF_K = 60


def fuse_linear(cos: float, text: float, alpha: float) -> float:
    """Weighted fusion of cosine (0..1) and max-normalised BM25 (0..1)."""
    return alpha * cos + (1.0 - alpha) * text


def rrf(ranks: list[int | None], k: int = RRF_K) -> float:
    """Reciprocal-rank fusion of 1-based ranks (None: absent from that list)."""
    return sum(1.0 / (k + r) for r in ranks if r is not None)


def mmr_order(scores: np.ndarray, vectors: np.ndarray, weight: float) -> list[int]:
    """Greedy maximal marginal relevance: the order in which to take candidates (scores best
    first, rows of unit vectors; a zero row is a candidate with no vector, never redundant).
    Each step takes the best `weight*score - (1-weight)*redundancy`, where redundancy is the
    highest cosine to a candidate already taken (none before the first vector is taken).
    One matrix product and O(n) vector work a step, instead of O(n^2) dot products a step."""
    n = len(scores)
    sims = (vectors @ vectors.T).astype(np.float64)
    has = np.any(vectors != 0, axis=1)
    gain = weight * scores.astype(np.float64)
    penalty = 1.0 - weight
    redundancy = np.zeros(n)
    value = np.empty(n)
    seen = False  # whether a candidate with a vector was taken yet
    order: list[int] = []
    for _ in range(n):
        if seen:
            np.multiply(redundancy, penalty, out=value)
            np.subtract(gain, value, out=value)
            best = int(np.argmax(value))  # the first of equals: the better-ranked one
        else:
            best = int(np.argmax(gain))
        order.append(best)
        gain[best] = -np.inf  # taken
        if has[best]:
            # Candidates without a vector have a zero row: their redundancy stays 0.
            if seen:
                np.maximum(redundancy, sims[best], out=redundancy)
            else:
                np.copyto(redundancy, sims[best])
            seen = True
    return order
