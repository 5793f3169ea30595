"""The one search code path: vector, full-text (BM25) and hybrid candidates, fused, then
ranked with importance and recency, cut by `min_score`, `limit` and `max_tokens`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
import numpy as np

from contracts.messages import ScoredMemory, SearchMode, SearchReply, SearchRequest
from handlers.ops import query_signals, ranking
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
from handlers.store.pick import Pickable
from handlers.store.queries import decode_docs
from handlers.store.record import Candidate, Fetched
from handlers.store.text import scores_of, text_terms
from handlers.store.trip import Queued


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
    """Cosine similarity clamped to 0..1, as `ranking.similarity` gives the vector query's."""
    denom = float(np.linalg.norm(query) * np.linalg.norm(vec))
    return max(0.0, min(1.0, float(np.dot(query, vec)) / denom)) if denom else 0.0


@handles(SearchRequest)
async def search(ns: str, req: SearchRequest, deps: Deps) -> SearchReply:
    now = deps.clock()
    diversify = req.diversify is not None and req.diversify < 1.0
    depth = _mmr_depth(req.limit) if diversify else req.limit
    # The second opinion (handlers/ops/rerank.py) re-orders the best of a search by text.
    texted = req.query and (req.mode or deps.settings.search_mode) != "text"
    second = deps.reranker if texted else None
    read = max(depth, second.depth) if second is not None else depth
    found = await ranked_candidates(ns, req, deps, now, read=read)
    ranked = found.ranked
    if second is not None and req.query:
        ranked = await second.rerank(req.query, ranked, found.records)
    if req.diversify is not None and diversify and len(ranked) > 1:
        ranked = _diversified(ranked, req.diversify, depth, found.vectors)
    results = await _read_results(ns, req, deps, ranked, now, found.records)
    return SearchReply(results=results, mode=found.mode)


class RankedCandidates(NamedTuple):
    """A search's candidates, ranked, and the records (None: vanished) and stored vectors
    read with their scores: those of every candidate that could make the best `read`."""

    mode: SearchMode
    ranked: list[Ranked]
    # The query's vector (None in text mode).
    vector: np.ndarray | None
    records: dict[str, Fetched | None]
    vectors: dict[str, np.ndarray]


# Candidates read beyond the best `read`, in case some vanished since the queries.
SPARE_READS = 2


async def ranked_candidates(
    ns: str,
    req: SearchRequest,
    deps: Deps,
    now: int,
    when: ReadTime | None = None,
    read: int = 0,
) -> RankedCandidates:
    """Every live candidate of the search at or above `min_score`, best first, in two
    round trips: the vector and full-text queries together, then what their candidates
    lack (the BM25 among them, stored vectors) with the records of those that could make
    the best `read` (0: none). `when`: the read's time rule, when the caller has it."""
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
        when = read_time(req.as_of, req.include_superseded, now)
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
    # The candidates' fields the query signals read (people, tags, times; see `_final`):
    # none unless the query names someone or some time and that signal is on.
    signals = query_signals.fields_needed(req.query or "", now, settings.weights)
    queries, text, reads = deps.store.queries, deps.store.text, deps.store.reads
    searches = []
    if vec is not None:
        scoped = _scoped(req, scope, current)
        searches.append(queries.knn_search(ns, vec, knn_where, k, scoped=scoped, signals=signals))
    texted = mode != "vector" and bool(rare)
    if texted:
        # Only finding candidates, scored below where the superseded ones get no score:
        # "not superseded" cost a third of this query's Redis time at 100k.
        found = current and not scored_among
        searches.append(
            text.text_search(rare, where, k, current=found, finding=scored_among, signals=signals)
        )
    nearest: list[Candidate] = []
    matches: list[Candidate] = []
    if searches:
        pages, _ = await queries.run(ns, searches, when.ended_by)
        nearest = decode_docs(ns, pages[0], Candidate) if vec is not None else []
        matches = decode_docs(ns, pages[-1], Candidate) if texted else []
    c = Candidates()
    for i, m in enumerate(nearest, 1):
        c.pool[m.id] = m
        c.cosines[m.id] = ranking.similarity(m.distance or 0.0)
        c.vec_rank[m.id] = i
    among = {m.id: m for m in [*nearest, *matches]}
    if signals:
        # Before any bound is taken (`_final` counts the boost), on both queries' copies of
        # a memory (copies made later keep it).
        query_signals.boost(req.query or "", now, settings.weights, [*nearest, *matches])
    depth = read or (_mmr_depth(req.limit) if req.diversify is not None else req.limit)
    if scored_among and vec is not None and among:
        return await _picked(ns, req, deps, c, among, terms, k, current, depth, read, now, vec)
    _add_matches(c, matches)
    extra: list[str] = []
    rescore: list[str] = []
    if vec is not None and matches:
        full = (len(nearest) >= k, len(matches) >= k)
        extra, rescore = _missing(req, deps, c, matches, full, depth, now)
    # In vector or text mode the one query's signal is the whole relevance: the ranking is
    # final already, and the records to read are its best.
    final = mode != "hybrid"
    ranked = _ranked(mode, req, deps, c, now) if final else []
    if final:
        chosen = [r.id for r in ranked[: read + SPARE_READS]]
    else:
        chosen = _could_make(req, deps, c, among, k, read + SPARE_READS, now)
    vectors = list(dict.fromkeys([*extra, *(chosen if req.diversify is not None else [])]))
    also: list[Queued[Any]] = [
        reads.vectors_queued(ns, vectors),
        reads.fetch_queued(ns, chosen if read else [], now),
    ]
    stored: dict[str, np.ndarray] = {}
    records: dict[str, Fetched | None] = {}
    scored: dict[str, float] = {}
    if rescore or vectors or (read and chosen):
        last = [text.scores_search(ns, terms, rescore, current)] if rescore else []
        pages, (stored, fetched) = await queries.run(ns, last, None, also)
        scored = scores_of(ns, pages[0]) if rescore else {}
        records = dict(zip(chosen if read else [], fetched, strict=True))
    for mid, score in scored.items():
        c.texts[mid] = _normalised(score, c.top_bm25)
    if vec is not None:
        for mid in extra:
            if (v := stored.get(mid)) is not None:
                c.cosines[mid] = _cosine(vec, v)
        if c.texts:
            for mid in c.text_rank:
                if mid not in c.cosines:
                    del c.pool[mid]  # a text match that could not rank
    if not final:
        ranked = _ranked(mode, req, deps, c, now)
    return RankedCandidates(mode, ranked, vec, records, stored)


async def _picked(
    ns: str,
    req: SearchRequest,
    deps: Deps,
    c: Candidates,
    among: dict[str, Candidate],
    terms: list[str],
    k: int,
    current: bool,
    depth: int,
    read: int,
    now: int,
    vec: np.ndarray,
) -> RankedCandidates:
    """A hybrid search whose words are scored among its candidates (`Text.rare_words`),
    from its queries' candidates on, in one more round trip: every candidate's BM25 over
    every word, read among them alone (the same scores a whole-namespace query gives them,
    for work bounded by their number), and, in the same script, the records of those that
    could make the best `read` given their scores, and the stored vectors of text matches
    the vector query did not return (`handlers.store.pick`). The script weighs each
    candidate by the bounds of its final score: with its cosine, or, not knowing it,
    between 0 and the vector query's k-th (beyond which it was not returned); a full text
    score adds the same to both. A superseded candidate gets no score, so a text match
    left without one is dropped; with RRF, whose ranks move with every score, every live
    candidate is read."""
    cos_cap = _cos_cap(c, k)
    pickable = []
    for m in among.values():
        cos = c.cosines.get(m.id)
        lo = _total(m, cos or 0.0, 0.0, deps, now)
        hi = lo if cos is not None else _total(m, cos_cap, 0.0, deps, now)
        pickable.append(Pickable(m.id, lo, hi, cos is None, m.expires_at > now))
    # The score is linear in the text score, with the same weight for every candidate.
    any_one = next(iter(among.values()))
    slope = _total(any_one, 0.0, 1.0, deps, now) - _total(any_one, 0.0, 0.0, deps, now)
    pick = deps.store.text.pick(
        ns,
        terms,
        pickable,
        slope,
        now,
        current,
        depth=0 if _fusion(req, deps) == "rrf" else (read or depth) + SPARE_READS,
        floor=req.min_score,
        records=read > 0,
        all_vectors=req.diversify is not None,
    )
    picked = await deps.store.queries.run_inside(ns, pick)
    ordered = sorted(picked.scores.items(), key=lambda kv: kv[1], reverse=True)
    _add_matches(c, [msgspec.structs.replace(among[mid], text_score=s) for mid, s in ordered])
    for mid, v in picked.vectors.items():
        if mid not in c.cosines:
            c.cosines[mid] = _cosine(vec, v)
    for mid in c.text_rank:
        if mid not in c.cosines:
            del c.pool[mid]  # a text match that could not make the results
    ranked = _ranked("hybrid", req, deps, c, now)
    return RankedCandidates("hybrid", ranked, vec, picked.records, picked.vectors)


def _add_matches(c: Candidates, matches: list[Candidate]) -> None:
    """The full-text matches, best first, with their BM25 relative to the best."""
    if not matches:
        return
    c.top_bm25 = max(m.text_score or 0.0 for m in matches)
    for i, m in enumerate(matches, 1):
        c.pool.setdefault(m.id, m)
        c.texts[m.id] = _normalised(m.text_score, c.top_bm25)
        c.text_rank[m.id] = i


def _missing(
    req: SearchRequest,
    deps: Deps,
    c: Candidates,
    matches: list[Candidate],
    full: tuple[bool, bool],
    depth: int,
    now: int,
) -> tuple[list[str], list[str]]:
    """What hybrid candidates lack from the query that did not return them: the text
    matches whose cosine is read from their stored vector, and the vector matches beyond
    the text query's k whose BM25 is read among themselves (otherwise which of many equal
    text scores made the cut would decide). With linear fusion, only those that could
    still make the best `depth`: beyond a query's k, a memory scores at most as well as
    that query's k-th."""
    knn_full, text_full = full
    linear = _fusion(req, deps) == "linear"
    extra = [m.id for m in matches if m.id not in c.cosines]
    unscored = [m for m in c.cosines if m not in c.texts] if text_full else []
    if linear:
        bar = _score_to_beat(c, depth, deps, now)
        if knn_full and c.cosines:
            low_cos = min(c.cosines.values())
            extra = [m for m in extra if _total(c.pool[m], low_cos, c.texts[m], deps, now) >= bar]
        if unscored:
            low_txt = min(c.texts.values())
            unscored = [
                m for m in unscored if _total(c.pool[m], c.cosines[m], low_txt, deps, now) >= bar
            ]
    return extra, unscored if linear else []


def _could_make(
    req: SearchRequest,
    deps: Deps,
    c: Candidates,
    among: dict[str, Candidate],
    k: int,
    depth: int,
    now: int,
) -> list[str]:
    """The hybrid candidates that could be among the best `depth`, from what the queries
    told: each one's lowest and highest possible final score (a signal not yet read,
    between 0 and the most it can be) against the `depth`-th best lowest. All of them for
    RRF, whose ranks move with every score read."""
    live = [m for m in among.values() if m.expires_at > now]
    if len(live) <= depth or _fusion(req, deps) == "rrf":
        return [m.id for m in live]
    cos_cap = _cos_cap(c, k)
    full_text = len(c.text_rank) >= k
    txt_cap = min(c.texts.values()) if full_text and c.texts else 0.0
    alpha = deps.settings.hybrid_alpha
    bounds: list[tuple[float, float, str]] = []
    for m in live:
        cos = c.cosines.get(m.id)
        cos_lo, cos_hi = (cos, cos) if cos is not None else (0.0, cos_cap)
        txt = c.texts.get(m.id)
        txt_lo, txt_hi = (txt, txt) if txt is not None else (0.0, txt_cap)
        lo = ranking.fuse_linear(cos_lo, txt_lo, alpha)
        hi = ranking.fuse_linear(cos_hi, txt_hi, alpha)
        bounds.append((_final(m, lo, deps, now), _final(m, hi, deps, now), m.id))
    lows = sorted((lo for lo, _, _ in bounds), reverse=True)
    bar = lows[depth - 1]
    if req.min_score is not None:
        bar = max(bar, req.min_score)
    return [mid for _, hi, mid in bounds if hi >= bar]


def _cos_cap(c: Candidates, k: int) -> float:
    """The most a candidate the vector query did not return can have as its cosine: the
    k-th's, when the query returned k (otherwise it returned every memory it could)."""
    return min(c.cosines.values()) if len(c.vec_rank) >= k and c.cosines else 1.0


def _scoped(req: SearchRequest, scope: ReadScope, current: bool) -> Scoped | None:
    """The search's filter as a scope alone, when nothing else narrows it."""
    narrowed = req.types or req.tags or req.people or req.since or req.until or req.as_of
    return None if narrowed else Scoped(scope, current)


def _normalised(bm25: float | None, top: float) -> float:
    return min(1.0, (bm25 or 0.0) / top) if top > 0 else 0.0


def _fusion(req: SearchRequest, deps: Deps) -> str:
    return req.fusion or deps.settings.hybrid_fusion


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
    """A candidate's final score: its relevance with importance, recency and mentions, and
    what the query signals add (`query_signals.boost`)."""
    return m.boost + ranking.score(
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


def _diversified(
    ranked: list[Ranked], weight: float, depth: int, stored: dict[str, np.ndarray]
) -> list[Ranked]:
    """Maximal marginal relevance over the best `depth` candidates (greedy), with the stored
    vectors read with their scores."""
    head, tail = ranked[:depth], ranked[depth:]
    dim = max((len(v) for v in stored.values()), default=0)
    vectors = np.zeros((len(head), dim), np.float32)
    for i, r in enumerate(head):
        v = stored.get(r.id)
        if v is not None and len(v) == dim and (n := float(np.linalg.norm(v))) > 0:
            vectors[i] = v / n
    scores = np.fromiter((r.score for r in head), np.float64, len(head))
    return [head[i] for i in ranking.mmr_order(scores, vectors, weight)] + tail


async def _read_results(
    ns: str,
    req: SearchRequest,
    deps: Deps,
    ranked: list[Ranked],
    now: int,
    records: dict[str, Fetched | None],
) -> list[ScoredMemory]:
    """The best candidates' records until `limit` (or the token budget) is reached, from
    those read with the scores. One that vanished since the queries (deleted, expired)
    gives its place to the next candidate, read then if it was not. Only returned memories
    count as accessed, right after the reply."""
    budget = req.max_tokens
    results: list[ScoredMemory] = []
    spent = 0
    for i, r in enumerate(ranked):
        if len(results) >= req.limit:
            break
        if r.id not in records:
            want = [x.id for x in ranked[i : i + req.limit - len(results)] if x.id not in records]
            fetched = await deps.store.reads.fetch(ns, want, now, count_access=False)
            records.update(zip(want, fetched, strict=True))
        f = records[r.id]
        if f is None:
            continue
        fits, spent = fits_budget(f.record.content, spent, budget)
        if not fits and results:
            break
        results.append(
            to_scored(
                f,
                now,
                score=r.score,
                similarity=r.cosine,
                text_score=r.text,
            )
        )
    deps.store.reads.touch_later(ns, [r.id for r in results], now)
    return results
