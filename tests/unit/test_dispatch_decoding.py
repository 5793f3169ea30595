"""Bytes to requests (`decode_request`, `check_nesting`) and the operations' size checks."""

from __future__ import annotations

import json

import msgspec
import pytest

from contracts import limits
from contracts.messages import AddRequest, DescribeRequest, ListRequest
from contracts.operations import BY_NAME, REQUEST_TYPES
from contracts.types import DEFAULT_TYPES
from handlers.dispatch import check_nesting, decode_request, nesting_depth
from handlers.errors import InvalidRequest, TooLarge
from handlers.ops.checks import check_content, check_metadata, type_config

OPS = sorted(REQUEST_TYPES)


def body(value: object) -> bytes:
    return json.dumps(value).encode()


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize("op", OPS)
def test_the_example_body_decodes_to_the_operation_request_class(op: str) -> None:
    req = decode_request(op, body(BY_NAME[op].example))
    assert type(req) is REQUEST_TYPES[op]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("raw", [b"{", b"not json", b"{,}", b"\xff\xfe", b'{"ids'])
def test_malformed_json_is_invalid_request_saying_so(op: str, raw: bytes) -> None:
    with pytest.raises(InvalidRequest, match="not valid JSON") as info:
        decode_request(op, raw)
    assert info.value.code == "invalid_request"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("raw", [b'{"a": }', b"[1, 2", b'{"ids": ["a",]}'])
def test_malformed_json_after_a_schema_error_is_still_invalid_request(op: str, raw: bytes) -> None:
    # msgspec validates while it parses, so the first problem it meets decides the message.
    with pytest.raises(InvalidRequest):
        decode_request(op, raw)


@pytest.mark.parametrize("op", OPS)
def test_json_that_is_not_an_object_is_invalid_request(op: str) -> None:
    with pytest.raises(InvalidRequest, match=f"Invalid {op} request"):
        decode_request(op, b"[]")


@pytest.mark.parametrize("raw", [b"", b"   ", b"\n\t"])
def test_empty_body_is_an_empty_object(raw: bytes) -> None:
    req = decode_request("describe", raw)
    assert req == DescribeRequest()
    assert decode_request("list", raw) == ListRequest()


def test_empty_body_for_an_operation_with_required_fields_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="ids"):
        decode_request("get", b"")


@pytest.mark.parametrize("op", OPS)
def test_body_over_256_kib_is_too_large(op: str) -> None:
    raw = b'{"x": "' + b"a" * limits.MAX_BODY_BYTES + b'"}'
    with pytest.raises(TooLarge, match="256 KiB"):
        decode_request(op, raw)


def test_body_of_exactly_256_kib_is_not_too_large() -> None:
    prefix = b'{"type": "fact", "content": "'
    raw = prefix + b"a" * (limits.MAX_BODY_BYTES - len(prefix) - 2) + b'"}'
    assert len(raw) == limits.MAX_BODY_BYTES
    req = decode_request("add", raw)
    assert isinstance(req, AddRequest)


@pytest.mark.parametrize("op", OPS)
def test_metadata_nested_100_levels_is_invalid_request(op: str) -> None:
    raw = body({"type": "fact", "content": "x", "metadata": nested(100)})
    with pytest.raises(InvalidRequest, match="nests deeper than 32"):
        decode_request(op, raw)


def test_absurd_nesting_is_refused_without_recursion_error() -> None:
    depth = 100_000
    raw = (
        b'{"type": "fact", "content": "x", "metadata": {"a": ' + b"[" * depth + b"]" * depth + b"}}"
    )
    assert len(raw) < limits.MAX_BODY_BYTES
    with pytest.raises(InvalidRequest):
        decode_request("add", raw)


def test_nesting_up_to_the_limit_is_accepted() -> None:
    # The outer object is one level; the metadata value adds the rest.
    raw = body({"type": "fact", "content": "x", "metadata": nested(limits.MAX_NESTING - 1)})
    req = decode_request("add", raw)
    assert isinstance(req, AddRequest)
    with pytest.raises(InvalidRequest):
        check_nesting(body({"metadata": nested(limits.MAX_NESTING)}))


def test_brackets_inside_strings_do_not_count_toward_nesting() -> None:
    content = "[[[[{{{{" * 20 + 'quote \\" inside [{' * 10
    raw = body({"type": "fact", "content": content, "tags": ["a"], "metadata": {"k": "{" * 50}})
    req = decode_request("add", raw)
    assert isinstance(req, AddRequest)
    assert req.content == content


def test_escaped_quote_does_not_end_a_string_for_nesting() -> None:
    # If `\"` ended the string, the brackets after it would count as 40 levels.
    raw = b'{"content": "a\\" ' + b"[" * 40 + b'"}'
    check_nesting(raw)
    raw_deep = b'{"content": "a\\\\", "m": ' + b"[" * 40 + b"]" * 40 + b"}"
    with pytest.raises(InvalidRequest):
        check_nesting(raw_deep)


def _reference_depth(raw: bytes) -> tuple[int, bool]:
    """A plain character-by-character JSON scanner: the meaning `nesting_depth` must keep.
    Also whether the body is past repair: a backslash outside strings, where a JSON reader
    stops (so what follows can never be decoded, whatever its nesting)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        ch = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "\\":
            return deepest, True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest, False


def test_nesting_depth_agrees_with_a_plain_scanner_on_random_bodies() -> None:
    import random

    rng = random.Random(7)
    alphabet = ['"', "\\", "[", "]", "{", "}", "a", ":", ",", " "]
    for _ in range(3000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))).encode()
        depth, stops = _reference_depth(raw)
        if stops:  # counted exactly up to where a reader stops, perhaps more after it
            assert nesting_depth(raw) >= depth, raw
        else:
            assert nesting_depth(raw) == depth, raw


def test_an_unterminated_run_of_escaped_quotes_is_answered_at_once() -> None:
    # Regression: a regex skipping strings backtracked quadratically on this body (minutes at
    # 256 KiB). The check is now linear; this test would hit the suite's timeout otherwise.
    raw = b'{"content": "' + b'\\"' * (limits.MAX_BODY_BYTES // 2 - 40) + b"[{" * 20
    assert len(raw) <= limits.MAX_BODY_BYTES
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        decode_request("add", raw)


def test_unknown_field_message_names_it_and_suggests_the_close_match() -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_request("add", body({"type": "fact", "content": "x", "tag": ["a"]}))
    message = info.value.message
    assert 'Unknown field "tag" in add request.' in message
    assert 'Did you mean "tags"?' in message
    assert "Known fields:" in message
    assert info.value.code == "invalid_request"


def test_unknown_field_with_no_close_match_lists_known_fields_without_a_guess() -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_request("get", body({"ids": ["a"], "zzzzzz": 1}))
    assert "Did you mean" not in info.value.message
    assert "Known fields: ids, keys, context." in info.value.message


def test_validation_error_message_says_which_request_and_why() -> None:
    with pytest.raises(InvalidRequest, match=r"Invalid search request: .*limit"):
        decode_request("search", body({"query": "x", "limit": 101}))


def test_post_init_error_becomes_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="never guesses"):
        decode_request("clear_by_type", body({"type": "context"}))


# --------------------------------------------------------------------------- operation checks


def test_content_of_32_kib_is_accepted() -> None:
    check_content("a" * limits.MAX_CONTENT_BYTES)
    assert len("é".encode()) == 2


def test_content_over_32_kib_in_utf8_bytes_is_too_large() -> None:
    # 16,385 characters, but 32,770 bytes of UTF-8.
    content = "é" * (limits.MAX_CONTENT_BYTES // 2 + 1)
    assert len(content) < limits.MAX_CONTENT_BYTES
    with pytest.raises(TooLarge, match="32770 bytes"):
        check_content(content)


def test_metadata_none_is_stored_as_nothing() -> None:
    assert check_metadata(None) is None


def test_metadata_is_returned_as_json() -> None:
    assert json.loads(check_metadata({"a": [1, {"b": "c"}]})) == {"a": [1, {"b": "c"}]}


def test_metadata_over_8_kib_is_too_large() -> None:
    with pytest.raises(TooLarge, match="metadata"):
        check_metadata({"blob": "x" * limits.MAX_METADATA_BYTES})


def test_metadata_nested_more_than_8_levels_is_invalid_request() -> None:
    assert check_metadata(nested(8)) is not None  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="8 levels"):
        check_metadata(nested(9))  # type: ignore[arg-type]


def test_known_type_config_is_returned() -> None:
    assert type_config(DEFAULT_TYPES, "goal") is DEFAULT_TYPES["goal"]


def test_unknown_type_is_invalid_request_listing_known_types() -> None:
    with pytest.raises(InvalidRequest) as info:
        type_config(DEFAULT_TYPES, "pref")
    message = info.value.message
    assert 'Unknown memory type "pref"' in message
    for name in DEFAULT_TYPES:
        assert name in message


def _defaulted_fields(op: str) -> list[str]:
    """The fields of `op`'s request that have a default and do not take null."""
    info = msgspec.inspect.type_info(REQUEST_TYPES[op])
    assert isinstance(info, msgspec.inspect.StructType)
    out = []
    for f in info.fields:
        types = f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,)
        if not f.required and not any(isinstance(t, msgspec.inspect.NoneType) for t in types):
            out.append(f.encode_name)
    return out


@pytest.mark.parametrize("op", OPS)
def test_a_null_for_a_field_with_a_default_is_taken_as_absent(op: str) -> None:
    # As JSON libraries of other languages write an absent optional field (Jackson, serde).
    example = dict(BY_NAME[op].example)
    for name in _defaulted_fields(op):
        absent = {k: v for k, v in example.items() if k != name}
        assert decode_request(op, body({**absent, name: None})) == decode_request(
            op, body(absent)
        ), name


def test_nulls_in_tagged_actions_are_taken_as_absent() -> None:
    raw = {"actions": [{"action": "add", "type": "fact", "content": "x", "tags": None}]}
    req = decode_request("apply", body(raw))
    assert req.actions[0].tags == []  # type: ignore[attr-defined]


def test_a_null_that_means_something_is_kept_and_a_required_null_refused() -> None:
    # On update, a null bound opens the window (absent: left as it is).
    opened = decode_request("update", body({"id": "m1", "importance": 0.5, "valid_until": None}))
    kept = decode_request("update", body({"id": "m1", "importance": 0.5}))
    assert opened != kept
    with pytest.raises(InvalidRequest, match="content"):
        decode_request("add", body({"type": "fact", "content": None, "tags": None}))


def test_a_whole_number_written_as_a_float_is_taken_where_an_integer_is_wanted() -> None:
    # Python's json.dumps(3600.0) writes 3600.0; JSON has one kind of number.
    add = decode_request("add", body({"type": "fact", "content": "x", "ttl_s": 3600.0}))
    assert isinstance(add, AddRequest) and add.ttl_s == 3600 and type(add.ttl_s) is int
    assert decode_request("list", body({"limit": 5.0})) == decode_request(
        "list", body({"limit": 5})
    )
    for wrong in (1.5, True, "3600"):
        with pytest.raises(InvalidRequest, match="ttl_s"):
            decode_request("add", body({"type": "fact", "content": "x", "ttl_s": wrong}))


def test_a_day_where_a_time_is_wanted_is_its_first_moment_in_utc() -> None:
    day = decode_request("search", body({"query": "x", "since": "2026-01-31"}))
    moment = decode_request("search", body({"query": "x", "since": "2026-01-31T00:00:00Z"}))
    assert day == moment
    # Only where a time is wanted: a content that reads as a day stays text.
    add = decode_request("add", body({"type": "fact", "content": "2026-01-31", "ttl_s": 60.0}))
    assert isinstance(add, AddRequest) and add.content == "2026-01-31"
    with pytest.raises(InvalidRequest, match="since"):
        decode_request("search", body({"query": "x", "since": "2026-13-01"}))
