"""Raw Redis replies parsed into plain Python: FT.SEARCH pages, FT.AGGREGATE rows and
FT.INFO attributes, in RESP2 or RESP3. The store sends some commands raw because redis-py's
own result objects cost more to build than the query takes in Redis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class Found:
    """An FT.SEARCH reply: the total that matched and (key, fields) of the returned page."""

    total: int
    docs: list[tuple[str, dict[str, str]]]


def pairs(flat: list[Any]) -> dict[str, str]:
    try:  # the hot path: every field of every candidate comes as bytes
        return {k.decode(): v.decode() for k, v in zip(flat[::2], flat[1::2], strict=True)}
    except AttributeError:  # a client that decodes replies itself
        return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


def parse_search(raw: Any, with_scores: bool = False) -> Found:
    """Parse a raw FT.SEARCH reply (RESP2 or RESP3); a score lands in the `__score` field."""
    if isinstance(raw, dict):  # RESP3
        if b"results" not in raw:  # a client that decodes replies itself
            return _parse_search_text(raw, with_scores)
        # The hot path: every field of every candidate goes through here, so bytes are
        # decoded inline rather than through `text()`.
        docs = []
        for row in raw[b"results"]:
            attrs = row.get(b"extra_attributes") or {}  # none with NOCONTENT
            fields = {k.decode(): v.decode() for k, v in attrs.items()}
            if with_scores and (score := row.get(b"score")) is not None:
                fields["__score"] = text(score)
            docs.append((row[b"id"].decode(), fields))
        return Found(int(raw[b"total_results"]), docs)
    total, rest = int(raw[0]), raw[1:]
    step = 3 if with_scores else 2
    # A document's fields are a list, or None when its key expired (or was deleted) between
    # the match and the load: such a document is left out. A key or a score in that place
    # means the reply has no fields at all (NOCONTENT).
    if rest and not with_scores and _is_scalar(rest[1 if len(rest) > 1 else 0]):
        return Found(total, [(text(key), {}) for key in rest])  # NOCONTENT
    if with_scores and len(rest) > 1 and _is_scalar(rest[2 if len(rest) > 2 else 1]):
        # NOCONTENT WITHSCORES: key, score, key, score, ...
        return Found(
            total, [(text(rest[i]), {"__score": text(rest[i + 1])}) for i in range(0, len(rest), 2)]
        )
    docs = []
    for i in range(0, len(rest), step):
        if rest[i + step - 1] is None:
            continue
        fields = pairs(rest[i + step - 1])
        if with_scores:
            fields["__score"] = text(rest[i + 1])
        docs.append((text(rest[i]), fields))
    return Found(total, docs)


def _is_scalar(item: Any) -> bool:
    return item is not None and not isinstance(item, list)


def _parse_search_text(raw: dict[Any, Any], with_scores: bool) -> Found:
    rows = raw.get("results") or []
    docs = []
    for row in rows:
        fields = {text(k): text(v) for k, v in (row.get("extra_attributes") or {}).items()}
        if with_scores and row.get("score") is not None:
            fields["__score"] = text(row["score"])
        docs.append((text(row["id"]), fields))
    return Found(int(raw.get("total_results") or 0), docs)


def parse_aggregate(raw: Any) -> list[dict[str, Any]]:
    """A raw FT.AGGREGATE reply's rows (RESP2 or RESP3), each by field name (a value may be
    a list)."""
    if isinstance(raw, dict):  # RESP3: the rows' fields under `extra_attributes`
        rows = raw.get(b"results", raw.get("results")) or []
        found = [row.get(b"extra_attributes", row.get("extra_attributes")) or {} for row in rows]
        return [{text(k): _value(v) for k, v in row.items()} for row in found]
    # RESP2: the count, then a row per group of alternating names and values.
    return [{text(row[i]): _value(row[i + 1]) for i in range(0, len(row), 2)} for row in raw[1:]]


def _value(value: Any) -> Any:
    return [text(v) for v in value] if isinstance(value, list) else text(value)


def _info_map(info: Any) -> dict[str, Any]:
    """A raw FT.INFO reply (RESP2 list or RESP3 map) as a map by str names."""
    if isinstance(info, list):
        return {text(info[i]): info[i + 1] for i in range(0, len(info), 2)}
    return {text(k): v for k, v in info.items()}


def index_indexing(info: Any) -> bool:
    """Whether an index is still scanning existing keys, from a raw FT.INFO reply."""
    return bool(int(float(text(_info_map(info).get("indexing", 0)))))


def index_prefixes(info: Any) -> list[str]:
    """The key prefixes an index covers, from a raw FT.INFO reply."""
    definition = _info_map(_info_map(info).get("index_definition", []))
    return [text(p) for p in definition.get("prefixes", [])]


def index_attributes(info: Any) -> set[str]:
    """Field names of an index, from a raw FT.INFO reply (RESP2 list or RESP3 map)."""
    attrs = _info_map(info).get("attributes", [])
    names = set()
    for attr in attrs:
        if isinstance(attr, dict):
            names.add(text(attr.get(b"attribute", attr.get("attribute", b""))))
        else:
            fields = {text(attr[i]): attr[i + 1] for i in range(0, len(attr) - 1, 2)}
            names.add(text(fields.get("attribute", b"")))
    return names
