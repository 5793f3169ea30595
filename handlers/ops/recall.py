"""`recall`: what an agent runtime asks before every model turn (pre-turn injection),
with no model call of its own.

Path 1 needs no search: identity memories, important ones and recent ones. Path 2 is the
default search with the turn's message. Candidates are then deduplicated twice: by id against
what this session was given within the last `reinject_after` turns, and by meaning (cosine)
against what this turn already chose and what the window holds. The session's state lives in
Redis (`store.session_*`) under a lock per session, so any handler serves any turn and two
concurrent turns never hand out the same memory.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec
import numpy as np

from contracts import limits
from contracts.messages import RecalledMemory, RecallReply, RecallRequest, SearchRequest
from handlers.errors import InvalidRequest
from handlers.ops import ranking
from handlers.ops.budget import fits_budget
from handlers.ops.checks import check_types
from handlers.ops.deps import Deps
from handlers.ops.registry import handles
from handlers.ops.replies import to_recalled, to_scored
from handlers.ops.scoping import read_scope, read_time
from handlers.ops.search import ranked_candidates
from handlers.ops.vectors import request_vector
from handlers.store.filters import always_recalled, read_filter
from handlers.store.record import Candidate, Fetched

IDENTITY = "identity"
# Path 2 takes the search's best this many; path 1 at most this many, the closest first.
SEARCH_TOP = 20
ALWAYS_MAX = 50
# Chosen beyond `limit`, so that one that vanished since the queries leaves no gap.
EXTRA = 5
# Bytes kept for the reply's other fields when results are fitted to the max payload.
REPLY_ENVELOPE = 4096
_encoder = msgspec.json.Encoder()


@dataclass
class Pick:
    id: str
    path: str
    score: float
    cosine: float
    text: float = 0.0
    # The order key: the score, or under the second opinion the score of the place it
    # re-ordered the memory to, so that path 1's memories still fall in among them.
    rank: float | None = None

    def key(self) -> tuple[bool, float]:
        return self.path == IDENTITY, self.score if self.rank is None else self.rank


@handles(RecallRequest)
async def recall(ns: str, req: RecallRequest, deps: Deps) -> RecallReply:
    check_types(deps.settings.types, req.types)
    sid = req.session_id
    if req.source == "system":
        return RecallReply(turn=await deps.store.sessions.count(ns, sid), skipped=True)
    ttl_s = deps.settings.recall_session_ttl_s
    async with deps.store.exclusive(ns, f"recall:{sid}"):
        now = deps.clock()
        turn, seen = await deps.store.sessions.turn(ns, sid, req.turn, ttl_s, limits.MAX_TURN)
        if turn > limits.MAX_TURN:
            raise InvalidRequest(
                f'Session "{sid}" has reached the last turn ({limits.MAX_TURN}): recall with a'
                " new session_id."
            )
        window = {mid for mid, t in seen.items() if abs(turn - t) < req.reinject_after}
        stale = [mid for mid in seen if mid not in window]
        picks = await _candidates(ns, req, deps, now)
        chosen, similar = await _dedup(ns, deps, picks, window, req.dedup_threshold, req.limit)
        # Only what is returned counts as an access (some chosen ones may not fit).
        found = await deps.store.reads.fetch(ns, [p.id for p in chosen], now, count_access=False)
        results: list[RecalledMemory] = []
        lines: list[str] = []
        spent = 0
        # The reply must fit one message: what would not fit is not given, so it is not
        # recorded as recalled either (a later turn may still give it).
        room = deps.max_payload - REPLY_ENVELOPE
        truncated = False
        for pick, f in zip(chosen, found, strict=True):
            if f is None or len(results) == req.limit:
                continue
            fits, spent = fits_budget(f.record.content, spent, req.max_tokens)
            if not fits and results:
                break
            result = _recalled(pick, f, now)
            line = f"{result.type}: {' '.join(result.content.split())}"
            room -= len(_encoder.encode(result)) + len(_encoder.encode(line)) + 2
            if room < 0:
                truncated = True
                break
            results.append(result)
            lines.append(line)
        given = [r.id for r in results]
        # A memory given again this turn has a new record: it is not stale any more.
        stale = [mid for mid in stale if mid not in given]
        await deps.store.sessions.recalled(ns, sid, turn, given, stale, ttl_s)
    deps.store.reads.touch_later(ns, given, now)
    return RecallReply(
        turn=turn,
        results=results,
        block="\n".join(lines),
        truncated=truncated,
        left_out_recalled=sum(p.id in window for p in picks),
        left_out_similar=similar,
    )


async def _candidates(ns: str, req: RecallRequest, deps: Deps, now: int) -> list[Pick]:
    """Both paths' candidates, identity first then by score."""
    text = req.text[:4096]
    # The message is embedded once; both paths then run side by side.
    vec = await request_vector(ns, deps, text=text, query=True)
    search = SearchRequest(
        query=text,
        embedding=vec.tolist(),
        workflow_id=req.workflow_id,
        scope=req.scope,
        types=req.types,
        people=req.people,
        limit=SEARCH_TOP,
        include_superseded=req.include_superseded,
        workspace=req.workspace,
        as_of=req.as_of,
    )
    # Path 1 as a vector query over its filter: the cosine of each comes with it.
    when = read_time(req.as_of, req.include_superseded, now)
    scoped = read_filter(
        None,
        read_scope(req.scope, req.workflow_id, req.workspace, deps.access.stores),
        types=req.types,
        people=req.people,
        current=when.current,
        as_of_ms=when.as_of_ms,
    )
    # Recent as of the time read (v3 `as_of`), or now.
    since = (now if when.as_of_ms is None else when.as_of_ms) - req.recent_s * 1000
    where = scoped & always_recalled(IDENTITY, req.min_importance, since)
    # The filter's text changes every millisecond; its count (for the hybrid policy) is
    # cached under the same filter to the minute.
    key = str(scoped & always_recalled(IDENTITY, req.min_importance, since - since % 60_000))
    # The second opinion (handlers/ops/rerank.py) re-orders path 2 as it does a search,
    # from the candidates' contents read with their scores.
    second = deps.reranker
    found, always = await asyncio.gather(
        ranked_candidates(ns, search, deps, now, when, read=second.depth if second else 0),
        deps.store.queries.knn(ns, vec, where, ALWAYS_MAX, policy_key=key, ended_by=when.ended_by),
    )
    ranked = found.ranked
    if second is not None:
        ranked = await second.rerank(text, ranked, found.records)
    top = ranked[:SEARCH_TOP]
    places = sorted((r.score for r in top), reverse=True)
    picks = {
        r.id: Pick(r.id, "semantic", r.score, r.cosine, r.text, rank=place)
        for r, place in zip(top, places, strict=True)
    }
    weights = deps.settings.weights
    for cand in always:
        if cand.expires_at <= now:
            continue
        pick = picks.get(cand.id)
        if pick is None:
            cos = ranking.similarity(cand.distance or 0.0)
            score = ranking.score(
                cos, cand.importance, cand.created_at, now, weights, cand.mention_count
            )
            pick = picks[cand.id] = Pick(cand.id, "", score, cos)
        pick.path = _path(cand, req)
    return sorted(picks.values(), key=Pick.key, reverse=True)


def _path(cand: Candidate, req: RecallRequest) -> str:
    if cand.type == IDENTITY:
        return "identity"
    if cand.importance >= req.min_importance:
        return "important"
    return "recent"


async def _dedup(
    ns: str,
    deps: Deps,
    picks: list[Pick],
    window: set[str],
    threshold: float,
    limit: int,
) -> tuple[list[Pick], int]:
    """The picks not recalled within the window and not too similar to one chosen this turn
    or recalled within the window (at most `limit`, a few more for the token budget), and
    how many the similarity cut. The vectors of the window's memories are read with the
    first candidates'; later candidates' as the walk needs them."""
    fresh = [p for p in picks if p.id not in window]
    if threshold >= 1.0:
        return fresh[: limit + EXTRA], 0
    batch = 2 * limit
    units = _units(await deps.store.reads.vectors(ns, [*window, *(p.id for p in fresh[:batch])]))
    # A memory deleted since it was given is no longer compared with. The window's vectors
    # (up to a few hundred) are compared with a batch of candidates in one product; this
    # turn's choices (at most limit + EXTRA) one candidate at a time, as they are made.
    held = [units[mid] for mid in window if mid in units]
    given = np.stack(held) if held else None
    chosen_vecs: list[np.ndarray] = []
    chosen: list[Pick] = []
    similar = 0
    for start in range(0, len(fresh), batch):
        part = fresh[start : start + batch]
        if start:
            units.update(_units(await deps.store.reads.vectors(ns, [p.id for p in part])))
        known = [p.id for p in part if p.id in units]
        near: dict[str, float] = {}
        if known and given is not None:
            best = (np.stack([units[mid] for mid in known]) @ given.T).max(axis=1)
            near = dict(zip(known, best.tolist(), strict=True))
        for pick in part:
            vec = units.get(pick.id)
            if vec is not None:
                closest = near.get(pick.id, -np.inf)
                if chosen_vecs:
                    closest = max(closest, float(np.max(np.stack(chosen_vecs) @ vec)))
                if closest > threshold:
                    similar += 1
                    continue
                chosen_vecs.append(vec)
            chosen.append(pick)
            if len(chosen) == limit + EXTRA:
                return chosen, similar
    return chosen, similar


def _units(vectors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {mid: v / n for mid, v in vectors.items() if (n := float(np.linalg.norm(v))) > 0}


def _recalled(pick: Pick, f: Fetched, now_ms: int) -> RecalledMemory:
    # Its access is counted (`touch_later`) at `now_ms`, as a search's.
    scored = to_scored(
        f,
        now_ms,
        score=pick.score,
        similarity=pick.cosine,
        text_score=pick.text,
    )
    return to_recalled(scored, pick.path)
