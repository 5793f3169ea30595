"""The stored record: one Struct, encoded to the hash layout Redis holds and decoded back."""

from __future__ import annotations

import re

import msgspec
import pytest

from contracts.messages import (
    AddRequest,
    ExportedMemory,
    ImportedMemory,
    Memory,
    RecalledMemory,
    ScoredMemory,
)
from handlers.ops.replies import READ_ONLY, TO_WIRE, as_record, as_wire
from handlers.store import batch, reads, spaces, transfer, validity, writes
from handlers.store.record import (
    CANDIDATE_FIELDS,
    OPEN_UNTIL_MS,
    PERMANENT_MS,
    RECORD_FIELDS,
    Candidate,
    Record,
    Summary,
    changed_fields,
    decode,
    new_fields,
    workspace_tag,
)
from handlers.store.schema import pool_schema_dict, schema_dict
from handlers.store.tallies import scripts as tally_scripts

T0 = 1_790_000_000_000


def record(**changes: object) -> Record:
    rec = Record(
        id="01JABCDEFGHJKMNPQRSTVWXYZ0",
        type="decision",
        content="Use Postgres",
        tags=("db", "infra"),
        importance=0.7,
        workflow_id="wf_1",
        created_at=T0,
        updated_at=T0,
        expires_at=PERMANENT_MS,
        agent_id="planner",
        source="meeting",
        metadata='{"k":1}',
        content_hash="c0ffee",
        session_id="s-1",
        title="Database",
        facts=["Postgres 16", "one cluster, per-tenant schemas"],
        narrative="Chosen after the load test.",
        related_files=["infra/db.tf"],
        related_people=["Ana Lima", "Bo|Chen", "ana  LIMA"],
        superseded_by="01NEWER",
        workspace="Project Alpha",
        store="shared",
    )
    return msgspec.structs.replace(rec, **changes)


def as_stored(fields: dict[str, object]) -> dict[str, str]:
    """What HMGET gives back for a hash HSET with these values (redis-py's encoding)."""
    return {k: v if isinstance(v, str) else repr(v) for k, v in fields.items()}


def test_a_new_record_is_the_hash_layout_earlier_versions_wrote_plus_new_fields() -> None:
    assert new_fields(record()) == {
        "id": "01JABCDEFGHJKMNPQRSTVWXYZ0",
        "type": "decision",
        "content": "Use Postgres",
        "tags": "db,infra",
        "tagtext": "db infra",
        "importance": 0.7,
        "wf": "wf_1",
        "general": "0",
        "created_at": T0,
        "updated_at": T0,
        "expires_at": PERMANENT_MS,
        "agent_id": "planner",
        "source": "meeting",
        "metadata": '{"k":1}',
        "mention_count": 1,
        "chash": "c0ffee",
        "session_id": "s-1",
        "title": "Database",
        "facts": '["Postgres 16","one cluster, per-tenant schemas"]',
        "narrative": "Chosen after the load test.",
        "related_files": '["infra/db.tf"]',
        "related_people": '["Ana Lima","Bo|Chen","ana  LIMA"]',
        "people": "ana lima|bo chen",
        "has_people": "1",
        "superseded_by": "01NEWER",
        "superseded": "1",
        "workspace": "Project Alpha",
        "wsh": workspace_tag("Project Alpha"),
        "store": "shared",
        # v3: the validity window `as_of` reads match, open bounds filled in.
        "vf": T0,
        "vu": OPEN_UNTIL_MS,
        # v4: the version the write scripts bump.
        "version": 1,
    }


def test_a_validity_window_is_indexed_and_an_ended_one_flagged_at_write() -> None:
    later = T0 + 86_400_000
    held = new_fields(record(superseded_by=None, valid_from=T0 - 5, valid_until=later))
    assert (held["vf"], held["vu"], held.get("superseded")) == (T0 - 5, later, None)
    assert (held["valid_from"], held["valid_until"]) == (T0 - 5, later)
    # Written after its end (a past fact recorded now): not current from the start.
    ended = new_fields(record(superseded_by=None, valid_until=T0 - 1))
    assert (ended["vf"], ended["vu"], ended["superseded"]) == (T0, T0 - 1, "1")


def test_a_changed_end_decides_the_flag_afresh() -> None:
    # The flag was set by a read once the old end passed; opening the end clears it.
    old = record(superseded_by=None, valid_until=T0 + 10)
    reopened = msgspec.structs.replace(old, valid_until=None, updated_at=T0 + 20)
    assert changed_fields(old, reopened)["superseded"] == ""
    assert changed_fields(old, reopened)["vu"] == OPEN_UNTIL_MS
    # A superseded one stays flagged whatever its end.
    sup = record(valid_until=T0 + 10)
    assert changed_fields(sup, msgspec.structs.replace(sup, valid_until=None))["superseded"] == "1"


def test_empty_optional_fields_are_not_written() -> None:
    fields = new_fields(
        record(
            tags=(),
            workflow_id=None,
            agent_id=None,
            source=None,
            metadata=None,
            content_hash="",
            session_id=None,
            title=None,
            facts=[],
            narrative=None,
            related_files=[],
            related_people=[],
            superseded_by=None,
        )
    )
    assert fields["general"] == "1"
    optional = {"tags", "tagtext", "wf", "agent_id", "source", "metadata", "chash", "session_id"}
    optional |= {"title", "facts", "narrative", "related_files", "related_people", "people"}
    optional |= {"superseded_by", "superseded", "has_people"}
    assert not optional & set(fields)
    assert fields["importance"] == 0.7


def test_a_record_reads_back_as_it_was_written() -> None:
    rec = record()
    assert decode(Record, as_stored(new_fields(rec))) == rec


def test_a_hash_from_before_mention_counts_and_tags_reads_with_defaults() -> None:
    old = {"id": "01OLD", "type": "fact", "content": "x", "importance": "0.5", "general": "1"}
    old |= {"created_at": str(T0), "updated_at": str(T0), "expires_at": str(PERMANENT_MS)}
    rec = decode(Record, old)
    assert (rec.mention_count, rec.tags, rec.workflow_id, rec.content_hash) == (1, (), None, "")


def test_a_corrupt_stored_number_is_an_error_not_a_silent_zero() -> None:
    with pytest.raises(msgspec.ValidationError, match="importance"):
        decode(Summary, {"id": "x", "type": "fact", "importance": "high", "created_at": "1"})


def test_an_update_writes_only_what_changed_and_clears_emptied_fields() -> None:
    old = record()
    new = msgspec.structs.replace(old, tags=(), importance=0.9, updated_at=T0 + 1)
    assert changed_fields(old, new) == {
        "tags": "",
        "tagtext": "",
        "importance": 0.9,
        "updated_at": T0 + 1,
    }
    assert changed_fields(old, old) == {}


def test_candidates_read_the_search_reply_names() -> None:
    cand = decode(
        Candidate,
        {"id": "a", "importance": "0.5", "created_at": "7", "expires_at": "9",
         "vector_distance": "0.25", "__score": "3.5"},
    )  # fmt: skip
    assert (cand.distance, cand.text_score, cand.mention_count) == (0.25, 3.5, 1)


# Fields of the hash that only the index (and describe's tallies) read.
INDEX_ONLY = {"general", "tagtext", "people", "superseded", "has_people", "wsh", "vf", "vu"}


def test_reads_ask_for_expiry_first_and_candidates_for_ranking_fields_only() -> None:
    assert RECORD_FIELDS[0] == "expires_at"
    whole = record(valid_from=T0, valid_until=T0 + 1, idle_ttl_s=60, ttl_until=T0 + 9, key="k")
    assert set(RECORD_FIELDS) == set(new_fields(whole)) - INDEX_ONLY
    assert CANDIDATE_FIELDS == ("type", "importance", "created_at", "expires_at", "mention_count")


def test_candidates_are_read_from_the_index_alone() -> None:
    # Every candidate field is sortable, so FT.SEARCH answers from its sorting vector without
    # loading the hash: cheaper, and an expired memory not yet evicted still comes back
    # whole (with one field outside it, such a memory came back empty and broke the search).
    for schema in (schema_dict("ns", 8), pool_schema_dict(0, 8)):
        sortable = {f["name"] for f in schema["fields"] if f.get("attrs", {}).get("sortable")}
        assert set(CANDIDATE_FIELDS) <= sortable


# Every room of the store that keeps Lua scripts.
_SCRIPTS = {
    f"{room.__name__}.{n}": getattr(room, n)
    for room in (batch, reads, spaces, transfer, validity, writes, tally_scripts)
    for n in dir(room)
    if n.endswith("_LUA")
}


def test_every_room_with_lua_is_checked() -> None:
    assert len(_SCRIPTS) == 19  # every script the store runs


@pytest.mark.parametrize("name", sorted(_SCRIPTS))
def test_scripts_name_fields_by_their_storage_names(name: str) -> None:
    source = _SCRIPTS[name]
    assert "$" not in source
    # Reads of a record (not of its access hash) name only fields a record has.
    for names in re.findall(r"HMGET', (?:rec|old|KEYS\[1\]), ('[^)]*)\)", source):
        assert set(re.findall(r"'(\w+)'", names)) <= set(RECORD_FIELDS) | INDEX_ONLY


# --------------------------------------------------------------------------- wire mapping

RECORD_ATTRS = set(Record.__struct_fields__)


@pytest.mark.parametrize("wire", [Memory, ScoredMemory, ExportedMemory, RecalledMemory])
def test_every_field_of_a_returned_memory_is_stored_converted_or_given_by_the_read(wire) -> None:
    unaccounted = set(wire.__struct_fields__) - RECORD_ATTRS - set(TO_WIRE) - READ_ONLY
    assert not unaccounted, f"{wire.__name__}: map these in handlers/ops/replies.py"


def test_every_field_of_an_imported_memory_is_stored_or_given_by_the_read() -> None:
    # What an import carries either goes into the record by name or is a read's own field.
    unaccounted = set(ImportedMemory.__struct_fields__) - RECORD_ATTRS - READ_ONLY
    assert not unaccounted


def test_a_record_goes_to_the_wire_and_back_unchanged() -> None:
    rec = record(updated_at=T0 + 333, expires_at=T0 + 86_400_000, mention_count=3)
    exported = as_wire(ExportedMemory, rec, access_count=2, last_accessed_at=None)
    wire = msgspec.json.decode(msgspec.json.encode(exported), type=ImportedMemory)
    back = as_record(
        wire,
        tags=tuple(wire.tags),
        created_at=rec.created_at,
        updated_at=rec.updated_at,
        expires_at=rec.expires_at,
        metadata=msgspec.json.encode(wire.metadata).decode(),
        content_hash=wire.content_hash or "",
    )
    assert back == rec


def test_an_add_request_fills_the_record_fields_it_names() -> None:
    req = AddRequest(type="fact", content="x", title="T", facts=["f"], source="s", agent_id="a")
    rec = as_record(req, id="1", tags=(), created_at=1, updated_at=1, expires_at=2, importance=0.5)
    assert (rec.title, rec.facts, rec.source, rec.agent_id, rec.type) == (
        "T",
        ["f"],
        "s",
        "a",
        "fact",
    )
