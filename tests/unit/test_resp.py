"""Raw FT.SEARCH replies (RESP3, as redis-py 8 returns them) parsed into keys and fields."""

from __future__ import annotations

from handlers.store.resp import parse_search


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
