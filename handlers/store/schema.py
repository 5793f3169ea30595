"""A namespace's RediSearch index, as data for redisvl: which record fields are searched
and filtered, and how. The fields themselves are `record.Record`'s."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from handlers.store.keys import record_prefix
from handlers.store.placement import index_name, pool_index_name, pool_prefix
from handlers.store.record import PEOPLE_SEPARATOR, PERMANENT_MS, Record, expiry, new_fields

# The hash field that holds a memory's embedding (float32 bytes), written beside the record.
VECTOR_FIELD = "embedding"
# The hash field that puts a memory in a pool index (see `pool_schema_dict`).
POOL_FIELD = "pool"
# Full-text fields a text query matches, content first.
TEXT_FIELDS = ("content", "tagtext")


def new_hash(
    rec: Record, vector: np.ndarray, accessed_ms: int | None = None
) -> tuple[dict[str, Any], int]:
    """A new memory's hash (its record's fields and its vector), and the expiry the write
    scripts give it with PEXPIREAT: epoch ms, or 0 for a permanent memory. An idle one
    (`idle_ttl_s`) expires that long after `accessed_ms` (default: its `updated_at`)."""
    fields = new_fields(rec)
    fields[VECTOR_FIELD] = vector.astype(np.float32).tobytes()
    expires = expiry(rec, rec.updated_at if accessed_ms is None else accessed_ms)
    return fields, 0 if expires == PERMANENT_MS else expires


class NamespaceMeta(msgspec.Struct, frozen=True):
    """What a namespace's vectors are: recorded once, when its index is created."""

    embedder: str
    dimension: int


def schema_dict(ns: str, dimension: int) -> dict[str, Any]:
    return {
        "index": {
            "name": index_name(ns),
            "prefix": record_prefix(ns),
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
            # `related_people`, lower-cased (record.person_tag), for the `people` filter.
            {"name": "people", "type": "tag", "attrs": {"separator": PEOPLE_SEPARATOR}},
            {"name": "has_people", "type": "tag"},
            # The workspace, as `record.workspace_tag` (exact match).
            {"name": "wsh", "type": "tag", "attrs": {"case_sensitive": True}},
            # The trust-gated store; absent (private) on memories from before stores.
            {"name": "store", "type": "tag", "attrs": {"sortable": True}},
            # "1" once a newer memory superseded it (see record.supersede_fields).
            {"name": "superseded", "type": "tag"},
            {"name": "content", "type": "text"},
            {"name": "tagtext", "type": "text"},
            {"name": "mention_count", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "importance", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "created_at", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "expires_at", "type": "numeric", "attrs": {"sortable": True}},
            # v3 validity for `as_of` reads (record.validity): from, and until (exclusive).
            {"name": "vf", "type": "numeric"},
            {"name": "vu", "type": "numeric"},
            {
                "name": VECTOR_FIELD,
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


# Vectors per block of a pool index's FLAT field (RediSearch's default is 1,024).
POOL_BLOCK = 64


def pool_schema_dict(number: int, dimension: int, clustered: bool = False) -> dict[str, Any]:
    """The index that the pooled namespace with pool `number` shares with others of its
    vector `dimension` (`placement.pool_index_name`): every field of a
    namespace's own index, plus `pool` (`placement.pool_number`), which each query filters on:
    a number, as a numeric range adds nothing to BM25 where a tag (even at weight 0 alone
    in its group) adds its own IDF.

    An index costs RediSearch about 100 KB however few memories it holds, and its vector
    field 1.5 MB more from its first memory (a block of 1,024 vectors), so thousands of
    small namespaces each with its own would need GBs. Pooled namespaces are small, so
    their vector queries scan the namespace's own memories (ADHOC_BF): a FLAT field is exact
    and cheaper to write, in blocks of 64 vectors (a pool holds a few thousand): 215 KB
    with one memory instead of 1.97 MB, measured."""
    schema = schema_dict("", dimension)
    schema["index"]["name"] = pool_index_name(number, clustered)
    schema["index"]["prefix"] = pool_prefix(number, clustered)
    for field in schema["fields"]:
        if field["name"] == VECTOR_FIELD:
            field["attrs"] = {**field["attrs"], "algorithm": "flat", "block_size": POOL_BLOCK}
    schema["fields"].insert(0, {"name": POOL_FIELD, "type": "numeric"})
    return schema
