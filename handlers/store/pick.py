"""The second round trip of a hybrid search whose common words are scored among its
candidates (a large namespace, `Text.rare_words`): one script runs that INKEYS query, turns
each candidate's BM25 into the bounds of its final score that the caller passed, keeps the
candidates that could make the results, and reads their records (and the stored vectors of
those whose cosine is unknown). Without it the scores, then the records, took two trips."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import numpy as np

from handlers.store import keys
from handlers.store.lua import lua
from handlers.store.reads import FETCH, KEEP, fetch_args, fetched_of
from handlers.store.record import RECORD_FIELDS, Fetched
from handlers.store.schema import VECTOR_FIELD
from handlers.store.tallies.scripts import TALLY
from handlers.store.trip import evalsha

# KEYS: each candidate's record and access keys. ARGV: `fetch_args` (flag '0': no access
# counted, the search counts those it returns after its reply), the vector field, how many
# may be read (`depth`, 0: all), the lowest final score read ('' for none), whether records
# are read ('1'), whether every picked candidate's vector is read ('1') or only the blind
# ones', the INKEYS query (its length, then the FT.SEARCH command), then 4 values a
# candidate: its final score's bounds with no text score (lo, hi), how much a full text
# score adds (slope), and a flag: 'b' its cosine is unknown (blind: hi assumes the most it
# can be; without a text score it is out), 'x' expired (it only counts for the best BM25,
# which text scores are relative to); then the record fields. The result: each candidate's
# BM25 as RediSearch wrote it (false: none), the picked candidates' positions (1-based),
# and theirs records (false: not read or gone) and vectors (false: not read).
PICK_LUA = lua(
    TALLY,
    KEEP,
    FETCH,
    """
local nq = tonumber(ARGV[11])
local q = {}
for j = 1, nq do q[j] = ARGV[11 + j] end
local at = 12 + nq
local nc = #KEYS / 2
local lo, hi, slope, flag, index = {}, {}, {}, {}, {}
for i = 1, nc do
  lo[i], hi[i] = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  slope[i], flag[i] = tonumber(ARGV[at + 2]), ARGV[at + 3]
  index[KEYS[2 * i - 1]] = i
  at = at + 4
end
local fields, n = fetch_fields(ARGV, at)
local found = redis.call(unpack(q))
local raw, top = {}, 0
for j = 2, #found, 2 do
  local i = index[found[j]]
  if i then
    raw[i] = found[j + 1]
    top = math.max(top, tonumber(found[j + 1]))
  end
end
local live, lows = {}, {}
for i = 1, nc do
  local blind = string.find(flag[i], 'b', 1, true)
  if not string.find(flag[i], 'x', 1, true) and (raw[i] or not blind) then
    local t = 0
    if raw[i] and top > 0 then t = math.min(1, tonumber(raw[i]) / top) end
    lo[i], hi[i] = lo[i] + slope[i] * t, hi[i] + slope[i] * t
    live[#live + 1] = i
    lows[#lows + 1] = lo[i]
  end
end
-- The depth-th best lowest score: a candidate whose highest is below it cannot make the
-- best depth (a hair below, so that rounding never drops one the caller ranks in).
local depth, bar = tonumber(ARGV[7]), -math.huge
if depth > 0 and #live > depth then
  table.sort(lows, function(a, b) return a > b end)
  bar = lows[depth] - 1e-9
  if ARGV[8] ~= '' then bar = math.max(bar, tonumber(ARGV[8]) - 1e-9) end
end
local scores, picked, rows, vecs = {}, {}, {}, {}
for i = 1, nc do scores[i] = raw[i] or false end
for _, i in ipairs(live) do
  if hi[i] >= bar then
    local rec = KEYS[2 * i - 1]
    picked[#picked + 1] = i
    rows[#rows + 1] = ARGV[9] == '1' and fetch_one(rec, KEYS[2 * i], ARGV, fields, n)
    local vec = ARGV[10] == '1' or string.find(flag[i], 'b', 1, true)
    vecs[#vecs + 1] = vec and redis.call('HGET', rec, ARGV[6]) or false
  end
end
return {scores, picked, rows, vecs}
""",
)


PICK_SHA = hashlib.sha1(PICK_LUA.encode()).hexdigest()


class Pickable(NamedTuple):
    """A hybrid candidate as the pick weighs it: the bounds of its final score with no text
    score, and what a full text score adds (`ops/search.py` computes them)."""

    id: str
    lo: float
    hi: float
    slope: float
    blind: bool  # its cosine is unknown (a text match only): its vector is read if picked
    live: bool


class Picked(NamedTuple):
    """What the pick read: every candidate's BM25 (those with one), and the picked ones'
    records (when asked) and stored vectors."""

    scores: dict[str, float]
    records: dict[str, Fetched | None]
    vectors: dict[str, np.ndarray]


def pick_call(
    sha: str,
    ns: str,
    query: list[Any],
    candidates: list[Pickable],
    now_ms: int,
    depth: int,
    floor: float | None,
    records: bool,
    all_vectors: bool,
) -> list[Any]:
    """PICK_LUA's call around the INKEYS query `query` (an FT.SEARCH command)."""
    args: list[Any] = [
        *fetch_args(ns, now_ms, "0"),
        VECTOR_FIELD,
        depth,
        "" if floor is None else repr(floor),
        "1" if records else "0",
        "1" if all_vectors else "0",
        len(query),
        *query,
    ]
    for c in candidates:
        flag = ("b" if c.blind else "k") + ("" if c.live else "x")
        args += [repr(c.lo), repr(c.hi), repr(c.slope), flag]
    return evalsha(sha, keys.memory_keys(ns, [c.id for c in candidates]), [*args, *RECORD_FIELDS])


def picked_of(candidates: list[Pickable], reply: list[Any], records: bool) -> Picked:
    """PICK_LUA's reply read."""
    raw, positions, rows, blobs = reply
    scores = {c.id: float(s) for c, s in zip(candidates, raw, strict=True) if s}
    ids = [candidates[int(i) - 1].id for i in positions]
    read = dict(zip(ids, fetched_of(rows), strict=True)) if records else {}
    vectors = {
        mid: np.frombuffer(blob, dtype=np.float32)
        for mid, blob in zip(ids, blobs, strict=True)
        if blob
    }
    return Picked(scores, read, vectors)
