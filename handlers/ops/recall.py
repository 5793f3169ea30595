"""`recall`: what an agent runtime asks before every model turn (SpaceBot V2's pre-turn
injection, seed 003), with no model call of its own.

Path 1 needs no search: identity memories, important ones and recent ones. Path 2 is the
default search with the turn's message. Candidates are then deduplicated twice: by id against
what this session was given within the last `reinject_after` turns, and by meaning (cosine)
against what this turn already chose and what the window holds. The session's state lives in
Redis (`store.session_*`) under a lock per session, so any handler serves any turn and two
concurrent turns never hand out the same memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contracts.messages import RecalledMemory, RecallReply, RecallRequest, SearchRequest
from handlers.ops import ranking
from handlers.ops.budget import fits_budget
from handlers.ops.checks import check_types
from handlers.ops.deps import Deps
from handlers.ops.replies import to_scored
from handlers.ops.scoping import read_scope
from handlers.ops.search import ranked_candidates
from handlers.ops.vectors import request_vector
from handlers.store.filters import always_recalled, read_filter
from handlers.store.record import Record

IDENTITY = "identity"
# Path 2 takes the search's best this many; path 1 at most this many, newest first.
SEARCH_TOP = 20
ALWAYS_MAX = 100


@dataclass
class Pick:
    id: str
    path: str
    score: float
    cosine: float
    text: float = 0.0


async def recall(ns: str, req: RecallRequest, deps: Deps) -> RecallReply:
    check_types(deps.settings.types, req.types)
    sid = req.session_id
    if req.source == "system":
        return RecallReply(turn=await deps.store.session_count(ns, sid), skipped=True)
    ttl_s = deps.settings.recall_session_ttl_s
    async with deps.store.exclusive(ns, f"recall:{sid}"):
        now = deps.clock()
        turn, seen = await deps.store.session_turn(ns, sid, req.turn, ttl_s)
        window = {mid for mid, last in seen.items() if abs(turn - last) < req.reinject_after}
        stale = [mid for mid in seen if mid not in window]
        picks, vectors = await _candidates(ns, req, deps, now, window)
        chosen, similar = _dedup(picks, vectors, window, req.dedup_threshold)
        found = await deps.store.fetch(ns, [p.id for p in chosen], now)
        results: list[RecalledMemory] = []
        spent = 0
        for pick, f in zip(chosen, found, strict=True):
            if f is None or len(results) == req.limit:
                continue
            fits, spent = fits_budget(f.record.content, spent, req.max_tokens)
            if not fits and results:
                break
            results.append(_recalled(pick, f.record, f.access_count, f.last_accessed_ms))
        await deps.store.session_recalled(ns, sid, turn, [r.id for r in results], stale, ttl_s)
    return RecallReply(
        turn=turn,
        results=results,
        block="\n".join(f"{r.type}: {' '.join(r.content.split())}" for r in results),
        left_out_recalled=sum(p.id in window for p in picks),
        left_out_similar=similar,
    )


async def _candidates(
    ns: str, req: RecallRequest, deps: Deps, now: int, window: set[str]
) -> tuple[list[Pick], dict[str, np.ndarray]]:
    """Both paths' candidates, identity first then by score, and the unit vectors of the
    candidates and of the window's memories (for the semantic dedup)."""
    text = req.text
    search = SearchRequest(
        query=text[:4096],
        workflow_id=req.workflow_id,
        scope=req.scope,
        types=req.types,
        people=req.people,
        limit=SEARCH_TOP,
        include_superseded=req.include_superseded,
    )
    found = await ranked_candidates(ns, search, deps, now)
    picks = {
        r.id: Pick(r.id, "semantic", r.score, r.cosine, r.text) for r in found.ranked[:SEARCH_TOP]
    }
    where = read_filter(
        now,
        read_scope(req.scope, req.workflow_id),
        types=req.types,
        people=req.people,
        current=not req.include_superseded,
    ) & always_recalled(IDENTITY, req.min_importance, now - req.recent_s * 1000)
    always = (await deps.store.page(ns, where, Record, offset=0, limit=ALWAYS_MAX)).items
    vec = found.vector
    if vec is None:  # a text-mode default search has no vector of the message
        vec = await request_vector(ns, deps, text=text[:4096])
    wanted = list(dict.fromkeys([*picks, *(r.id for r in always), *window]))
    stored = await deps.store.vectors(ns, wanted)
    unit = {mid: v / n for mid, v in stored.items() if (n := float(np.linalg.norm(v))) > 0}
    query = vec / (float(np.linalg.norm(vec)) or 1.0)
    weights = deps.settings.weights
    for rec in always:
        cos = max(0.0, min(1.0, float(np.dot(unit[rec.id], query)))) if rec.id in unit else 0.0
        pick = picks.get(rec.id)
        if pick is None:
            score = ranking.score(
                cos, rec.importance, rec.created_at, now, weights, rec.mention_count
            )
            pick = picks[rec.id] = Pick(rec.id, "", score, cos)
        pick.path = _path(rec, req, now)
    ordered = sorted(picks.values(), key=lambda p: (p.path == IDENTITY, p.score), reverse=True)
    return ordered, unit


def _path(rec: Record, req: RecallRequest, now: int) -> str:
    if rec.type == IDENTITY:
        return "identity"
    if rec.importance >= req.min_importance:
        return "important"
    return "recent"


def _dedup(
    picks: list[Pick], unit: dict[str, np.ndarray], window: set[str], threshold: float
) -> tuple[list[Pick], int]:
    """The picks not recalled within the window and not too similar to one chosen this turn
    or recalled within the window; and how many the similarity cut."""
    chosen: list[Pick] = []
    against = [unit[mid] for mid in window if mid in unit]
    similar = 0
    for pick in picks:
        if pick.id in window:
            continue
        vec = unit.get(pick.id)
        if vec is not None and against and float(np.max(np.stack(against) @ vec)) > threshold:
            similar += 1
            continue
        chosen.append(pick)
        if vec is not None:
            against.append(vec)
    return chosen, similar


def _recalled(
    pick: Pick, rec: Record, access_count: int, last_accessed_ms: int | None
) -> RecalledMemory:
    scored = to_scored(
        rec,
        access_count,
        last_accessed_ms,
        score=pick.score,
        similarity=pick.cosine,
        text_score=pick.text,
    )
    return RecalledMemory(
        **{f: getattr(scored, f) for f in scored.__struct_fields__}, path=pick.path
    )
