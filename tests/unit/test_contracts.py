"""The wire contract: strict requests, lenient replies, the type table, previews, subjects."""

from __future__ import annotations

import inspect
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from contracts import limits
from contracts.messages import (
    NAME_FIELDS,
    AddReply,
    AddRequest,
    ClearByTypeRequest,
    DescribeRequest,
    Event,
    ListRequest,
    Request,
    SearchReply,
    SearchRequest,
    preview,
)
from contracts.operations import REQUEST_TYPES, TABLE
from contracts.subjects import (
    GENERAL_SCOPE_TOKEN,
    event_filter,
    event_subject,
    is_valid_namespace,
    parse_request_subject,
    request_subject,
)
from contracts.types import DAY_S, DEFAULT_TYPES, TypeConfig, decode_type_table

ALL_REQUEST_CLASSES = sorted(
    {*REQUEST_TYPES.values(), *Request.__subclasses__()}, key=lambda c: c.__name__
)


def decode(cls: type, body: dict[str, Any] | bytes) -> Any:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return msgspec.json.decode(raw, type=cls)


# --------------------------------------------------------------------------- struct config


def test_every_request_class_is_an_operations_and_named_after_it() -> None:
    # A request class of contracts.messages that no operation sends, or an operation whose
    # request is named for another, fails here (the apply actions extend requests, not
    # `Request` itself).
    assert set(Request.__subclasses__()) == set(REQUEST_TYPES.values())
    for op, cls in REQUEST_TYPES.items():
        words = re.findall(r"[A-Z][a-z]*", cls.__name__.removesuffix("Request"))
        assert "_".join(w.lower() for w in words) == op, (op, cls.__name__)


@pytest.mark.parametrize("cls", ALL_REQUEST_CLASSES, ids=lambda c: c.__name__)
def test_request_struct_forbids_unknown_fields(cls: type[Request]) -> None:
    assert cls.__struct_config__.forbid_unknown_fields is True


@pytest.mark.parametrize("cls", ALL_REQUEST_CLASSES, ids=lambda c: c.__name__)
def test_request_struct_is_keyword_only(cls: type[Request]) -> None:
    # msgspec's StructConfig does not expose kw_only, and kw_only is not inherited, so each
    # class must set it; the constructor signature shows whether it did.
    kinds = {p.kind for p in inspect.signature(cls).parameters.values()}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}


# --------------------------------------------------------------------------- strict requests


def test_unknown_request_field_is_rejected_and_named() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field `tag`"):
        decode(SearchRequest, {"query": "x", "tag": ["a"]})


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (AddRequest, {"type": "fact", "content": 5}),
        (AddRequest, {"type": "fact", "content": "x", "importance": "high"}),
        (AddRequest, {"type": "fact", "content": "x", "tags": "a"}),
        (SearchRequest, {"query": "x", "limit": "10"}),
        (ListRequest, {"offset": 1.5}),
    ],
)
def test_wrong_field_type_is_rejected(cls: type, body: dict[str, Any]) -> None:
    with pytest.raises(msgspec.ValidationError, match="Expected"):
        decode(cls, body)


@pytest.mark.parametrize("limit", [0, 101])
def test_search_limit_out_of_range_is_rejected(limit: int) -> None:
    with pytest.raises(msgspec.ValidationError, match="limit"):
        decode(SearchRequest, {"query": "x", "limit": limit})


@pytest.mark.parametrize("limit", [1, 100])
def test_search_limit_bounds_are_inclusive(limit: int) -> None:
    assert decode(SearchRequest, {"query": "x", "limit": limit}).limit == limit


def test_list_limit_over_200_is_rejected() -> None:
    assert decode(ListRequest, {"limit": 200}).limit == 200
    with pytest.raises(msgspec.ValidationError, match="limit"):
        decode(ListRequest, {"limit": 201})


def test_request_defaults_match_the_protocol() -> None:
    search = decode(SearchRequest, {"query": "x"})
    listing = decode(ListRequest, {})
    clear = decode(ClearByTypeRequest, {"type": "context", "workflow_id": "wf"})
    assert (search.limit, search.scope) == (10, "both")
    assert (listing.limit, listing.offset, listing.mode, listing.scope) == (20, 0, "full", "both")
    assert decode(DescribeRequest, {}).scope == "both"
    assert clear.scope == "workflow"


@pytest.mark.parametrize("workflow_id", ["wf.1", "wf 1", "wf/1", "", "w" * 129, "wf*"])
def test_workflow_id_outside_its_pattern_is_rejected(workflow_id: str) -> None:
    with pytest.raises(msgspec.ValidationError, match="workflow_id"):
        decode(AddRequest, {"type": "fact", "content": "x", "workflow_id": workflow_id})


def test_workflow_id_of_128_token_characters_is_accepted() -> None:
    wf = "A-z_0" * 25 + "abc"
    assert decode(DescribeRequest, {"workflow_id": wf}).workflow_id == wf


def test_workflow_id_with_trailing_newline_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(AddRequest, {"type": "fact", "content": "x", "workflow_id": "wf\n"})


def test_tags_are_lower_cased_and_de_duplicated_in_first_seen_order() -> None:
    req = decode(
        AddRequest, {"type": "fact", "content": "x", "tags": ["Foo", "bar", "FOO", "a:b.c"]}
    )
    assert req.tags == ["foo", "bar", "a:b.c"]


@pytest.mark.parametrize("cls", [SearchRequest, ListRequest])
def test_read_request_tags_are_normalised_too(cls: type) -> None:
    body: dict[str, Any] = {"tags": ["X", "x"]}
    if cls is SearchRequest:
        body["query"] = "q"
    assert decode(cls, body).tags == ["x"]


@pytest.mark.parametrize("tag", ["has space", "slash/tag", "", "t" * 65, "ünïcode"])
def test_bad_tag_is_rejected(tag: str) -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid tag"):
        decode(AddRequest, {"type": "fact", "content": "x", "tags": [tag]})


def test_tag_with_trailing_newline_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(AddRequest, {"type": "fact", "content": "x", "tags": ["a\n"]})


def test_more_than_32_tags_are_rejected() -> None:
    tags = [f"t{i}" for i in range(limits.MAX_TAGS)]
    assert len(decode(AddRequest, {"type": "fact", "content": "x", "tags": tags}).tags) == 32
    with pytest.raises(msgspec.ValidationError, match="tags"):
        decode(AddRequest, {"type": "fact", "content": "x", "tags": [*tags, "one_more"]})


def test_search_without_query_or_embedding_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="needs a `query`"):
        decode(SearchRequest, {"scope": "both"})


def test_search_with_only_an_embedding_is_accepted() -> None:
    req = decode(SearchRequest, {"embedding": [0.1, 0.2]})
    assert req.query is None
    assert req.embedding == [0.1, 0.2]


def test_search_with_empty_query_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="query"):
        decode(SearchRequest, {"query": ""})


def test_clear_by_type_without_workflow_id_in_workflow_scope_is_rejected() -> None:
    with pytest.raises(msgspec.ValidationError, match="never guesses"):
        decode(ClearByTypeRequest, {"type": "context"})
    with pytest.raises(msgspec.ValidationError, match="never guesses"):
        decode(ClearByTypeRequest, {"type": "context", "scope": "workflow"})


def test_clear_by_type_with_explicit_general_scope_needs_no_workflow_id() -> None:
    req = decode(ClearByTypeRequest, {"type": "fact", "scope": "general"})
    assert (req.scope, req.workflow_id) == ("general", None)


def test_clear_by_type_rejects_scope_both() -> None:
    with pytest.raises(msgspec.ValidationError, match="scope"):
        decode(ClearByTypeRequest, {"type": "fact", "workflow_id": "wf", "scope": "both"})


# --------------------------------------------------------------------------- lenient replies


def test_reply_with_unknown_extra_field_decodes() -> None:
    body = {
        "success": True,
        "id": "01ABC",
        "workflow_id": None,
        "importance": 0.5,
        "expires_at": None,
        "added_in_v2": {"anything": [1, 2]},
    }
    reply = decode(AddReply, body)
    assert reply.id == "01ABC"
    assert reply.importance == 0.5


def test_search_reply_with_unknown_fields_in_results_decodes() -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC).isoformat()
    result = {
        "id": "m1",
        "type": "fact",
        "content": "c",
        "created_at": now,
        "updated_at": now,
        "score": 0.9,
        "similarity": 0.8,
        "new_field": True,
    }
    reply = decode(SearchReply, {"success": True, "results": [result], "took_ms": 3})
    assert [r.id for r in reply.results] == ["m1"]
    assert reply.results[0].score == 0.9


def test_event_with_unknown_field_decodes() -> None:
    body = {
        "action": "added",
        "id": "m1",
        "type": "fact",
        "workflow_id": None,
        "agent_id": None,
        "at": "2025-01-01T00:00:00Z",
        "preview": "p",
        "extra": 1,
    }
    assert decode(Event, body).action == "added"


# --------------------------------------------------------------------------- type table

# Transcribed from PROTOCOL.md, "Memory types".
PROTOCOL_TYPES = {
    "user_pref": (0.8, "general", None),
    "knowledge": (0.6, "general", None),
    "context": (0.3, "workflow", 7 * 24 * 3600),
    "decision": (0.7, "workflow", None),
    "identity": (1.0, "general", None),
    "goal": (0.9, "workflow", None),
    "todo": (0.8, "workflow", None),
    "preference": (0.7, "general", None),
    "fact": (0.6, "general", None),
    "event": (0.4, "workflow", None),
    "observation": (0.3, "workflow", None),
    # v2: tool runs (`capture`) and workspace save points (`create_state`).
    "trace": (0.2, "workflow", 30 * 24 * 3600),
    "state": (0.9, "general", None),
}


def test_default_type_table_equals_the_protocol_table() -> None:
    actual = {name: (c.importance, c.scope, c.ttl_s) for name, c in DEFAULT_TYPES.items()}
    assert actual == PROTOCOL_TYPES
    assert len(DEFAULT_TYPES) == 13


def test_context_ttl_is_seven_days() -> None:
    assert DEFAULT_TYPES["context"].ttl_s == 7 * DAY_S == 604_800


def test_decode_type_table_reads_a_json_table() -> None:
    table = decode_type_table(
        b'{"note": {"importance": 0.5, "scope": "workflow", "ttl_s": 60},'
        b' "rule": {"importance": 1, "scope": "general"}}'
    )
    assert table == {
        "note": TypeConfig(importance=0.5, scope="workflow", ttl_s=60),
        "rule": TypeConfig(importance=1.0, scope="general"),
    }


@pytest.mark.parametrize(
    "raw",
    [
        '{"note": {"importance": 1.5, "scope": "general"}}',
        '{"note": {"importance": 0.5, "scope": "both"}}',
        '{"note": {"importance": 0.5, "scope": "general", "ttl_s": 0}}',
        '{"note": {"importance": 0.5, "scope": "general", "colour": "red"}}',
        '{"Bad-Name": {"importance": 0.5, "scope": "general"}}',
        '{"note": {"scope": "general"}}',
    ],
)
def test_decode_type_table_rejects_invalid_entries(raw: str) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_type_table(raw)


def test_decode_type_table_rejects_an_empty_table() -> None:
    with pytest.raises(ValueError, match="empty"):
        decode_type_table("{}")


# --------------------------------------------------------------------------- preview


def test_preview_keeps_content_of_at_most_100_chars() -> None:
    assert preview("") == ""
    assert preview("a" * 100) == "a" * 100


def test_preview_truncates_longer_content_to_100_chars_plus_ellipsis() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(150))
    out = preview(text)
    assert out == text[:100] + "..."
    assert len(out) == 103


def test_preview_counts_characters_not_bytes() -> None:
    assert preview("é" * 100) == "é" * 100
    assert preview("é" * 101) == "é" * 100 + "..."


# --------------------------------------------------------------------------- subjects


def test_request_subject() -> None:
    assert request_subject("acme", "search") == "mem.acme.search"


def test_event_subject_uses_workflow_id_or_general_token() -> None:
    assert event_subject("acme", "wf_123", "goal", "added") == "mem.acme.events.wf_123.goal.added"
    assert event_subject("acme", None, "fact", "deleted") == "mem.acme.events._general.fact.deleted"
    assert GENERAL_SCOPE_TOKEN == "_general"


def test_event_filter_wildcards_unspecified_parts() -> None:
    assert event_filter("acme") == "mem.acme.events.*.*.*"
    assert event_filter("acme", "wf_1") == "mem.acme.events.wf_1.*.*"
    assert event_filter("acme", general=True) == "mem.acme.events._general.*.*"
    assert (
        event_filter("acme", "wf_1", type_="todo", action="updated")
        == "mem.acme.events.wf_1.todo.updated"
    )


def test_event_filter_general_wins_over_workflow_id() -> None:
    assert event_filter("acme", "wf_1", general=True) == "mem.acme.events._general.*.*"


def test_parse_request_subject_round_trips_request_subject() -> None:
    assert parse_request_subject(request_subject("ns-1", "clear_by_type")) == (
        "ns-1",
        "clear_by_type",
        "full",
    )


@pytest.mark.parametrize("trust", ["full", "inner", "familiar", "public"])
@pytest.mark.parametrize("durable", [False, True])
def test_trust_and_durable_subjects_round_trip(trust: str, durable: bool) -> None:
    subject = request_subject("acme", "add", trust, durable=durable)
    assert subject.startswith("memq." if durable else "mem.")
    assert subject.endswith("acme.add" if trust == "full" else f"acme.add.{trust}")
    assert parse_request_subject(subject) == ("acme", "add", trust)


@pytest.mark.parametrize(
    "subject", ["mem.acme", "mem.acme.add.inner.x", "other.acme.add", "mem", "", "memq.acme"]
)
def test_parse_request_subject_rejects_other_subjects(subject: str) -> None:
    assert parse_request_subject(subject) is None


@pytest.mark.parametrize("ns", ["default", "acme", "A_b-9", "x" * 64])
def test_valid_namespaces(ns: str) -> None:
    assert is_valid_namespace(ns) is True


@pytest.mark.parametrize("ns", ["", "x" * 65, "a.b", "a*", "a>", "a b", "ümlaut"])
def test_invalid_namespaces(ns: str) -> None:
    assert is_valid_namespace(ns) is False


def test_namespace_with_trailing_newline_is_invalid() -> None:
    assert is_valid_namespace("acme\n") is False


_NFD, _NFC = "Cafe\u0301 Jose\u0301", "Caf\u00e9 Jos\u00e9"


def _is_list(t: mi.Type) -> bool:
    return isinstance(t, mi.ListType) or (
        isinstance(t, mi.UnionType) and any(isinstance(x, mi.ListType) for x in t.types)
    )


def _with_names(value: Any, t: mi.Type) -> Any:
    """`value` (JSON data of type `t`) with every name field written decomposed (NFD): each
    one its objects declare, and inside the lists and objects it holds."""
    if isinstance(t, mi.UnionType):
        for branch in t.types:
            if isinstance(branch, mi.StructType) and isinstance(value, dict):
                tag = value.get(branch.tag_field) if branch.tag_field else None
                if branch.tag is None or tag == branch.tag:
                    return _with_names(value, branch)
            if isinstance(branch, mi.ListType) and isinstance(value, list):
                return _with_names(value, branch)
        return value
    if isinstance(t, mi.ListType) and isinstance(value, list):
        return [_with_names(item, t.item_type) for item in value]
    if isinstance(t, mi.StructType) and isinstance(value, dict):
        out = dict(value)
        for f in t.fields:
            if f.encode_name in NAME_FIELDS:
                out[f.encode_name] = [_NFD] if _is_list(f.type) else _NFD
            elif f.encode_name in out:
                out[f.encode_name] = _with_names(out[f.encode_name], f.type)
        return out
    return value


# Each operation's example with every name in it, or that its request may carry, decomposed.
_NAMED = {
    op.name: named
    for op in TABLE
    if (named := _with_names(op.example_body(), mi.type_info(op.request))) != op.example
}


def _names(value: object) -> list[str]:
    """Every string under a name field of a decoded message."""
    out: list[str] = []
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            item = getattr(value, field)
            if field in (*NAME_FIELDS, "query") and item is not None:
                out += item if isinstance(item, list) else [item]
            elif isinstance(item, list):
                for part in item:
                    out += _names(part)
    return out


def test_every_request_field_that_names_something_is_nfc() -> None:
    # Each request type with a name field is covered (in its nested messages too: apply's
    # actions, import's memories), and decodes every name to NFC.
    named = {
        op for op, cls in REQUEST_TYPES.items() if set(cls.__struct_fields__) & set(NAME_FIELDS)
    }
    assert named <= set(_NAMED)
    assert {"apply", "import"} <= set(_NAMED)  # names only in their nested messages
    bodies = {**_NAMED, "people": {"query": _NFD}}  # a person's name, as a query
    for op, body in bodies.items():
        decoded = msgspec.json.decode(msgspec.json.encode(body), type=REQUEST_TYPES[op])
        names = _names(decoded)
        assert names and all(n == unicodedata.normalize("NFC", n) for n in names), (op, names)
        assert _NFC in names, (op, names)
