"""Raw FT.SEARCH replies (RESP3, as redis-py 8 returns them) parsed into keys and fields."""

from __future__ import annotations

from handlers.store.resp import parse_aggregate, parse_search


def test_resp3_search_with_fields_and_scores() -> None:
    raw = {
        b"total_results": 7,
        b"results": [
            {b"id": b"k1", b"score": 1.5, b"extra_attributes": {b"type": b"fact"}},
            {b"id": b"k2", b"score": 0.5, b"extra_attributes": {b"type": b"note"}},
        ],
    }
    found = parse_search(raw, with_scores=True)
    assert found.total == 7
    assert found.docs == [
        ("k1", {"type": "fact", "__score": "1.5"}),
        ("k2", {"type": "note", "__score": "0.5"}),
    ]


def test_resp3_nocontent_rows_have_no_fields() -> None:
    raw = {b"total_results": 2, b"results": [{b"id": b"k1"}, {b"id": b"k2"}]}
    assert parse_search(raw).docs == [("k1", {}), ("k2", {})]


def test_resp3_decoded_by_the_client() -> None:
    raw = {"total_results": 1, "results": [{"id": "k1", "extra_attributes": {"type": "x"}}]}
    assert parse_search(raw).docs == [("k1", {"type": "x"})]


def test_ids_and_scores_only_in_either_protocol() -> None:
    resp3 = {
        b"total_results": 2,
        b"results": [{b"id": b"k1", b"score": 2.0}, {b"id": b"k2", b"score": 0.5}],
    }
    resp2 = [2, b"k1", b"2", b"k2", b"0.5"]
    for raw in (resp3, resp2):
        found = parse_search(raw, with_scores=True)
        assert found.total == 2
        assert found.docs == [
            ("k1", {"__score": "2.0" if raw is resp3 else "2"}),
            ("k2", {"__score": "0.5"}),
        ]


def test_resp2_fields_and_scores() -> None:
    raw = [1, b"k1", b"1.5", [b"type", b"fact"]]
    assert parse_search(raw, with_scores=True).docs == [("k1", {"type": "fact", "__score": "1.5"})]


def test_a_document_whose_key_went_between_match_and_load_is_left_out() -> None:
    # RediSearch answers None in place of the fields of a document whose hash expired (or
    # was deleted) after the query matched it; first or later, it must not be read as a
    # reply without fields.
    raw = [3, b"k1", None, b"k2", [b"type", b"fact"], b"k3", None]
    assert parse_search(raw).docs == [("k2", {"type": "fact"})]
    scored = [2, b"k1", b"1.5", None, b"k2", b"0.5", [b"type", b"fact"]]
    assert parse_search(scored, with_scores=True).docs == [
        ("k2", {"type": "fact", "__score": "0.5"})
    ]


def test_aggregate_rows_in_either_protocol() -> None:
    resp2 = [
        2,
        [b"type", b"fact", b"n", b"3", b"tags", [b"a", b"b"]],
        [b"type", b"note", b"n", b"1"],
    ]
    resp3 = {
        b"total_results": 2,
        b"results": [
            {b"extra_attributes": {b"type": b"fact", b"n": b"3", b"tags": [b"a", b"b"]}},
            {b"extra_attributes": {b"type": b"note", b"n": b"1"}},
        ],
    }
    expected = [{"type": "fact", "n": "3", "tags": ["a", "b"]}, {"type": "note", "n": "1"}]
    assert parse_aggregate(resp2) == expected
    assert parse_aggregate(resp3) == expected
