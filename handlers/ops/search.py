"""The one search code path: vector, full-text (BM25) and hybrid candidates, fused, then
ranked with importance and recency, cut by `min_score`, `limit` and `max_tokens`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec
import numpy as np

from contracts.messages import ScoredMemory, SearchMode, SearchReply, SearchRequest
from handlers.ops import ranking
from handlers.ops.budget import fits_budget
from handlers.ops.checks import check_types
from handlers.ops.clock import dt_to_ms
from handlers.ops.deps import Deps
from handlers.ops.registry import handles
from handlers.ops.replies import to_scored
from handlers.ops.scoping import ReadTime, read_scope, read_time
from handlers.ops.terms import query_terms
from handlers.ops.vectors import request_vector
from handlers.store.filters import CURRENT, ReadScope, Scoped, read_filter
from handlers.store.record import Candidate
from handlers.store.text import text_terms


class Ranked(NamedTuple):
    """A live candidate with its final score and the signals behind it."""

    score: float
    relevance: float
    created_at: int
    id: str
    cosine: float
    text: float

    def order(self) -> tuple[float, float, int]:
        """Best first: score, then relevance, then the newer."""
        return self.score, self.relevance, self.created_at


@dataclass
class Candidates:
    """What the vector and full-text queries found: each memory with its signals."""

    pool: dict[str, Candidate] = field(default_factory=dict)
    cosines: dict[str, float] = field(default_factory=dict)
    texts: dict[str, float] = field(default_factory=dict)  # BM25 / best BM25
    vec_rank: dict[str, int] = field(default_factory=dict)
    text_rank: dict[str, int] = field(default_factory=dict)
    top_bm25: float = 0.0


def _cosine(query: np.ndarray, vec: np.ndarray) -> float:
    denom = float(np.linalg.norm(query) * np.linalg.norm(vec))
    return float(np.dot(query, vec)) / denom if denom else 0.0


@handles(SearchRequest)
async def search(ns: str, req: SearchRequest, deps: Deps) -> SearchReply:
    now = deps.clock()
    found = await ranked_candidates(ns, req, deps, now)
    ranked = found.ranked
    if req.diversify is not None and req.diversify < 1.0 and len(ranked) > 1:
        ranked = await _diversified(ns, ranked, req.diversify, _mmr_depth(req.limit), deps)
    results = await _read_results(ns, req, deps, ranked, now)
    return SearchReply(results=results, mode=found.mode)


class RankedCandidates(NamedTuple):
    """A search's candidates, ranked, before their records are read."""

    mode: SearchMode
    ranked: list[Ranked]
    # The query's vector (None in text mode).
    vector: np.ndarray | None


async def ranked_candidates(
    ns: str, req: SearchRequest, deps: Deps, now: int, when: ReadTime | None = None
) -> RankedCandidates:
    """Every live candidate of the search at or above `min_score`, best first; `when`: the
    read's time rule, when the caller has made the namespace ready for it already."""
    settings = deps.settings
    check_types(settings.types, req.types)
    mode = req.mode or settings.search_mode
    terms = text_terms(query_terms(req.query or ""))
    if mode != "vector" and not terms and req.embedding is not None:
        mode = "vector"  # nothing to match as text: an embedding-only query
    # The words the text query reads across the namespace; the common ones are scored only
    # over the candidates found (see `Text.rare_words`).
    rare = terms
    if mode == "hybrid" and terms and settings.text_read_share_max < 1.0:
        rare = await deps.store.text.rare_words(
            ns, terms, settings.text_read_share_max, settings.text_read_docs_min
        )
    # Expiry is checked on the candidates below, not in the queries' filter: a numeric range
    # over every document slows RediSearch's hybrid KNN down.
    scope = read_scope(req.scope, req.workflow_id, req.workspace, deps.access.stores)
    if when is None:
        when = await read_time(ns, req.as_of, req.include_superseded, deps, now)
    where = read_filter(
        None,
        scope,
        types=req.types,
        tags=req.tags,
        people=req.people,
        since_ms=dt_to_ms(req.since) if req.since else None,
        until_ms=dt_to_ms(req.until) if req.until else None,
        as_of_ms=when.as_of_ms,
    )
    # The text query puts "not superseded" in each word's clause beside the filter, not in
    # it, and nothing around its OR of words (see `text_match`).
    current = when.current
    knn_where = where & CURRENT if current else where
    k = ranking.overfetch(req.limit)
    vec: np.ndarray | None = None
    if mode != "text":
        vec = await request_vector(ns, deps, text=req.query, given=req.embedding, query=True)
    scored_among = rare != terms and vec is not None
    # The vector and full-text queries run side by side.
    nearest, matches = await asyncio.gather(
        deps.store.queries.knn(
            ns, vec, knn_where, k, scoped=_scoped(req, scope, current), ended_by=when.ended_by
        )
        if vec is not None
        else _nothing(),
        # Only finding candidates, scored below where the superseded ones get no score:
        # "not superseded" cost a third of this query's Redis time at 100k.
        deps.store.text.text(
            ns,
            rare,
            where,
            k,
            current=current and not scored_among,
            finding=scored_among,
            ended_by=when.ended_by,
        )
        if mode != "vector" and rare
        else _nothing(),
    )
    if scored_among:
        # Every candidate's BM25 over every word, read among the candidates only: the same
        # scores a whole-namespace query gives them, for work bounded by their number. A
        # superseded candidate gets none, so it is dropped here.
        found = {m.id: m for m in [*nearest, *matches]}
        scores = await deps.store.text.text_scores(ns, terms, list(found), current)
        matches = [
            msgspec.structs.replace(found[mid], text_score=score)
            for mid, score in sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
        ]
    c = Candidates()
    for i, m in enumerate(nearest, 1):
        c.pool[m.id] = m
        c.cosines[m.id] = ranking.similarity(m.distance or 0.0)
        c.vec_rank[m.id] = i
    if matches:
        c.top_bm25 = max(m.text_score or 0.0 for m in matches)
        for i, m in enumerate(matches, 1):
            c.pool.setdefault(m.id, m)
            c.texts[m.id] = _normalised(m.text_score, c.top_bm25)
            c.text_rank[m.id] = i
        if vec is not None:
            # Scored among the candidates, every vector match has its text score already.
            full = (len(nearest) >= k, len(matches) >= k and not scored_among)
            await _fill_missing_scores(ns, req, deps, c, vec, terms, full, now, current)

    return RankedCandidates(mode, _ranked(mode, req, deps, c, now), vec)


def _scoped(req: SearchRequest, scope: ReadScope, current: bool) -> Scoped | None:
    """The search's filter as a scope alone, when nothing else narrows it."""
    narrowed = req.types or req.tags or req.people or req.since or req.until or req.as_of
    return None if narrowed else Scoped(scope, current)


def _normalised(bm25: float | None, top: float) -> float:
    return min(1.0, (bm25 or 0.0) / top) if top > 0 else 0.0


def _fusion(req: SearchRequest, deps: Deps) -> str:
    return req.fusion or deps.settings.hybrid_fusion


async def _fill_missing_scores(
    ns: str,
    req: SearchRequest,
    deps: Deps,
    c: Candidates,
    vec: np.ndarray,
    terms: list[str],
    full: tuple[bool, bool],
    now: int,
    current: bool,
) -> None:
    """Give hybrid candidates the signal their other query did not return: text matches the
    vector query missed get their true cosine, and vector matches beyond the text query's k
    get their true BM25 (otherwise which of many equal text scores made the cut would
    decide). With linear fusion, only those that could still make the results: beyond a
    query's k, a memory scores at most as well as that query's k-th."""
    knn_full, text_full = full
    linear = _fusion(req, deps) == "linear"
    extra = [mid for mid in c.text_rank if mid not in c.cosines]
    unscored = [mid for mid in c.cosines if mid not in c.texts] if text_full else []
    if linear:
        depth = req.limit if req.diversify is None else _mmr_depth(req.limit)
        bar = _score_to_beat(c, depth, deps, now)
        if knn_full:
            low_cos = min(c.cosines.values())
            extra = [m for m in extra if _total(c.pool[m], low_cos, c.texts[m], deps, now) >= bar]
        low_txt = min(c.texts.values())
        unscored = [
            m for m in unscored if _total(c.pool[m], c.cosines[m], low_txt, deps, now) >= bar
        ]
    stored, rescored = await asyncio.gather(
        deps.store.reads.vectors(ns, extra),
        deps.store.text.text_scores(ns, terms, unscored, current)
        if unscored and linear
        else _no_scores(),
    )
    for mid, v in stored.items():
        c.cosines[mid] = max(0.0, min(1.0, _cosine(vec, v)))
    for mid, score in rescored.items():
        c.texts[mid] = _normalised(score, c.top_bm25)
    for mid in c.text_rank:
        if mid not in c.cosines:
            del c.pool[mid]  # a text match that could not rank


def _ranked(mode: str, req: SearchRequest, deps: Deps, c: Candidates, now: int) -> list[Ranked]:
    """Live candidates at or above `min_score`, best first."""
    ranked = []
    alpha = deps.settings.hybrid_alpha
    for mid, m in c.pool.items():
        if m.expires_at <= now:
            continue
        cos, txt = c.cosines.get(mid, 0.0), c.texts.get(mid, 0.0)
        if mode == "vector":
            relevance = cos
        elif mode == "text":
            relevance = txt
        elif _fusion(req, deps) == "rrf":
            # Scaled so that rank 1 in both lists gives 1.0, like the other relevances.
            ranks = [c.vec_rank.get(mid), c.text_rank.get(mid)]
            relevance = ranking.rrf(ranks) / ranking.rrf([1, 1])
        else:
            relevance = ranking.fuse_linear(cos, txt, alpha)
        total = _final(m, relevance, deps, now)
        if req.min_score is None or total >= req.min_score:
            ranked.append(Ranked(total, relevance, m.created_at, mid, cos, txt))
    ranked.sort(key=Ranked.order, reverse=True)
    return ranked


def _mmr_depth(limit: int) -> int:
    return max(2 * limit, 20)


def _final(m: Candidate, relevance: float, deps: Deps, now: int) -> float:
    """A candidate's final score: its relevance with importance, recency and mentions."""
    return ranking.score(
        relevance, m.importance, m.created_at, now, deps.settings.weights, m.mention_count
    )


def _total(m: Candidate, cos: float, txt: float, deps: Deps, now: int) -> float:
    """The final score of a linear-fusion candidate with the given signals."""
    return _final(m, ranking.fuse_linear(cos, txt, deps.settings.hybrid_alpha), deps, now)


def _score_to_beat(c: Candidates, depth: int, deps: Deps, now: int) -> float:
    """The `depth`-th best score known for sure (a missing text score counts as 0, so it can
    only rise): a candidate whose best possible score is below it cannot make the results."""
    known = sorted(
        (_total(c.pool[m], cos, c.texts.get(m, 0.0), deps, now) for m, cos in c.cosines.items()),
        reverse=True,
    )
    return known[depth - 1] if len(known) >= depth else float("-inf")


async def _diversified(
    ns: str, ranked: list[Ranked], weight: float, depth: int, deps: Deps
) -> list[Ranked]:
    """Maximal marginal relevance over the best `depth` candidates (greedy)."""
    head, tail = ranked[:depth], ranked[depth:]
    stored = await deps.store.reads.vectors(ns, [r.id for r in head])
    dim = max((len(v) for v in stored.values()), default=0)
    vectors = np.zeros((len(head), dim), np.float32)
    for i, r in enumerate(head):
        v = stored.get(r.id)
        if v is not None and len(v) == dim and (n := float(np.linalg.norm(v))) > 0:
            vectors[i] = v / n
    scores = np.fromiter((r.score for r in head), np.float64, len(head))
    return [head[i] for i in ranking.mmr_order(scores, vectors, weight)] + tail


async def _nothing() -> list[Candidate]:
    return []


async def _no_scores() -> dict[str, float]:
    return {}


async def _read_results(
    ns: str, req: SearchRequest, deps: Deps, ranked: list[Ranked], now: int
) -> list[ScoredMemory]:
    """Read the best candidates' records until `limit` (or the token budget) is reached. Only
    returned memories count as accessed; one that vanished since the candidate queries
    (deleted, expired) gives its place to the next candidate."""
    budget = req.max_tokens
    # Without a budget, every live record read is returned, so the read counts its access
    # (one script call, not a second one after the reply). With one, which records fit is
    # known only after reading them: those returned are counted after the reply.
    counted = budget is None
    results: list[ScoredMemory] = []
    spent = 0
    while ranked and len(results) < req.limit:
        want = req.limit - len(results)
        batch, ranked = ranked[:want], ranked[want:]
        found = await deps.store.reads.fetch(ns, [r.id for r in batch], now, count_access=counted)
        for r, f in zip(batch, found, strict=True):
            if f is None:
                continue
            fits, spent = fits_budget(f.record.content, spent, budget)
            if not fits and results:
                ranked = []
                break
            results.append(
                to_scored(
                    f.record,
                    f.access_count,
                    f.last_accessed_ms,
                    score=r.score,
                    similarity=r.cosine,
                    text_score=r.text,
                )
            )
    if not counted:
        deps.store.reads.touch_later(ns, [r.id for r in results], now)
    return results
