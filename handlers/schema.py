"""What a namespace looks like in Redis: key names, the RediSearch index schema (data, for
redisvl) and the filter every read applies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from redisvl.query.filter import FilterExpression, Num, Tag

from handlers.scoping import ReadScope

# Permanent memories get an expiry far in the future, so one numeric range filters expiry.
PERMANENT_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z
GENERAL = "1"
# `expires_at` first: the fetch script checks it before anything else.
RECORD_FIELDS = (
    "expires_at",
    "id",
    "type",
    "content",
    "tags",
    "importance",
    "wf",
    "agent_id",
    "source",
    "metadata",
    "created_at",
    "updated_at",
    "mention_count",
)
# What ranking needs of a vector candidate; the winners' records are fetched afterwards.
CANDIDATE_FIELDS = ("importance", "created_at", "expires_at", "mention_count")


class NamespaceMeta(msgspec.Struct, frozen=True):
    """What a namespace's vectors are: recorded once, when its index is created."""

    embedder: str
    dimension: int


def schema_dict(ns: str, dimension: int) -> dict[str, Any]:
    return {
        "index": {
            "name": index_name(ns),
            "prefix": f"membus:{ns}:m:",
            "key_separator": ":",
            "storage_type": "hash",
        },
        "fields": [
            # Sortable fields sit in RediSearch's own sorting vector, so `describe`'s
            # aggregation groups on them without loading each hash.
            {"name": "type", "type": "tag", "attrs": {"case_sensitive": True, "sortable": True}},
            {"name": "tags", "type": "tag", "attrs": {"separator": ",", "sortable": True}},
            {"name": "wf", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "general", "type": "tag", "attrs": {"sortable": True}},
            {"name": "agent_id", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "content", "type": "text"},
            # Tags spelled out as words, so full-text search matches them too.
            {"name": "tagtext", "type": "text"},
            {"name": "mention_count", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "importance", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "created_at", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "expires_at", "type": "numeric", "attrs": {"sortable": True}},
            {
                "name": "embedding",
                "type": "vector",
                "attrs": {
                    "algorithm": "hnsw",
                    "dims": dimension,
                    "distance_metric": "cosine",
                    "datatype": "float32",
                },
            },
        ],
    }


# Full-text fields a text query matches, content first.
TEXT_FIELDS = ("content", "tagtext")
# Terms a full-text query carries at most: each is a clause of its own (see `text_match`).
MAX_TEXT_TERMS = 32


def text_match(terms: Iterable[str], where: FilterExpression) -> str:
    """A RediSearch query for documents passing `where` that contain any of `terms`, each
    term intersected with the filter on its own and the clauses joined at the top.

    Why not `(a | b | c) filter`: under an intersection RediSearch 2.x reads an OR lazily and
    scores only the first term a document matches, so BM25 would count one term per document
    (measured on LoCoMo: text recall@10 0.563 that way, 0.660 this way). A top-level OR
    scores every clause a document matches, which is plain BM25. A term that matches both
    content and tags counts once.
    """
    flt = str(where)
    # Weight 0: a tag in the filter would otherwise add its own BM25 share (a workflow's tag
    # is rare, so its memories would outscore general ones with the same words).
    flt = "" if flt == "*" else f" (({flt}) => {{$weight: 0.0;}})"
    clauses = []
    for term in terms:
        fields = " | ".join(f"@{field}:{term}" for field in TEXT_FIELDS)
        clauses.append(f"(({fields}){flt})")
    return " | ".join(clauses)


def index_name(ns: str) -> str:
    return f"membus:{ns}"


def record_key(ns: str, memory_id: str) -> str:
    return f"membus:{ns}:m:{memory_id}"


def dedup_prefix(ns: str) -> str:
    return f"membus:{ns}:h:"


def access_key(ns: str, memory_id: str) -> str:
    return f"membus:{ns}:a:{memory_id}"


def meta_key(ns: str) -> str:
    return f"membus:meta:{ns}"


def read_filter(
    now_ms: int | None,
    scope: ReadScope,
    *,
    types: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> FilterExpression:
    """The filter every read applies: live (not expired), in scope, and the request's filters.

    `now_ms=None` leaves expiry out, for a caller that checks `expires_at` itself (vector
    search does: a numeric range over every document slows RediSearch's hybrid KNN down).
    """
    general = Tag("general") == GENERAL
    where: FilterExpression
    if scope.workflow_id is None:
        where = general
    elif scope.general:
        where = (Tag("wf") == scope.workflow_id) | general
    else:
        where = Tag("wf") == scope.workflow_id
    f = where if now_ms is None else (Num("expires_at") > now_ms) & where
    if types:
        f = f & (Tag("type") == list(types))
    if tags:
        f = f & (Tag("tags") == list(tags))
    if since_ms is not None:
        f = f & (Num("created_at") >= since_ms)
    if until_ms is not None:
        f = f & (Num("created_at") <= until_ms)
    return f
