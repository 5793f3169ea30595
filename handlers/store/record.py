"""A memory as stored: one Redis hash, described by one msgspec Struct.

The Structs use the protocol's field names; `rename` maps them to the hash's short storage
names. `new_fields` gives the hash to HSET (with the fields only the index reads), and
`decode` turns HMGET or FT.SEARCH values back into a Struct with `msgspec.convert(...,
strict=False)`, which parses the stored strings as ints and floats. A new field is one line
in `Record` (and, when it is searched or filtered, one entry in `schema.py`).
"""

from __future__ import annotations

import functools
import hashlib
import types
import unicodedata
from typing import Any, NamedTuple, TypeVar, cast

import msgspec

from handlers.store.resp import text

# Permanent memories get an expiry far in the future, so one numeric range filters expiry.
PERMANENT_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z
# The `vu` index field of a memory whose validity has no end: past any time the protocol
# can name (as_of is at most year 9999), so every memory has both bounds to filter on.
OPEN_UNTIL_MS = 10**16
# The `general` tag of a memory stored outside any workflow ("0" inside one).
GENERAL = "1"
# Protocol name -> storage name, where they differ.
STORAGE_NAMES = {"workflow_id": "wf", "content_hash": "chash"}


class Summary(msgspec.Struct, kw_only=True, rename=STORAGE_NAMES):
    """What a compact listing reads of a memory."""

    id: str
    type: str
    content: str = ""
    # Stored comma-joined: the TAG field's separator.
    tags: tuple[str, ...] = ()
    importance: float = 0.0
    # None: a general memory, found from every workflow.
    workflow_id: str | None = None
    created_at: int  # epoch ms, like every time of a record
    # v3: forgotten this long after the last access (see Record.ttl_until).
    idle_ttl_s: int | None = None


class Record(Summary, kw_only=True):
    """A whole memory as stored, but for its embedding (only the index reads that)."""

    updated_at: int
    # PERMANENT_MS for a memory that never expires.
    expires_at: int
    agent_id: str | None = None
    source: str | None = None
    # The metadata object as JSON text, exactly as the writer sent it.
    metadata: str | None = None
    mention_count: int = 1
    # The exact-dedup key; "" for a memory added with `dedup: "none"`.
    content_hash: str = ""
    # The `context.session_id` of the add that wrote it.
    session_id: str | None = None
    # Observation fields (docs/protocol.md, "Observations").
    title: str | None = None
    facts: list[str] = []
    narrative: str | None = None
    related_files: list[str] = []
    related_people: list[str] = []
    # The id of the newer memory that replaced this one (`supersedes`).
    superseded_by: str | None = None
    # The name of the workspace it belongs to.
    workspace: str | None = None
    # Its trust-gated store: private, shared or social. A hash without the field (written by an
    # older version) decodes as private.
    store: str = "private"
    # v3 validity, epoch ms (None: open). The index reads them as `vf` and `vu` (`_stored`).
    valid_from: int | None = None
    valid_until: int | None = None
    # v3 idleness (`idle_ttl_s`): never kept past `ttl_until` (its TTL's end; None: none).
    # `expires_at` is then the index's bound (`idle_expiry`).
    ttl_until: int | None = None
    # v4: 1 when added, +1 on every write that changes the record (the write scripts bump
    # it); a hash without the field (written before v4) is at version 1.
    version: int = 1
    # v4: the name its writer gave it, unique among the current memories of its store.
    key: str | None = None


class Candidate(
    msgspec.Struct,
    kw_only=True,
    rename={**STORAGE_NAMES, "distance": "vector_distance", "text_score": "__score"},
):
    """A search candidate: what ranking needs of a memory, before the winners are read."""

    id: str
    type: str = ""
    importance: float
    created_at: int
    expires_at: int
    mention_count: int = 1
    # Cosine distance (0..2) from the vector query; BM25 from the full-text query.
    distance: float | None = None
    text_score: float | None = None
    # For the query signals (handlers.ops.query_signals): who it names, its speaker's tag,
    # when it held; and what those add to its score (set by the search, never stored).
    tags: tuple[str, ...] = ()
    related_people: list[str] = []
    content: str = ""
    valid_from: int | None = None
    valid_until: int | None = None
    boost: float = 0.0


class Entry(msgspec.Struct, kw_only=True):
    """One entry of a memory's history, as stored (a JSON item of its history list)."""

    event: str  # added, updated, mentioned, superseded, deleted
    at: int  # epoch ms
    agent_id: str | None = None
    session_id: str | None = None
    # Field -> {"old": ..., "new": ...}, values as replies show them.
    changes: dict[str, dict[str, Any]] = {}
    # Why, where the event alone does not say (v3: "compacted" for a `compact` deletion).
    reason: str | None = None


class Mentions(msgspec.Struct, kw_only=True, rename=STORAGE_NAMES):
    """Who a memory names, and when it was written (for `people`)."""

    id: str
    related_people: list[str] = []
    created_at: int


class Fetched(NamedTuple):
    """A live memory as a read returns it: the record and its access counters as they were
    before this read, and when its keys expire after this read (their PEXPIRETIME; an
    idle memory's moves with reads)."""

    record: Record
    access_count: int
    last_accessed_ms: int | None
    expires_ms: int


class TypeGroup(msgspec.Struct, kw_only=True):
    """One row of `describe`'s aggregation: the live memories of one type on one side of
    the scope (general or workflow), without their content."""

    type: str
    general: bool
    n: int
    tags: list[str] = []  # each a memory's comma-joined tags
    oldest: float
    newest: float
    # The earliest expiry among them (until when a cached summary stays exact).
    expiry: float = float("inf")
    # "1" for the group of superseded memories (see record.supersede_fields).
    superseded: str | None = None

    def tag_set(self) -> set[str]:
        return {t for raw in self.tags for t in raw.split(",") if t}


S = TypeVar("S", bound=msgspec.Struct)
_json = msgspec.json


def storage_fields(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(f.encode_name for f in msgspec.structs.fields(cls))


_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Record)}
# How a list is stored: a tuple of tags as one comma-joined string (the TAG field's own
# format), any other list as JSON text (its items may hold commas).
_TAG_LISTS = tuple(
    f.encode_name for f in msgspec.structs.fields(Record) if f.type == tuple[str, ...]
)
_JSON_LISTS = tuple(f.encode_name for f in msgspec.structs.fields(Record) if f.type == list[str])
# Optional numbers: stored as "" once cleared (`changed_fields`), read back as None.
_OPT_NUMBERS = tuple(
    f.encode_name for f in msgspec.structs.fields(Record) if f.type in (int | None, float | None)
)
# The separator of the `people` TAG field: names may hold commas, rarely a bar.
PEOPLE_SEPARATOR = "|"


def workspace_tag(name: str) -> str:
    """How a workspace name is indexed and matched (exactly): a digest, so that no name needs
    escaping in a query, whatever characters it holds."""
    return hashlib.sha256(name.encode()).hexdigest()[:24]


# Control characters: RediSearch's query parser cannot take them in a tag value, even
# escaped (a fuzzed `people` filter with U+0000 or U+007F gave a syntax error).
_CONTROL = dict.fromkeys([*range(0x20), 0x7F], " ")


def person_tag(name: str) -> str:
    """How a name is indexed and matched: in NFC (so a name stored decomposed before names
    were normalised is still the same person), lower-cased, without the separator or control
    characters, runs of blanks as one space."""
    name = unicodedata.normalize("NFC", name)
    return " ".join(name.replace(PEOPLE_SEPARATOR, " ").translate(_CONTROL).lower().split())


# What a read of a whole record asks for. `expires_at` first: the read and delete scripts
# check it before anything else.
RECORD_FIELDS = ("expires_at", *(f for f in storage_fields(Record) if f != "expires_at"))
# What the search queries return of each candidate (its id comes from the key).
# The query signals' fields (handlers.ops.query_signals): returned only when a signal is on,
# as none is sortable, so returning one makes Redis read each candidate's hash.
SIGNAL_FIELDS = ("tags", "related_people", "content", "valid_from", "valid_until")
CANDIDATE_FIELDS = tuple(
    f
    for f in storage_fields(Candidate)
    if f in RECORD_FIELDS and f != "id" and f not in SIGNAL_FIELDS
)


def _stored(rec: Record) -> dict[str, Any]:
    """Every field of the hash, by storage name, with those only the index reads."""
    out = msgspec.to_builtins(rec)
    for name in _TAG_LISTS:
        out[name] = ",".join(out[name])
    for name in _JSON_LISTS:
        out[name] = _json.encode(out[name]).decode() if out[name] else ""
    out["general"] = GENERAL if rec.workflow_id is None else "0"
    # Tags spelled out as words, so full-text search matches them too.
    out["tagtext"] = " ".join(rec.tags)
    out["people"] = PEOPLE_SEPARATOR.join(dict.fromkeys(map(person_tag, rec.related_people)))
    out["has_people"] = "1" if rec.related_people else ""
    out["wsh"] = workspace_tag(rec.workspace) if rec.workspace is not None else ""
    out.update(_superseded(rec.superseded_by))
    out["vf"], out["vu"] = validity(rec)
    if ended(rec):
        out["superseded"] = "1"
    return out


def idle_expiry(idle_ttl_s: int, at_ms: int, cap_ms: int) -> tuple[int, int]:
    """When a memory forgotten `idle_ttl_s` after its last access, at `at_ms`, expires (its
    keys' PEXPIREAT), never past `cap_ms`; and the `expires_at` it is indexed with: a tenth
    of its idle time later, so that reads, which push the expiry, re-index it (an HSET, and
    its vector with it) at most once per tenth of its idle time, never on every read."""
    native = min(at_ms + idle_ttl_s * 1000, cap_ms)
    return native, min(native + idle_ttl_s * 100, cap_ms)


def lifetime(now_ms: int, cap_ms: int, idle_ttl_s: int | None) -> dict[str, Any]:
    """The record fields of a memory written now that expires at `cap_ms` (its TTL's end,
    PERMANENT_MS for none), or, idle, `idle_ttl_s` after its last access (`idle_expiry`)."""
    if idle_ttl_s is None:
        return {"expires_at": cap_ms, "idle_ttl_s": None, "ttl_until": None}
    bound = idle_expiry(idle_ttl_s, now_ms, cap_ms)[1]
    until = None if cap_ms >= PERMANENT_MS else cap_ms
    return {"expires_at": bound, "idle_ttl_s": idle_ttl_s, "ttl_until": until}


def expiry(rec: Record, at_ms: int) -> int:
    """When the memory, last accessed at `at_ms`, expires: its `expires_at`, or, idle, that
    long after `at_ms` (`idle_expiry`)."""
    if rec.idle_ttl_s is None:
        return rec.expires_at
    return idle_expiry(rec.idle_ttl_s, at_ms, rec.ttl_until or PERMANENT_MS)[0]


def key_expiry(pexpiretime: int) -> int:
    """A key's PEXPIRETIME as a record's time: PERMANENT_MS for a key without one (-1)."""
    return PERMANENT_MS if pexpiretime < 0 else pexpiretime


def pushed_expiry(rec: Record, key_ms: int, now_ms: int) -> int:
    """When a memory whose keys expire at `key_ms` expires once an access at `now_ms` has
    pushed it (`KEEP`): an idle one `idle_ttl_s` from then at most its TTL's end, unless
    its keys outlive that already; any other is unmoved."""
    if rec.idle_ttl_s is None:
        return key_ms
    return max(key_ms, expiry(rec, now_ms))


def validity(rec: Record) -> tuple[int, int]:
    """The window an `as_of` read matches (`vf` <= as_of < `vu`): open bounds filled in."""
    start = rec.valid_from if rec.valid_from is not None else rec.created_at
    until = OPEN_UNTIL_MS if rec.valid_until is None else min(rec.valid_until, OPEN_UNTIL_MS)
    return start, until


def ended(rec: Record) -> bool:
    """Whether its validity had ended when it was last written. One that ends later is
    flagged by the read that first finds it due (the `v` set of the tallies' `TALLY`)."""
    return rec.valid_until is not None and rec.valid_until <= rec.updated_at


def _superseded(by: str | None) -> dict[str, Any]:
    # `superseded` is a flag for the index: reads filter on its absence, which a memory
    # written before supersedes existed also passes. It also marks a memory whose validity
    # has ended: current reads leave both out alike (v3).
    return {_NAMES["superseded_by"]: by, "superseded": "1" if by else ""}


def supersede_fields(by: str) -> dict[str, Any]:
    """What to HSET on a memory that `by` supersedes."""
    return _superseded(by)


def new_fields(rec: Record) -> dict[str, Any]:
    """The hash of a new memory: every field that has a value."""
    return {k: v for k, v in _stored(rec).items() if v is not None and v != ""}


def mark_field(name: str) -> str:
    """The hash field that keeps the stream position of the durable write that last set the
    request field `name` of a memory (not indexed, not a `Record` field)."""
    return f"^{name}"


def changed_fields(old: Record, new: Record) -> dict[str, Any]:
    """What to HSET to turn `old` into `new` (a field that became empty is set to "")."""
    before, after = _stored(old), _stored(new)
    out = {k: "" if v is None else v for k, v in after.items() if v != before.get(k)}
    if "vu" in out:
        # The flag may have been set when the old validity ended (after `old` was written):
        # a new end decides it afresh.
        out["superseded"] = after["superseded"]
    return out


@functools.cache
def _stored_as(cls: type[msgspec.Struct]) -> tuple[tuple[str, ...], ...]:
    """The names of `cls`'s fields stored as tag lists, JSON lists and optional numbers."""
    names = {f.encode_name for f in msgspec.structs.fields(cls)}
    return tuple(
        tuple(n for n in group if n in names) for group in (_TAG_LISTS, _JSON_LISTS, _OPT_NUMBERS)
    )


def decode(cls: type[S], stored: dict[str, str]) -> S:
    """A Struct from stored string values (missing fields take their defaults)."""
    return msgspec.convert(prepared(cls, stored), cls, strict=False)


def decode_all(cls: type[S], stored: list[dict[str, str]]) -> list[S]:
    """`decode` of each, in one conversion (a search decodes dozens of candidates)."""
    many = types.GenericAlias(list, (cls,))  # list[cls]
    return cast(list[S], msgspec.convert([prepared(cls, s) for s in stored], many, strict=False))


def prepared(cls: type[msgspec.Struct], stored: dict[str, str]) -> dict[str, Any]:
    """Stored string values made ready to convert into `cls` (in place): lists split, JSON
    decoded, cleared numbers dropped."""
    values: dict[str, Any] = stored
    tag_lists, json_lists, opt_numbers = _stored_as(cls)
    for name in tag_lists:
        if name in values:
            values[name] = [t for t in values[name].split(",") if t]
    for name in json_lists:
        if values.get(name):
            values[name] = _json.decode(values[name])
        else:
            values.pop(name, None)
    for name in opt_numbers:
        if values.get(name) == "":
            del values[name]
    return values


def record_of(names: tuple[str, ...], values: list[Any]) -> Record:
    """A record from the values of the fields `names` (absent ones None)."""
    try:  # the hot path: values come as bytes
        stored = {n: v.decode() for n, v in zip(names, values, strict=True) if v is not None}
    except AttributeError:  # a client that decodes replies itself
        stored = {n: text(v) for n, v in zip(names, values, strict=True) if v is not None}
    return decode(Record, stored)
