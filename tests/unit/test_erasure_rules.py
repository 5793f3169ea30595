"""Erasure's rules without a server (PROTOCOL v4, "Erasure"): which stream messages an
erasure takes, which streams it reads, what the caches are keyed by."""

from __future__ import annotations

import msgspec
import pytest
from redisvl.extensions.cache.embeddings import EmbeddingsCache

from contracts.events import Event
from handlers.embed.cache import cache_model, entry_key, text_digest
from handlers.ops.erasure import past_contents, record_texts
from handlers.store.keys import EMBED_CACHE
from handlers.store.record import Entry, Record
from handlers.store.text import WORDS_TOTAL, word_field
from handlers.streams import Sought, covers, overlaps

ID = "01JZ8Q4M3V7T2K9D5X6R1N0BCA"


def test_a_cache_entry_key_is_redisvls_key_of_the_texts_digest() -> None:
    cache = EmbeddingsCache(name=EMBED_CACHE)
    model = cache_model("minilm", 384)
    text = "the deploy window moved to thursday"
    assert entry_key(EMBED_CACHE, text, model) == cache._make_cache_key(text_digest(text), model)
    assert text not in entry_key(EMBED_CACHE, text, model)


def test_word_fields_are_hashes_apart_from_the_total() -> None:
    assert word_field("ledger") == word_field("ledger") != word_field("ledgers")
    assert "ledger" not in word_field("ledger") and len(word_field("ledger")) == 16
    assert WORDS_TOTAL not in {word_field(w) for w in ("*", "a", "")}


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("mem.ns1.>", "mem.ns1.events.>", True),
        ("mem.ns1.>", "mem.*.events.>", True),
        ("mem.ns1.>", ">", True),
        ("mem.ns1.>", "mem.ns2.events.>", False),
        ("memq.ns1.>", "memq.>", True),
        ("memq.ns1.>", "mem.>", False),
        ("mem.ns1.events.a", "mem.ns1.events.a.b", False),
        ("mem.ns1.*", "mem.ns1.x", True),
    ],
)
def test_subject_patterns_overlap_as_nats_matches_them(a: str, b: str, expected: bool) -> None:
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected


def _event(preview: str, mid: str = ID) -> bytes:
    return msgspec.json.encode(
        Event(
            action="added",
            id=mid,
            type="fact",
            workflow_id=None,
            agent_id=None,
            at="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
            preview=preview,
        )
    )


def test_a_message_is_the_erased_memorys_by_id_or_by_text() -> None:
    sought = Sought(frozenset({ID}), frozenset({"Dana's number is 555-0101", "ok"}))
    other = "01JZ8Q4M3V7T2K9D5X6R1N0BCB"
    assert sought.in_body(_event("anything", ID))
    assert sought.in_body(b'{"ids": ["' + ID.encode() + b'"]}')  # a durable delete
    assert sought.in_body(b'{"content": "Dana\'s number is 555-0101"}')  # a durable add
    assert sought.in_body(b'{"output": "grep: Dana\'s number is 555-0101 (1 hit)"}')
    assert sought.in_body(b"not json " + ID.encode())
    assert not sought.in_body(_event("ok then", other))  # a short text only matches whole
    assert sought.in_body(_event("ok", other))
    assert not sought.in_body(_event("Dana's number", other))


def test_the_texts_erased_are_the_records_and_its_past_contents() -> None:
    rec = Record(
        id=ID,
        type="observation",
        content="composed",
        tags=(),
        importance=0.5,
        created_at=1,
        updated_at=1,
        expires_at=2,
        source="notes.md",
        metadata='{"who": "Dana", "n": 3, "deep": {"list": ["x1"]}}',
        title="T",
        facts=["f1"],
        narrative="N",
    )
    assert set(record_texts(rec)) == {"composed", "f1", "Dana", "x1", "T", "N", "notes.md"}
    history = [
        Entry(event="added", at=1),
        Entry(event="updated", at=2, changes={"content": {"old": "v1", "new": "v2"}}),
        Entry(event="updated", at=3, changes={"importance": {"old": 0.5, "new": 0.9}}),
    ]
    assert past_contents(history) == ["v1", "v2"]


@pytest.mark.parametrize(
    ("flt", "subject", "expected"),
    [
        ("mem.ns1.>", "mem.ns1.events.>", True),  # a webhook's stream: read by sequence
        ("mem.ns1.>", "mem.ns1.events.x.y", True),
        ("mem.ns1.>", "mem.ns1", False),
        ("mem.ns1.>", "mem.*.events.>", False),  # other namespaces' too
        ("mem.ns1.>", "mem.>", False),
        ("memq.ns1.>", "memq.>", False),  # the durable writes' queue of every namespace
        ("mem.ns1.*", "mem.ns1.x", True),
        ("mem.ns1.*", "mem.ns1.>", False),
        ("mem.ns1.*", "mem.ns1.*", True),
        ("mem.ns1.x", "mem.ns1.*", False),
        (">", "anything.at.all", True),
    ],
)
def test_a_filter_covers_a_stream_subject_only_when_it_matches_all_it_does(
    flt: str, subject: str, expected: bool
) -> None:
    assert covers(flt, subject) is expected
