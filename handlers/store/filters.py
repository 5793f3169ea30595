"""The filter every read applies (live, in scope, the request's own filters) and the
full-text query built on it. Filters compose as redisvl expressions and can be checked as
strings without Redis."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from redisvl.query.filter import FilterExpression, Num
from redisvl.query.filter import Tag as _RedisvlTag
from redisvl.utils.token_escaper import TokenEscaper

from handlers.store.record import GENERAL, person_tag, workspace_tag
from handlers.store.schema import TEXT_FIELDS

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


class Tag(_RedisvlTag):
    """redisvl's tag filter, escaping `_` too: RediSearch reads a bare `{_}` as a syntax
    error, so a workflow id or tag of `_` could be written but never found."""

    escaper = TokenEscaper(escape_chars_re=re.compile(r"[,.<>{}\[\]\\\"\':;!@#$%^&*()\-+=~|\/ ?_]"))


# Memories no newer memory superseded (and whose validity has not ended: `validity`). A
# negation, so memories written before `supersedes` existed (without the flag) pass it too.
CURRENT = Tag("superseded") != "1"


def valid_at(as_of_ms: int) -> FilterExpression:
    """v3 `as_of`: memories valid at that instant (`vf` <= as_of < `vu`), superseded or
    not (record.validity). Written as two negations, of those valid only later and of
    those whose validity had ended: each reads the few memories it names, where the
    positive ranges read every memory (an as_of search at 10k memories cost 4.1 ms of
    Redis against 2.0 ms without; every memory has both fields, `Store.as_of_ready`)."""
    return FilterExpression(f"-@vf:[({as_of_ms} +inf] -@vu:[-inf {as_of_ms}]")


@dataclass(frozen=True, slots=True)
class ReadScope:
    """What a read covers: one workflow's memories, the general ones, or both; within a
    workspace, when it names one. No workflow and not general, in a workspace, is all of
    the workspace's memories."""

    workflow_id: str | None
    general: bool
    workspace: str | None = None
    # The stores a caller of reduced trust sees; None: all of them (full trust).
    stores: tuple[str, ...] | None = None

    @property
    def applied(self) -> str:
        if self.workflow_id is None:
            # A whole workspace holds workflow and general memories alike.
            return "general" if self.general else "both"
        return "both" if self.general else "workflow"


class Scoped(NamedTuple):
    """What a filter that is a scope alone covers (`current`: memories no newer one
    superseded), so that its size can be read from the tallies instead of counted."""

    scope: ReadScope
    current: bool


def read_filter(
    now_ms: int | None,
    scope: ReadScope,
    *,
    types: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    people: Iterable[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    current: bool = False,
    as_of_ms: int | None = None,
) -> FilterExpression:
    """The filter every read applies: live (not expired), in scope, and the request's filters.

    `now_ms=None` leaves expiry out, for a caller that checks `expires_at` itself (vector
    search does: a numeric range over every document slows RediSearch's hybrid KNN down).
    `current` leaves out memories that a newer one superseded; `as_of_ms` keeps those
    valid then instead (a caller gives one or the other).
    """
    general = Tag("general") == GENERAL
    where: FilterExpression
    if scope.workflow_id is not None:
        where = Tag("wf") == scope.workflow_id
        if scope.general:
            where = where | general
    else:
        where = general
    if scope.workspace is not None:
        in_workspace = Tag("wsh") == workspace_tag(scope.workspace)
        whole = scope.workflow_id is None and not scope.general
        where = in_workspace if whole else in_workspace & where
    if scope.stores is not None:
        where = where & (Tag("store") == list(scope.stores))
    f = where if now_ms is None else (Num("expires_at") > now_ms) & where
    if types:
        f = f & (Tag("type") == list(types))
    if tags:
        f = f & (Tag("tags") == list(tags))
    if people:
        f = f & (Tag("people") == [person_tag(p) for p in people])
    if current:
        f = f & CURRENT
    if since_ms is not None:
        f = f & (Num("created_at") >= since_ms)
    if until_ms is not None:
        f = f & (Num("created_at") <= until_ms)
    if as_of_ms is not None:
        f = f & valid_at(as_of_ms)
    return f


def in_store(store: str) -> FilterExpression:
    """Memories of exactly this store; `private` includes those from before stores (which
    have no store field)."""
    if store == "private":
        return Tag("store") != ["shared", "social"]
    return Tag("store") == store


def always_recalled(identity_type: str, min_importance: float, since_ms: int) -> FilterExpression:
    """Recall's path 1: identity memories, important ones, and recent ones."""
    return (
        (Tag("type") == identity_type)
        | (Num("importance") >= min_importance)
        | (Num("created_at") >= since_ms)
    )


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
    flt = "" if flt == "*" else f" -(-({flt}))"
    if pool is not None:
        # A pooled namespace's own memories (`Namespace.mine_for_text`): numeric ranges,
        # which add nothing to BM25.
        flt += f" {pool}"
    if current:
        flt += f" {CURRENT}"
    clauses = [f"(@{_TEXT_FIELD_SET}:{_FORM_ESCAPER.escape(form)}{flt})" for form in forms]
    return " | ".join(clauses)
