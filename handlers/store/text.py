"""Text scoring: which words a full-text query reads (their index forms, and how common
each is), the one query shape that scores them by BM25, and the rescoring of given memories
among themselves (INKEYS), so a memory scores the same whichever query found it."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.commands.search.query import Query
from redisvl.query.filter import FilterExpression
from redisvl.utils.token_escaper import TokenEscaper

from handlers.store import keys
from handlers.store.background import Background
from handlers.store.failures import Guard
from handlers.store.filters import CURRENT
from handlers.store.indexes import Namespace
from handlers.store.pick import PICK_LUA, PICK_SHA, Pickable, Picked, pick_call, picked_of
from handlers.store.queries import Queries
from handlers.store.record import CANDIDATE_FIELDS, Record
from handlers.store.resp import Found, text
from handlers.store.schema import TEXT_FIELDS
from handlers.store.trip import Inside, Search

# Terms a full-text query carries at most: each is a clause of its own (see `text_match`).
MAX_TEXT_TERMS = 32
# RediSearch's default stopword list, which our indexes use: such a word is not in the index,
# and a query term that is one matches nothing of its own.
INDEX_STOPWORDS = frozenset(
    """
    a is the an and are as at be but by for if in into it no not of on or such that their
    then there these they this to was will with
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_ALNUM_RE = re.compile(r"[^\W_]", re.UNICODE)


_WORD_RE = re.compile(r"\w+", re.UNICODE)


def _indexed(word: str) -> bool:
    """Whether the index holds `word` (a lower-cased word): not a stopword, not punctuation."""
    return word not in INDEX_STOPWORDS and _ALNUM_RE.search(word) is not None


def written_words(*texts: str) -> set[str]:
    """The distinct words of a memory's texts as a query term names them: lower-cased, and
    only those the index holds."""
    return {w for text in texts for w in _WORD_RE.findall(text.lower()) if _indexed(w)}


def text_terms(terms: list[str]) -> list[str]:
    """The terms a full-text query carries: words the index holds, at most MAX_TEXT_TERMS."""
    return [t for t in terms if _indexed(t)][:MAX_TEXT_TERMS]


_FORM_ESCAPER = TokenEscaper()
# The text fields as one field set: a word's index entry across them is one iterator.
_TEXT_FIELD_SET = "|".join(TEXT_FIELDS)
_FORM_RE = re.compile(r"^\s*@[^:\s]+:(\S+?)(?:\(expanded\))?\s*$")
# A filter's general memories, `@general:{1}`, read as those not in a workflow,
# `-@general:{0}`: the same memories (every record holds its general tag, "1" or "0"), but
# RediSearch scans a tag's list in each word's clause, and the workflow memories' list is the
# shorter (docs/benchmarks.md, "Why the text query is shaped so").
_GENERAL_RE = re.compile(r"(?<![-\w])@general:\{1\}")
_NOT_WORKFLOW = "-@general:{0}"


def word_forms(explained: str, word: str) -> list[str]:
    """The index terms RediSearch reads for `word` (itself, and its stem forms such as
    `+migrat` and `migrat`), from FT.EXPLAIN of a query of the word on one field. The first
    holds every memory with the word itself."""
    forms = [m.group(1) for line in explained.splitlines() if (m := _FORM_RE.match(line))]
    found = [f for f in dict.fromkeys(forms) if f != "UNION"]
    if f"+{word}" not in found and any(f.startswith("+") for f in found):
        # A word whose stem differs is indexed under `+stem` too wherever it occurs, so
        # that form finds it: reading the word as well only scores it twice.
        found = [f for f in found if f != word]
    return found or [word]


def text_match(
    forms: Iterable[str],
    where: FilterExpression,
    current: bool = False,
    pool: str | None = None,
) -> str:
    """The one RediSearch query (run VERBATIM) for documents passing `where` (with
    `current`, none superseded) that contain any of the index terms `forms` (each query
    word's own forms: `word_forms`): a clause per form, each a single term over the text
    fields intersected with every filter on its own, the clauses joined by an OR at the top,
    with nothing around it.

    Why a clause per form and not per word: a word's forms are an OR (RediSearch expands
    `migration` to `migration | +migrat | migrat`), and an OR that is skipped to a document
    it does not hold lands on its next one with only the first form it holds: BM25 counts
    one form there. Any part of an intersection skips it, when it rejects a document the
    word holds (another workflow's, another namespace's in a pool), so identical memories
    scored differently, by where other memories sat (a workflow memory 0.77 of an identical
    general one, once a pool's other namespaces held the word). A lone term is read exactly
    wherever it is skipped to; the OR at the top is only read, never skipped. Measured on a
    pool of random memories: pairs of identical memories scored apart in 7 of 36 cases with
    a clause per word, 0 of 36 with a clause per form.

    Why nothing may wrap the OR: an OR under an intersection that another part drives is read
    by skipping to that part's documents, and RediSearch 2.x, skipping past a document that
    matches no term, lands on the next one holding only the first term it matched: BM25
    counts one term there. A filter drives when it is the smaller part; a negation, counted
    as every document, drives when the terms' matches outnumber the documents (common words,
    a name in a conversation). Measured on LoCoMo, text recall@10 / MRR@10: `(a | b | c)
    filter` 0.563, this shape 0.660; `current`'s negation around the OR 0.560 / 0.409, in
    each clause 0.656 / 0.487 (the same top 50, ids and scores, as without the negation, for
    all 762 questions). Within a clause, a term matching both content and tags counts once.

    `pool` confines a pooled namespace's query to its memories. `current`'s negation sits
    beside the filter, not inside it: inside a weight-0 filter it changed BM25 (a workflow
    memory scored 2/3 of an identical general one; on LoCoMo, no question's top 50 kept its
    scores).
    """
    flt = str(where)
    # The filter as a double negation: a negation adds nothing to BM25, where a tag adds its
    # own share (a workflow's tag is rare, so its memories would outscore general ones with
    # the same words). `$weight: 0` did that only for a union of two tags that both had
    # memories: RediSearch drops the weight from a filter that comes down to one tag (the
    # general scope, a scope whose workflow has no memories, a `types` filter), which then
    # lifted shorter memories. The same documents, at the same cost (measured at 100k).
    flt = "" if flt == "*" else f" -(-({_GENERAL_RE.sub(_NOT_WORKFLOW, flt)}))"
    if pool is not None:
        # A pooled namespace's own memories (`Namespace.mine_for_text`): numeric ranges,
        # which add nothing to BM25.
        flt += f" {pool}"
    if current:
        flt += f" {CURRENT}"
    clauses = [f"(@{_TEXT_FIELD_SET}:{_FORM_ESCAPER.escape(form)}{flt})" for form in forms]
    return " | ".join(clauses)


def words_key(ns: str) -> str:
    """How many memories were written with each word (a hash: `word_field(word)` -> count,
    and `WORDS_TOTAL` -> memories written): hybrid search's estimate of which words are too
    common to score. It holds no word, only each one's hash (PROTOCOL v4, "Erasure")."""
    return keys.ns_prefix(ns) + "words"


# The field of `words_key` counting the memories written (never a word's hash: no `*`).
WORDS_TOTAL = "*"


def word_field(word: str) -> str:
    """A word's field in `words_key`: 64 bits of its BLAKE2b, in hex. Written and read by
    the same function, so the counts are the same as by the word; two words sharing a field
    (one chance in 2^64 per pair) only count together, an estimate either way."""
    return hashlib.blake2b(word.encode(), digest_size=8).hexdigest()


# The words counted of one memory, and how long a namespace's counts run before they start
# again (see `Text.count_later`).
WORDS_PER_MEMORY = 300
WORDS_TTL_S = 24 * 3600
# Words whose index forms a handler keeps (a few dozen bytes each): past it, it starts over.
FORMS_KEPT = 50_000
# How long a handler keeps a namespace's word counts (estimates), and for how many.
COUNTS_TTL_S = 5.0
COUNTS_KEPT = 4096
# Beside the word counts: how many memories the namespace holds (no word holds a space).
_LIVE = "live total"
# No filter: for a query whose candidates passed it already.
MATCH_ALL = FilterExpression("*")


def _bm25(
    space: Namespace,
    forms: list[str],
    where: FilterExpression,
    current: bool,
    scores: bool = True,
) -> Query:
    """The full-text query of the index terms `forms` in the namespace, scored by BM25
    (`text_match`): one shape for reading the best matches and for scoring given memories,
    so that a memory scores the same in both. `scores`: with the scores in the reply."""
    q = Query(text_match(forms, where, current, space.mine_for_text)).verbatim()
    q = q.scorer("BM25STD")
    return (q.with_scores() if scores else q).dialect(2)


def scores_of(ns: str, found: Found) -> dict[str, float]:
    """The BM25 by memory id of a `Text.scores_search` page."""
    return {keys.id_of(ns, key): float(f["__score"]) for key, f in found.docs}


def _explain(pipe: Any, space: Namespace, words: list[str]) -> None:
    """Queue FT.EXPLAIN of each word on one text field (`word_forms` reads the reply)."""
    for t in words:
        pipe.execute_command("FT.EXPLAIN", space.index.name, f"@{TEXT_FIELDS[0]}:{t}", "DIALECT", 2)


class Text:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        queries: Queries,
        background: Background,
    ) -> None:
        self.client = client
        self._guard = guard
        self._queries = queries
        self._background = background
        # Each query word's index terms (`word_forms`): the stemmer's, the same everywhere.
        self._forms: dict[str, list[str]] = {}
        # Per namespace: until when its word counts below are kept, and the counts.
        self._counts: dict[str, tuple[float, dict[str, int]]] = {}

    def count_later(self, ns: str, written: list[Record]) -> None:
        """Count the distinct words of memories just written (after the reply, off the
        request path): `word_counts` reads them back."""
        if not written:
            return

        async def count() -> None:
            counted: dict[str, int] = {WORDS_TOTAL: len(written)}
            for rec in written:
                # A long text's words past the first few hundred go uncounted: they then
                # look rarer than they are, which costs time, never a result.
                for word in sorted(written_words(rec.content, *rec.tags))[:WORDS_PER_MEMORY]:
                    field = word_field(word)
                    counted[field] = counted.get(field, 0) + 1
            key = words_key(ns)
            pipe = self.client.pipeline(transaction=False)
            for word, n in counted.items():
                pipe.hincrby(key, word, n)
            # Started afresh every WORDS_TTL_S: every word ever written (ids, hashes) would
            # otherwise stay a field for good. Until the new counts pass the bound, the text
            # query reads every word, as without one.
            pipe.expire(key, WORDS_TTL_S, nx=True)
            async with self._guard():
                await pipe.execute()

        self._background.run(count(), "store.count_words_failed")

    def _kept(self, ns: str) -> dict[str, int]:
        """The namespace's counts this handler keeps, started afresh every COUNTS_TTL_S."""
        now = asyncio.get_running_loop().time()
        kept = self._counts.get(ns)
        if kept is None or kept[0] <= now:
            if len(self._counts) > COUNTS_KEPT:
                self._counts.clear()
            kept = self._counts[ns] = (now + COUNTS_TTL_S, {})
        return kept[1]

    async def word_counts(self, ns: str, terms: list[str]) -> tuple[int, list[int]]:
        """How many memories were written, and how many of them with each of `terms`: counts
        of writes, so a deleted or expired memory still counts (the caller scales them).
        Estimates, so kept here for a few seconds (COUNTS_TTL_S), by each word's field: a
        warm search asks Redis for none of them. The index forms of words this handler has
        not asked for yet come in the same round trip (the query built next needs them)."""
        counts = self._kept(ns)
        fields = [word_field(t) for t in terms]
        missing = [f for f in dict.fromkeys([WORDS_TOTAL, *fields]) if f not in counts]
        if missing:
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(words_key(ns), missing)
            if unformed := self._unformed(terms):
                space = await self._queries.space(ns)
                _explain(pipe, space, unformed)
            async with self._guard():
                raw, *explained = await pipe.execute(raise_on_error=False)
            if isinstance(raw, Exception):
                raise raw
            # A form not read (the index just vanished) is asked again as the query is built.
            self._keep_forms([(t, out) for t, out in zip(unformed, explained, strict=False)])
            for f, v in zip(missing, raw, strict=True):
                counts[f] = int(v) if v is not None else 0
        return counts[WORDS_TOTAL], [counts[f] for f in fields]

    def _unformed(self, terms: list[str]) -> list[str]:
        """The words whose forms this handler does not keep (past FORMS_KEPT, none)."""
        if len(self._forms) > FORMS_KEPT:
            self._forms.clear()
        return [t for t in dict.fromkeys(terms) if t not in self._forms]

    def _keep_forms(self, explained: list[tuple[str, object]]) -> None:
        """Keep the forms of words as FT.EXPLAIN gave them (an error: not kept)."""
        for t, out in explained:
            if not isinstance(out, Exception):
                self._forms[t] = word_forms(text(out), t)

    async def rare_words(
        self, ns: str, terms: list[str], share_max: float, docs_min: int
    ) -> list[str]:
        """The words hybrid search's text query reads across the namespace: rarest first,
        those whose memories add up to at most `share_max` of the namespace's (or `docs_min`,
        if more). Redis reads every memory holding a word to score it, so this bounds the
        query's work; the other words are scored only among the candidates the vector query
        and these words found (`scores_search`: its cost follows the candidates)."""
        written, counts = await self.word_counts(ns, terms)
        if written <= docs_min:
            return terms  # no word can be in more memories than were ever written
        # Counts are of the memories written since the counts started (deleted and expired
        # ones included): a word's share of those, times the memories live, estimates its
        # memories.
        kept = self._kept(ns)
        if _LIVE not in kept:
            kept[_LIVE] = await self._queries.live_total(ns)
        live = kept[_LIVE]
        budget = max(docs_min, share_max * live)
        estimate = {t: n * live / written for t, n in zip(terms, counts, strict=True)}
        read: set[str] = set()
        for t in sorted(estimate, key=estimate.__getitem__):
            budget -= estimate[t]
            if budget < 0:
                break
            read.add(t)
        return [t for t in terms if t in read]

    def text_search(
        self,
        terms: list[str],
        where: FilterExpression,
        k: int,
        current: bool = False,
        finding: bool = False,
        signals: Sequence[str] = (),
    ) -> Search:
        """The query of the k best full-text (BM25) matches of any of `terms` in content or
        tags (with `current`, none superseded), to send with others (`Queries.run`); its
        page decodes as `Candidate`s. `finding`: the query only finds candidates that
        `scores_search` scores afterwards, so it reads each word's first form alone (the one
        holding the word itself, `word_forms`): less Redis time, the same memories found
        (docs/benchmarks.md, "Why the text query is shaped so"), and without their scores,
        which that scoring replaces. `signals`: the query signals' fields it returns too."""

        fields = [*CANDIDATE_FIELDS, *signals]

        async def query(space: Namespace) -> Query:
            forms = await self._word_forms(space, terms, finding)
            q = _bm25(space, forms, where, current, scores=not finding)
            return q.return_fields(*fields).paging(0, k)

        return Search(query, with_scores=not finding)

    def scores_search(
        self, ns: str, terms: list[str], among: list[str], current: bool = False
    ) -> Search:
        """The query of the BM25 of each of the `among` memories (ids) that holds any of
        `terms`: the score `text_search` gives it, read among them alone (INKEYS), so its
        cost follows their number, not the words' memories; to send with others
        (`Queries.run`; read by `scores_of`). Only ids and scores come back (the caller has
        the candidates' fields). Every candidate passed the read filter in the query that
        found it, so only "not superseded" is read again: the filter adds nothing to BM25
        (`text_match`), and checking it again in each word's clause was most of this
        query's time."""

        async def query(space: Namespace) -> Query:
            q = _bm25(space, await self._word_forms(space, terms), MATCH_ALL, current)
            q = q.limit_ids(*(keys.record_key(ns, mid) for mid in among))
            return q.no_content().paging(0, len(among))

        return Search(query, with_scores=True)

    def pick(
        self,
        ns: str,
        terms: list[str],
        candidates: list[Pickable],
        slope: float,
        now_ms: int,
        current: bool,
        depth: int,
        floor: float | None,
        records: bool,
        all_vectors: bool,
    ) -> Inside[Picked]:
        """`scores_search` among the candidates, and what follows from their scores, in one
        script (`handlers.store.pick`): those that could make the best `depth` (0: all,
        none below `floor`; `slope`: what a full text score adds to a final score), with
        their records when asked, and the vectors of the blind ones (or of all picked with
        `all_vectors`); for `Queries.run_inside`."""
        among = [c.id for c in candidates]

        def call(query: list[Any]) -> list[Any]:
            return pick_call(
                PICK_SHA, ns, query, candidates, slope, now_ms, depth, floor, records, all_vectors
            )

        return Inside(
            self.scores_search(ns, terms, among, current),
            call,
            lambda reply: picked_of(candidates, reply, records),
            PICK_LUA,
        )

    async def _word_forms(
        self, space: Namespace, terms: list[str], first: bool = False
    ) -> list[str]:
        """Every index term of `terms` (`word_forms`), asked of RediSearch once per word;
        with `first`, each word's first form only."""
        missing = self._unformed(terms)
        if missing:
            pipe = self.client.pipeline(transaction=False)
            _explain(pipe, space, missing)
            async with self._guard():
                explained = await pipe.execute()
            self._keep_forms(list(zip(missing, explained, strict=True)))
        if first:
            return [self._forms[t][0] for t in terms]
        return [form for t in terms for form in self._forms[t]]
