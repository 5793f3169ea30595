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
from handlers.store.reads import FETCH, KEEP, fetch_args, fetched_of, vectors_of
from handlers.store.record import RECORD_FIELDS, Fetched
from handlers.store.schema import VECTOR_FIELD
from handlers.store.tallies.scripts import TALLY
from handlers.store.trip import evalsha

# KEYS: each candidate's record key. ARGV: `fetch_args` (flag '0': no access counted, the
# search counts those it returns after its reply), the vector field, how many may be read
# (`depth`, 0: all), the lowest final score read ('' for none), whether records are read
# ('1'), whether every picked candidate's vector is read ('1') or only the blind ones', the
# record and access key prefixes, what a full text score adds to a final score (the same
# for all), the INKEYS query: its length and the position of its INKEYS (1-based), then
# the FT.SEARCH command without them (the script puts KEYS there); then a value a
# candidate: the lowest final score it can have with no text score (its cosine known), or
# `b<lo> <hi>` for a blind one (its cosine unknown: `hi` assumes the most it can be;
# without a text score it is out), or `x` (expired: it only counts for the best BM25,
# which text scores are relative to); then the record fields. The result: each
# candidate's BM25 as RediSearch wrote it (false: none), the picked candidates' positions
# (1-based), and their records (false: not read or gone) and vectors (false: not read).
PICK_LUA = lua(
    TALLY,
    KEEP,
    FETCH,
    """
local nc, slope = #KEYS, tonumber(ARGV[13])
local nq, at = tonumber(ARGV[14]), tonumber(ARGV[15])
local q = {}
for j = 1, nq do
  if j == at then
    q[#q + 1] = 'INKEYS'
    q[#q + 1] = nc
    for i = 1, nc do q[#q + 1] = KEYS[i] end
  end
  q[#q + 1] = ARGV[15 + j]
end
local base = 15 + nq
local fields, n = fetch_fields(ARGV, base + nc + 1)
local index = {}
for i = 1, nc do index[KEYS[i]] = i end
local found = redis.call(unpack(q))
local raw, top = {}, 0
for j = 2, #found, 2 do
  local i = index[found[j]]
  if i then
    raw[i] = found[j + 1]
    top = math.max(top, tonumber(found[j + 1]))
  end
end
local live, lo, hi, blind, lows = {}, {}, {}, {}, {}
for i = 1, nc do
  local a = ARGV[base + i]
  local kind = string.byte(a, 1)
  if kind ~= 120 then -- 'x': expired
    local l, h
    if kind == 98 then -- 'b': blind
      local sp = string.find(a, ' ', 3, true)
      l, h = tonumber(string.sub(a, 2, sp - 1)), tonumber(string.sub(a, sp + 1))
      blind[i] = true
    else
      l = tonumber(a)
      h = l
    end
    if raw[i] or not blind[i] then
      local t = 0
      if raw[i] and top > 0 then t = math.min(1, tonumber(raw[i]) / top) end
      lo[i], hi[i] = l + slope * t, h + slope * t
      live[#live + 1] = i
      lows[#lows + 1] = lo[i]
    end
  end
end
-- The depth-th best lowest score: a candidate whose highest is below it cannot make the
-- best depth (a hair below, so that rounding never drops one the caller ranks in).
local depth, bar = tonumber(ARGV[7]), -math.huge
if depth > 0 and #live > depth then
  table.sort(lows, function(x, y) return x > y end)
  bar = lows[depth] - 1e-9
  if ARGV[8] ~= '' then bar = math.max(bar, tonumber(ARGV[8]) - 1e-9) end
end
local scores, picked, rows, vecs = {}, {}, {}, {}
for i = 1, nc do scores[i] = raw[i] or false end
local plen, accs = #ARGV[11], ARGV[12]
for _, i in ipairs(live) do
  if hi[i] >= bar then
    local rec = KEYS[i]
    picked[#picked + 1] = i
    local row = false
    if ARGV[9] == '1' then
      row = fetch_one(rec, accs .. string.sub(rec, plen + 1), ARGV, fields, n)
    end
    rows[#rows + 1] = row
    local vec = ARGV[10] == '1' or blind[i]
    vecs[#vecs + 1] = vec and redis.call('HGET', rec, ARGV[6]) or false
  end
end
return {scores, picked, rows, vecs}
""",
)

PICK_SHA = hashlib.sha1(PICK_LUA.encode()).hexdigest()


class Pickable(NamedTuple):
    """A hybrid candidate as the pick weighs it: the bounds of its final score with no text
    score (`ops/search.py` computes them)."""

    id: str
    lo: float
    hi: float
    blind: bool  # its cosine is unknown (a text match only): its vector is read if picked
    live: bool

    def arg(self) -> str:
        if not self.live:
            return "x"
        return f"b{self.lo!r} {self.hi!r}" if self.blind else repr(self.lo)


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
    slope: float,
    now_ms: int,
    depth: int,
    floor: float | None,
    records: bool,
    all_vectors: bool,
) -> list[Any]:
    """PICK_LUA's call around the INKEYS query `query` (an FT.SEARCH command, whose INKEYS
    are the candidates' record keys: the script puts them back from its KEYS)."""
    at = query.index("INKEYS")
    query = query[:at] + query[at + 2 + int(query[at + 1]) :]
    args: list[Any] = [
        *fetch_args(ns, now_ms, "0"),
        VECTOR_FIELD,
        depth,
        "" if floor is None else repr(floor),
        "1" if records else "0",
        "1" if all_vectors else "0",
        keys.record_prefix(ns),
        keys.access_key(ns, ""),
        repr(slope),
        len(query),
        at + 1,
        *query,
        *(c.arg() for c in candidates),
        *RECORD_FIELDS,
    ]
    return evalsha(sha, [keys.record_key(ns, c.id) for c in candidates], args)


def picked_of(candidates: list[Pickable], reply: list[Any], records: bool) -> Picked:
    """PICK_LUA's reply read."""
    raw, positions, rows, blobs = reply
    scores = {c.id: float(s) for c, s in zip(candidates, raw, strict=True) if s}
    ids = [candidates[int(i) - 1].id for i in positions]
    read = dict(zip(ids, fetched_of(rows), strict=True)) if records else {}
    return Picked(scores, read, vectors_of(ids, blobs))
