"""Every reply of the wire protocol and the records they carry, as msgspec Structs: read
leniently by clients, so that handlers can add fields without breaking them. `kw_only` is
not inherited, so each class sets it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from contracts import limits
from contracts.fields import MemoryStore, ReadScope, SearchMode

# The records replies carry.


class Memory(msgspec.Struct, kw_only=True):
    """A stored memory as replies show it (never with its embedding)."""

    id: str
    type: str
    content: str
    tags: list[str] = []
    importance: float = 0.0
    workflow_id: str | None = None
    agent_id: str | None = None
    source: str | None = None
    metadata: dict[str, Any] = {}
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    access_count: int = 0
    last_accessed_at: datetime | None = None
    # How often this content was added (exact or near repeats fold into one memory).
    mention_count: int = 1
    # The `context.session_id` of the request that added it.
    session_id: str | None = None
    # Observation fields (null or empty when the memory was added without them).
    title: str | None = None
    facts: list[str] = []
    narrative: str | None = None
    related_files: list[str] = []
    related_people: list[str] = []
    # The id of the newer memory that replaced this one (`supersedes`), or null.
    superseded_by: str | None = None
    # The workspace it belongs to, or null.
    workspace: str | None = None
    # The trust-gated store it is in (a memory stored without one is private).
    store: MemoryStore = "private"
    # v3: when the fact held (null: open; no `valid_from` means from `created_at`). A
    # supersede closes `valid_until` at the newer memory's start.
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    # v3: forgotten this long after its last access (`expires_at` then moves with reads).
    idle_ttl_s: int | None = None
    # v4: 1 when added, +1 on every write that changes it (reads never do); what
    # `expected_version` is checked against.
    version: int = 1
    # v4: the name its writer gave it with `add`'s `key` (null: none).
    key: str | None = None


class ScoredMemory(Memory, kw_only=True):
    score: float = 0.0
    similarity: float = 0.0
    # Full-text relevance: BM25 normalised to the best match of this search (0..1); 0 when
    # the memory matched no query word or the search ran in vector mode.
    text_score: float = 0.0


class RecalledMemory(ScoredMemory, kw_only=True):
    # How recall found it: `identity`, `important`, `recent` (path 1) or `semantic` (path 2).
    path: str = "semantic"


class CompactMemory(msgspec.Struct, kw_only=True):
    id: str
    type: str
    preview: str
    tags: list[str] = []
    importance: float = 0.0
    workflow_id: str | None = None
    created_at: datetime


def preview(content: str) -> str:
    if len(content) <= limits.PREVIEW_CHARS:
        return content
    return content[: limits.PREVIEW_CHARS] + "..."


# The replies.


class Reply(msgspec.Struct, kw_only=True):
    success: bool = True


class ErrorReply(Reply, kw_only=True):
    success: bool = False
    code: str
    error: str
    # v4, on a `conflict` over a memory's version: the memory, and its version now (0 when
    # no current memory holds the key a keyed add expected).
    id: str | msgspec.UnsetType = msgspec.UNSET
    current_version: int | msgspec.UnsetType = msgspec.UNSET


class AddReply(Reply, kw_only=True):
    id: str
    workflow_id: str | None
    importance: float
    expires_at: datetime | None
    # Set when the content repeated an existing memory: then `id` is that memory's id.
    duplicate_of: str | None = None
    mention_count: int = 1
    # Of the request's `supersedes`: the ids now superseded by `id`, and those not found.
    superseded: list[str] = []
    missing: list[str] = []
    # The kinds of secret replaced by `[redacted:<kind>]` in what was stored (v3); absent
    # when none was.
    redacted: list[str] | msgspec.UnsetType = msgspec.UNSET
    # v4: the memory's version after this add (1 when new; a repeat's after its mention).
    version: int = 1
    # v4: the add's `key` was held by a current memory, which it replaced in place (`id`).
    replaced: bool = False


class Neighbour(msgspec.Struct, kw_only=True):
    """A current memory near a candidate fact: cosine similarity in [-1, 1]."""

    id: str
    content: str
    type: str
    similarity: float


class Reconciled(msgspec.Struct, kw_only=True):
    content: str
    # noop: an exact or near-duplicate current memory exists (`target`); supersede: a current
    # memory of the same type is similar but says something else (`target`); add: neither.
    action: Literal["noop", "supersede", "add"]
    target: str | None = None
    neighbours: list[Neighbour] = []


class ReconcileReply(Reply, kw_only=True):
    # One per fact, in request order.
    results: list[Reconciled]
    # v4: the kinds of secret redacted from the facts before they were embedded (each
    # result's `content` is the redacted text); absent when none was.
    redacted: list[str] | msgspec.UnsetType = msgspec.UNSET


class Applied(msgspec.Struct, kw_only=True):
    # The action's index in the request, the memory it wrote (for a `supersede`, the new
    # one; for an `add` that repeated a live memory, that memory), and the action.
    index: int
    id: str
    action: Literal["add", "update", "supersede", "delete"]


class ApplyReply(Reply, kw_only=True):
    # One per action, in request order.
    results: list[Applied]
    # v4: the kinds of secret redacted from what the actions stored; absent when none was.
    redacted: list[str] | msgspec.UnsetType = msgspec.UNSET


class UpdateReply(Reply, kw_only=True):
    id: str
    workflow_id: str | None
    importance: float
    updated_at: datetime
    expires_at: datetime | None
    # As on AddReply: the kinds of secret redacted from the new content (v3).
    redacted: list[str] | msgspec.UnsetType = msgspec.UNSET
    # v4: the memory's version after this update.
    version: int = 1


class SearchReply(Reply, kw_only=True):
    results: list[ScoredMemory]
    mode: SearchMode = "vector"
    # Trailing results were dropped so that the reply fits the server's max payload.
    truncated: bool = False


class DescribeReply(Reply, kw_only=True):
    total: int
    by_type: dict[str, int]
    tags: list[str]
    scope: ReadScope
    workflow_id: str | None
    workflow_count: int
    general_count: int
    oldest: datetime | None
    newest: datetime | None
    embedder: str
    dimension: int
    # Of `total`, the memories a newer one superseded: `list`, `search`, `recall` and
    # `timeline` leave them out unless `include_superseded`, so their totals can be lower.
    superseded_count: int = 0
    # More distinct tags than `limits.MAX_DESCRIBE_TAGS` (the first ones, sorted, are listed).
    tags_truncated: bool = False
    # Of `total`, the memories forgotten once no read returns them for a while (`idle_ttl_s`,
    # v3); null while the namespace's counts are being rebuilt.
    idle_count: int | None = 0


class ListReply(Reply, kw_only=True):
    count: int
    total: int
    mode: Literal["full"] = "full"
    memories: list[Memory]
    truncated: bool = False


class CompactListReply(Reply, kw_only=True):
    count: int
    total: int
    mode: Literal["compact"] = "compact"
    memories: list[CompactMemory]
    truncated: bool = False


class GetReply(Reply, kw_only=True):
    memories: list[Memory]
    missing: list[str]
    truncated: bool = False
    # v4: the `keys` asked for that no current memory (of a store the caller sees) holds.
    missing_keys: list[str] = []


class Change(msgspec.Struct, kw_only=True):
    """A field's value before and after a change (null where it had none)."""

    old: Any = None
    new: Any = None


class HistoryEntry(msgspec.Struct, kw_only=True):
    # `added`, `updated`, `mentioned` (a dedup repeat), `superseded` or `deleted`.
    event: str
    at: datetime
    agent_id: str | None = None
    session_id: str | None = None
    changes: dict[str, Change] = {}
    # Why, where the event alone does not say: "compacted" for a deletion by `compact` (v3).
    reason: str | None = None


class HistoryReply(Reply, kw_only=True):
    id: str
    entries: list[HistoryEntry]
    truncated: bool = False


class RecallReply(Reply, kw_only=True):
    turn: int
    skipped: bool = False
    # Identity first, then by score.
    results: list[RecalledMemory] = []
    # Ready for the prompt: one line per memory, `type: content`.
    block: str = ""
    truncated: bool = False
    # What the two dedup filters left out: candidates recalled within the window, and
    # candidates too similar to one chosen this turn or recalled within the window.
    left_out_recalled: int = 0
    left_out_similar: int = 0


class TimelineReply(Reply, kw_only=True):
    mode: Literal["full"] = "full"
    # Oldest first; `memories[anchor_index]` is the anchor.
    memories: list[Memory]
    anchor_index: int
    truncated: bool = False


class CompactTimelineReply(Reply, kw_only=True):
    mode: Literal["compact"] = "compact"
    memories: list[CompactMemory]
    anchor_index: int
    truncated: bool = False


class Person(msgspec.Struct, kw_only=True):
    # As the newest memory naming them spells it.
    name: str
    # Live memories in scope that name them.
    mention_count: int
    last_mentioned_at: datetime
    # The newest 5 of those memories.
    memory_ids: list[str]


class PeopleReply(Reply, kw_only=True):
    people: list[Person]
    truncated: bool = False


class DeleteReply(Reply, kw_only=True):
    deleted: int
    missing: list[str]
    # v4, with `erase` only: how many of the ids had text erased (the live memories deleted,
    # and ids whose history outlived an earlier delete), and how many messages were removed
    # from the bus's JetStream streams.
    erased: int | msgspec.UnsetType = msgspec.UNSET
    erased_messages: int | msgspec.UnsetType = msgspec.UNSET
    # False when a stream held more of the namespace's messages than one erasure reads
    # (docs/protocol.md, "Erasure"): those past the bound were not scanned.
    scan_complete: bool | msgspec.UnsetType = msgspec.UNSET


class ExportedMemory(Memory, kw_only=True):
    """A memory as `export` gives it: everything `import` needs to write it back."""

    # The exact-dedup key ("" for a memory outside dedup); opaque to clients.
    content_hash: str = ""
    # The stored vector, when the export asked for `embeddings`.
    embedding: list[float] | None = None
    # With `embedding`: what it is the vector of (a digest of the namespace's embedder, its
    # dimension and `content`); an import uses the vector only when this matches the
    # imported content and its own namespace's embedder, and embeds the content otherwise.
    embedding_of: str | None = None


class ExportReply(Reply, kw_only=True):
    memories: list[ExportedMemory]
    # Pass it to the next export; null when the whole namespace has been read. A memory may
    # come twice across pages (Redis SCAN): a reader keeps the first.
    cursor: str | None
    # Ids of this page that did not fit the reply: export them with `ids`.
    pending: list[str] = []
    embedder: str
    dimension: int


class ImportReply(Reply, kw_only=True):
    # Written now; already there (left untouched); expired before they could be written.
    created: list[str] = []
    existing: list[str] = []
    expired: list[str] = []


class ClearByTypeReply(Reply, kw_only=True):
    deleted: int
    # Matching memories left because the call stopped at its work bound (about a second):
    # call again until 0. The SDK's clear_by_type does.
    remaining: int = 0


# Workspace and state replies are the seed's lean ones: writes `{"success": true}`, lists
# and loads `{"success": true, "data": ...}`.


class OkReply(Reply, kw_only=True):
    """`{"success": true}`: the caller already knows what it sent."""

    # v4: the kinds of secret redacted from what a write stored (`create_state`,
    # `create_workspace`, `update_workspace`); absent when none was.
    redacted: list[str] | msgspec.UnsetType = msgspec.UNSET


class NamedItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One workspace or state of a list."""

    name: str
    # Always sent (null for a state saved without one).
    description: str | None
    # Only sent, and true, for an archived item (listed with `include_archived`).
    is_archived: bool = False


class ListDataReply(Reply, kw_only=True):
    """`list_workspaces` and `list_states`: oldest first."""

    data: list[NamedItem]
    # Present (true) only when trailing items were dropped to fit the max payload.
    truncated: bool | msgspec.UnsetType = msgspec.UNSET


class Workspace(msgspec.Struct, kw_only=True):
    name: str
    description: str
    root_folder: str
    purpose: str
    workflows: list[str] = []
    key_files: list[str] = []
    preferences: dict[str, Any] = {}
    is_archived: bool = False
    created_at: datetime
    updated_at: datetime


class WorkspaceReply(Reply, kw_only=True):
    data: Workspace


class State(msgspec.Struct, kw_only=True):
    name: str
    workspace: str
    conversation_context: str
    active_task: str
    active_files: list[str] = []
    next_steps: list[str] = []
    description: str | None = None
    tags: list[str] = []
    is_archived: bool = False
    created_at: datetime
    # The state's memory (type `state`): for `get`, `history`, `timeline`.
    id: str
    agent_id: str | None = None
    session_id: str | None = None


class StateReply(Reply, kw_only=True):
    data: State


# The `code` an `ErrorReply` carries.
ERROR_CODES: tuple[str, ...] = (
    "invalid_request",
    "not_found",
    "conflict",
    "too_large",
    "forbidden",
    "unavailable",
    "internal",
)
