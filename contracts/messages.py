"""Every request, reply, error and event of the wire protocol, as msgspec Structs.

Requests are strict (unknown fields are errors); replies and events are read leniently so
that handlers can add fields without breaking clients. `kw_only` is not inherited, so each
class sets it.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec

from contracts import limits
from contracts.subjects import WORKFLOW_ID_PATTERN
from contracts.types import STATE_TYPE, TYPE_NAME_PATTERN

TAG_PATTERN = r"^[a-z0-9_:.-]{1,64}\Z"
# A workspace or state name: printable text without leading or trailing blanks: no control
# characters, line or paragraph separators, or invisible format characters (zero-width
# spaces, direction marks, BOM), so that two names that look alike are alike.
_HIDDEN = "\\x00-\\x1f\\x7f-\\x9f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff"
NAME_PATTERN = rf"^[^{_HIDDEN}\s](?:[^{_HIDDEN}]*[^{_HIDDEN}\s])?\Z"
SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}\Z"
_TAG_RE = re.compile(TAG_PATTERN)

TypeName = Annotated[str, msgspec.Meta(pattern=TYPE_NAME_PATTERN)]
WorkflowId = Annotated[str, msgspec.Meta(pattern=WORKFLOW_ID_PATTERN)]
MemoryId = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_ID_CHARS)]
ImportedId = Annotated[str, msgspec.Meta(pattern=limits.IMPORTED_ID_PATTERN)]
Ids = Annotated[list[MemoryId], msgspec.Meta(min_length=1, max_length=limits.MAX_IDS)]
Importance = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Tags = Annotated[list[str], msgspec.Meta(max_length=limits.MAX_TAGS)]
TypeList = Annotated[list[TypeName], msgspec.Meta(max_length=64)]
Embedding = Annotated[list[float], msgspec.Meta(min_length=1, max_length=limits.MAX_EMBEDDING_DIM)]
Query = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_QUERY_CHARS)]
AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_AGENT_ID_CHARS)]
Source = Annotated[str, msgspec.Meta(max_length=limits.MAX_SOURCE_CHARS)]
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_TITLE_CHARS)]
Facts = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_FACT_CHARS)]],
    msgspec.Meta(max_length=limits.MAX_LIST_ITEMS),
]
# Its limit is in UTF-8 bytes (`too_large`), checked by the handler; the body cap bounds it.
Narrative = str
Files = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_FILE_CHARS)]],
    msgspec.Meta(max_length=limits.MAX_LIST_ITEMS),
]
PersonName = Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_PERSON_CHARS)]
People = Annotated[list[PersonName], msgspec.Meta(max_length=limits.MAX_LIST_ITEMS)]
ReadScope = Literal["both", "workflow", "general"]
SearchMode = Literal["vector", "text", "hybrid"]
Fusion = Literal["linear", "rrf"]
MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
StoreScope = Literal["general", "workflow"]
# Trust-gated stores: which one a memory is in; see contracts.subjects for trust.
MemoryStore = Literal["private", "shared", "social"]
TtlSeconds = Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_TTL_S)]
# v3: forgotten this long after the last access (each read pushes it).
IdleTtlSeconds = Annotated[int, msgspec.Meta(ge=60, le=limits.MAX_TTL_S)]
Name = Annotated[
    str, msgspec.Meta(min_length=1, max_length=limits.MAX_NAME_CHARS, pattern=NAME_PATTERN)
]
Description = Annotated[str, msgspec.Meta(max_length=limits.MAX_DESCRIPTION_CHARS)]
TaskText = Annotated[str, msgspec.Meta(max_length=limits.MAX_TASK_CHARS)]
Steps = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_STEP_CHARS)]],
    msgspec.Meta(max_length=limits.MAX_LIST_ITEMS),
]


def compose_content(title: str, narrative: str | None, facts: list[str]) -> str:
    """The `content` of an observation added without one: the title, a blank line, the
    narrative, then one `- fact` line per fact (the blank line only when more follows)."""
    body = ([narrative] if narrative else []) + [f"- {fact}" for fact in facts]
    return title + ("\n\n" + "\n".join(body) if body else "")


def clip(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8 (on a character boundary), with a mark
    saying how much was cut."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    kept = data[:max_bytes].decode(errors="ignore")
    return f"{kept}... [{len(data) - len(kept.encode())} more bytes cut]"


def normalize_tags(tags: list[str]) -> list[str]:
    """Lower-case, check and de-duplicate tags, keeping their first-seen order."""
    out: list[str] = []
    for tag in tags:
        low = tag.lower()
        if not _TAG_RE.match(low):
            raise ValueError(
                f"Invalid tag {tag!r}: after lower-casing, a tag must match {TAG_PATTERN}"
                " (letters, digits, _ : . -; at most 64 characters)"
            )
        if low not in out:
            out.append(low)
    return out


# --------------------------------------------------------------------------- requests

SessionId = Annotated[str, msgspec.Meta(pattern=SESSION_ID_PATTERN)]
ContextText = Annotated[str, msgspec.Meta(max_length=limits.MAX_CONTEXT_TEXT_BYTES)]


class Context(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """What the calling agent is doing; any request may carry it. It never changes what a
    request does, except that writes record `session_id`; handlers log `session_id`."""

    session_id: SessionId | None = None
    goal: ContextText | None = None
    memory: ContextText | None = None
    constraints: ContextText | None = None


# Fields that name something (a workspace, a state, a person): what looks the same is the
# same name, so each is kept in Unicode NFC ("Café" typed or pasted either way is one name).
NAME_FIELDS = ("workspace", "name", "people", "related_people")


def nfc_names(struct: msgspec.Struct, fields: tuple[str, ...] = NAME_FIELDS) -> None:
    """Put the name fields of a decoded message in NFC, in place."""
    for field in fields:
        value = getattr(struct, field, None)
        if isinstance(value, str):
            setattr(struct, field, unicodedata.normalize("NFC", value))
        elif isinstance(value, list):
            setattr(struct, field, [unicodedata.normalize("NFC", v) for v in value])


def check_validity(valid_from: datetime | None, valid_until: datetime | None) -> None:
    """v3: a validity window ends after it starts (either bound may be open)."""
    if valid_from is None or valid_until is None:
        return
    # A time without an offset is UTC, as everywhere in the protocol.
    if valid_from.tzinfo is None:
        valid_from = valid_from.replace(tzinfo=UTC)
    if valid_until.tzinfo is None:
        valid_until = valid_until.replace(tzinfo=UTC)
    if valid_until <= valid_from:
        raise ValueError(
            "`valid_until` must be after `valid_from` (the fact held from `valid_from` up to,"
            " not including, `valid_until`); leave either out for an open bound"
        )


class Request(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """Base of every request body. A subclass with a `__post_init__` of its own calls this
    one first."""

    context: Context | None = None

    def __post_init__(self) -> None:
        nfc_names(self)


class AddRequest(Request, kw_only=True):
    type: TypeName
    # May be left out when `title` is given: it is then composed (see `compose_content`).
    content: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    tags: Tags = []
    importance: Importance | None = None
    workflow_id: WorkflowId | None = None
    scope: StoreScope | None = None
    ttl_s: TtlSeconds | None = None
    # v3: forgotten this long after its last access (None: the type's, if any); never kept
    # past `ttl_s`.
    idle_ttl_s: IdleTtlSeconds | None = None
    agent_id: AgentId | None = None
    source: Source | None = None
    metadata: dict[str, Any] | None = None
    embedding: Embedding | None = None
    # "exact": a repeat of the same normalised content (same type and scope) bumps the
    # existing memory's `mention_count` instead of adding one; "semantic" also folds in
    # near-duplicates (cosine >= `dedup_threshold`, default configured, 0.95); "none" always adds.
    dedup: Literal["exact", "semantic", "none"] = "exact"
    dedup_threshold: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    # An observation: exact dedup then compares the title plus the facts.
    title: Title | None = None
    facts: Facts = []
    narrative: Narrative | None = None
    related_files: Files = []
    # Names; matched case-insensitively by the `people` filters.
    related_people: People = []
    # Older memories this one replaces (a changed decision): each gets `superseded_by`, and
    # reads leave them out unless asked with `include_superseded`.
    supersedes: Annotated[list[MemoryId], msgspec.Meta(max_length=limits.MAX_SUPERSEDES)] = []
    # The name of an existing workspace the memory belongs to.
    workspace: Name | None = None
    # The store it goes in; by default the caller's trust decides (full: private, inner:
    # shared, familiar: social). A store the caller cannot see is `forbidden`.
    store: MemoryStore | None = None
    # v3: when the fact held in the world (beside `created_at`, when it was learnt); null:
    # open. Without `valid_from` it holds from `created_at`.
    valid_from: datetime | None = None
    valid_until: datetime | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tags = normalize_tags(self.tags)
        check_validity(self.valid_from, self.valid_until)
        if self.content is None:
            if self.title is None:
                raise ValueError(
                    "add needs `content`, or a `title` (content is then composed from the"
                    " title, narrative and facts)"
                )
            self.content = compose_content(self.title, self.narrative, self.facts)


class ReconcileFact(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """A candidate fact, as an extractor found it (v3 `reconcile`)."""

    content: Annotated[str, msgspec.Meta(min_length=1)]
    # The type it would be added as; None: compared with memories of any type.
    type: TypeName | None = None
    title: Title | None = None


class ReconcileRequest(Request, kw_only=True):
    """For each candidate fact, the nearest current memories in scope and what to do with it
    (read-only: nothing is written)."""

    facts: Annotated[
        list[ReconcileFact], msgspec.Meta(min_length=1, max_length=limits.MAX_RECONCILE_FACTS)
    ]
    workflow_id: WorkflowId | None = None
    workspace: Name | None = None
    # Neighbours returned per fact.
    limit: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_RECONCILE_NEIGHBOURS)] = 3


class UpdateRequest(Request, kw_only=True):
    """Change one memory; fields left out stay as they are. `ttl_s: 0` makes it permanent."""

    id: MemoryId
    content: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    tags: Tags | None = None
    importance: Importance | None = None
    ttl_s: TtlSeconds | None = None
    agent_id: AgentId | None = None
    # v3: a new validity bound; null opens it (absent: unchanged).
    valid_from: datetime | msgspec.UnsetType | None = msgspec.UNSET
    valid_until: datetime | msgspec.UnsetType | None = msgspec.UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tags is not None:
            self.tags = normalize_tags(self.tags)
        given = (self.content, self.tags, self.importance, self.ttl_s)
        unset = msgspec.UNSET
        if given == (None, None, None, None) and self.valid_from is self.valid_until is unset:
            raise ValueError(
                "update changes nothing: give at least one of content, tags, importance,"
                " ttl_s, valid_from, valid_until"
            )
        if self.valid_from is not unset and self.valid_until is not unset:
            check_validity(self.valid_from, self.valid_until)


# `apply` (v3): each action is the request of its own operation, with `action` naming it.


class ApplyAdd(AddRequest, tag="add", tag_field="action", kw_only=True):
    """Add a memory (the fields of `add`; `supersedes` and semantic dedup are refused: use a
    `supersede` action)."""


class ApplyUpdate(UpdateRequest, tag="update", tag_field="action", kw_only=True):
    """Change memory `id` (the fields of `update`)."""


class ApplySupersede(AddRequest, tag="supersede", tag_field="action", kw_only=True):
    """Add a memory that supersedes memory `id` (the fields of `add`)."""

    id: MemoryId


class ApplyDelete(
    msgspec.Struct,
    tag="delete",
    tag_field="action",
    forbid_unknown_fields=True,
    omit_defaults=True,
    kw_only=True,
):
    """Delete memory `id`."""

    id: MemoryId


ApplyAction = ApplyAdd | ApplyUpdate | ApplySupersede | ApplyDelete


class ApplyRequest(Request, kw_only=True):
    """Several writes of one namespace applied atomically: all, or none when any one is
    refused (v3). `workflow_id`, `workspace` and `agent_id` are each action's default."""

    actions: Annotated[
        list[ApplyAction], msgspec.Meta(min_length=1, max_length=limits.MAX_APPLY_ACTIONS)
    ]
    workflow_id: WorkflowId | None = None
    workspace: Name | None = None
    agent_id: AgentId | None = None


class SearchRequest(Request, kw_only=True):
    query: Query | None = None
    workflow_id: WorkflowId | None = None
    scope: ReadScope = "both"
    types: TypeList | None = None
    tags: Tags | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_SEARCH_LIMIT)] = 10
    min_score: float | None = None
    since: datetime | None = None
    until: datetime | None = None
    embedding: Embedding | None = None
    # None: the configured default (see docs/protocol.md for how it was chosen).
    mode: SearchMode | None = None
    # How hybrid mode fuses its two signals; None: the configured default.
    fusion: Fusion | None = None
    # Stop adding results once their estimated tokens would pass this budget (always >= 1).
    max_tokens: MaxTokens | None = None
    # Maximal marginal relevance: pick results by `diversify * score - (1 - diversify) *
    # (cosine to the closest result already picked)`, so near-duplicates do not crowd the
    # list. 1 (or null) keeps plain score order.
    diversify: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    # Memories naming any of these people (`related_people`, case-insensitive).
    people: People | None = None
    # Also return memories that a newer one superseded.
    include_superseded: bool = False
    # Only memories of this workspace; without a `workflow_id`, all of them, whatever
    # workflow wrote them.
    workspace: Name | None = None
    # v3: read as of this instant: only memories valid then (superseded ones included if
    # they were); without it, current memories only.
    as_of: datetime | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.query is None and self.embedding is None:
            raise ValueError("search needs a `query` (text) or an `embedding`")
        if self.tags is not None:
            self.tags = normalize_tags(self.tags)


class DescribeRequest(Request, kw_only=True):
    workflow_id: WorkflowId | None = None
    scope: ReadScope = "both"
    # Only memories of this workspace (as on `search` and `list`).
    workspace: Name | None = None


class ListRequest(Request, kw_only=True):
    mode: Literal["full", "compact"] = "full"
    types: TypeList | None = None
    tags: Tags | None = None
    workflow_id: WorkflowId | None = None
    scope: ReadScope = "both"
    limit: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_LIST_LIMIT)] = 20
    offset: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_LIST_OFFSET)] = 0
    max_tokens: MaxTokens | None = None
    # Memories naming any of these people (`related_people`, case-insensitive).
    people: People | None = None
    # Also list memories that a newer one superseded.
    include_superseded: bool = False
    # Only memories of this workspace; without a `workflow_id`, all of them, whatever
    # workflow wrote them.
    workspace: Name | None = None
    # v3: read as of this instant: only memories valid then (superseded ones included if
    # they were); without it, current memories only.
    as_of: datetime | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tags is not None:
            self.tags = normalize_tags(self.tags)


class GetRequest(Request, kw_only=True):
    ids: Ids


class DeleteRequest(Request, kw_only=True):
    ids: Ids


class HistoryRequest(Request, kw_only=True):
    id: MemoryId


class TimelineRequest(Request, kw_only=True):
    """The memories just before and after one, as the caller's scope sees them."""

    anchor: MemoryId
    before: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_TIMELINE_SIDE)] = 5
    after: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_TIMELINE_SIDE)] = 5
    workflow_id: WorkflowId | None = None
    scope: ReadScope = "both"
    types: TypeList | None = None
    mode: Literal["compact", "full"] = "compact"
    include_superseded: bool = False
    # v3: read as of this instant: only memories valid then (superseded ones included if
    # they were); without it, current memories only.
    as_of: datetime | None = None
    # Only memories of this workspace, as `list` reads it (the anchor too); without a
    # `workflow_id`, all of them, whatever workflow wrote them.
    workspace: Name | None = None


class PeopleRequest(Request, kw_only=True):
    """Who the memories in scope name (`related_people`)."""

    # A case-insensitive part of the name.
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_PERSON_CHARS)] | None = (
        None
    )
    workflow_id: WorkflowId | None = None
    scope: ReadScope = "both"
    limit: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_PEOPLE_LIMIT)] = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        nfc_names(self, ("query",))


class RecallRequest(Request, kw_only=True):
    """Before a model turn: what the agent should have in mind (no model call)."""

    # The turn's text, or a burst of short messages (joined with spaces).
    message: Query | None = None
    messages: Annotated[list[Query], msgspec.Meta(max_length=limits.MAX_RECALL_MESSAGES)] = []
    session_id: SessionId
    workflow_id: WorkflowId | None = None
    scope: ReadScope = "both"
    types: TypeList | None = None
    people: People | None = None
    # "system": nothing is recalled (`skipped`), and the turn is not counted.
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] = "user"
    # None: the session's next turn, counted by the server from 1.
    turn: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_TURN)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_RECALL_LIMIT)] = 20
    # Path 1: memories created this recently (seconds) ...
    recent_s: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_TTL_S)] = 21600
    # ... or this important (and every `identity` memory).
    min_importance: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.8
    # Leave out a candidate more similar (cosine) than this to one already chosen this turn
    # or recalled within the window.
    dedup_threshold: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.85
    # The window: a memory recalled fewer turns ago than this is not recalled again.
    reinject_after: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 10
    max_tokens: MaxTokens | None = None
    include_superseded: bool = False
    # Only memories of this workspace; without a `workflow_id`, all of them, whatever
    # workflow wrote them.
    workspace: Name | None = None
    # v3: read as of this instant: only memories valid then (superseded ones included if
    # they were); without it, current memories only.
    as_of: datetime | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.message is None and not self.messages:
            raise ValueError("recall needs the turn's `message` (or `messages`)")
        if self.message is not None and self.messages:
            raise ValueError("give the turn's `message` or `messages`, not both")

    @property
    def text(self) -> str:
        """The turn's text."""
        return self.message if self.message is not None else " ".join(self.messages)


def _no_states(type_: str, op: str) -> None:
    """A bulk delete refuses the `state` type: states never change."""
    if type_ == STATE_TYPE:
        raise ValueError(
            f"States are immutable: {op} cannot delete them. Use archive_state to hide a"
            " state from list_states."
        )


class CompactRequest(Request, kw_only=True):
    """Keep the best `keep` current memories of a type in scope, delete the rest (v3)."""

    type: TypeName
    keep: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_COMPACT_KEEP)]
    by: Literal["importance", "recency", "accesses"]
    workflow_id: WorkflowId | None = None
    workspace: Name | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _no_states(self.type, "compact")


class ClearByTypeRequest(Request, kw_only=True):
    type: TypeName
    workflow_id: WorkflowId | None = None
    scope: StoreScope = "workflow"

    def __post_init__(self) -> None:
        super().__post_init__()
        _no_states(self.type, "clear_by_type")
        if self.scope == "workflow" and self.workflow_id is None:
            raise ValueError(
                "clear_by_type deletes in bulk, so it never guesses: give a `workflow_id`"
                ' (scope "workflow") or an explicit `scope: "general"`'
            )


# Workspaces and states: named containers, and immutable named save points.


class CreateWorkspaceRequest(Request, kw_only=True):
    name: Name
    description: Description
    root_folder: Annotated[str, msgspec.Meta(max_length=limits.MAX_FOLDER_CHARS)]
    purpose: Description
    # Common workflows (free text).
    workflows: Steps = []
    key_files: Files = []
    # Free JSON, at most 8 KiB (like `metadata`).
    preferences: dict[str, Any] = {}


class ListWorkspacesRequest(Request, kw_only=True):
    include_archived: bool = False


class LoadWorkspaceRequest(Request, kw_only=True):
    name: Name


class UpdateWorkspaceRequest(Request, kw_only=True):
    """Change a workspace; fields left out stay as they are. `is_archived: false` restores
    an archived workspace."""

    name: Name
    description: Description | None = None
    root_folder: Annotated[str, msgspec.Meta(max_length=limits.MAX_FOLDER_CHARS)] | None = None
    purpose: Description | None = None
    workflows: Steps | None = None
    key_files: Files | None = None
    preferences: dict[str, Any] | None = None
    is_archived: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if all(getattr(self, f) is None for f in WORKSPACE_FIELDS):
            raise ValueError(
                "update_workspace changes nothing: give at least one of "
                + ", ".join(WORKSPACE_FIELDS)
            )


# The fields of a workspace that `update_workspace` may change.
WORKSPACE_FIELDS = (
    "description",
    "root_folder",
    "purpose",
    "workflows",
    "key_files",
    "preferences",
    "is_archived",
)


class ArchiveWorkspaceRequest(Request, kw_only=True):
    name: Name


class CreateStateRequest(Request, kw_only=True):
    """A save point: what was going on, so that any later session can resume from it."""

    workspace: Name
    # Unique in the workspace, forever (archived or not).
    name: Name
    # What was happening when the state was saved.
    conversation_context: str
    active_task: TaskText
    active_files: Files
    next_steps: Steps
    description: Description | None = None
    tags: Tags = []
    # Who saved it (recorded on the state's memory).
    agent_id: AgentId | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tags = normalize_tags(self.tags)


class ListStatesRequest(Request, kw_only=True):
    workspace: Name
    include_archived: bool = False


class LoadStateRequest(Request, kw_only=True):
    workspace: Name
    name: Name


class ArchiveStateRequest(Request, kw_only=True):
    workspace: Name
    name: Name


class CaptureRequest(Request, kw_only=True):
    """The record of one tool run, published by an agent runtime after the call: stored as
    a `trace` memory (never folded by dedup)."""

    tool: Annotated[str, msgspec.Meta(min_length=1, max_length=limits.MAX_TOOL_CHARS)]
    args: dict[str, Any] = {}
    # Kept up to 2 KiB (cut on a character boundary).
    output: str = ""
    error: bool = False
    agent_id: AgentId | None = None
    workflow_id: WorkflowId | None = None
    workspace: Name | None = None
    duration_ms: Annotated[float, msgspec.Meta(ge=0.0)] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tool = self.tool.strip()
        if not self.tool:
            raise ValueError("`tool` is blank: give the name of the tool that ran")


class ExportRequest(Request, kw_only=True):
    """A page of the namespace's live memories, whole (PROTOCOL v2 "Export and import"):
    start with the default cursor and pass each reply's `cursor` on until it is null."""

    # SCAN's cursor: "0" starts.
    cursor: Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,20}\Z")] = "0"
    # Instead of a cursor: exactly these memories (a previous reply's `pending`).
    ids: Ids | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_EXPORT_LIMIT)] = 200
    # Include each memory's stored vector (so an import needs no embedder).
    embeddings: bool = False


class ImportedMemory(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One memory of an `import`: an `export` line, checked like an `add`."""

    id: ImportedId
    type: TypeName
    content: Annotated[str, msgspec.Meta(min_length=1)]
    tags: Tags = []
    importance: Importance = 0.5
    workflow_id: WorkflowId | None = None
    agent_id: AgentId | None = None
    source: Source | None = None
    metadata: dict[str, Any] = {}
    created_at: datetime
    updated_at: datetime | None = None
    # Null: permanent.
    expires_at: datetime | None = None
    access_count: Annotated[int, msgspec.Meta(ge=0, le=limits.MAX_COUNT)] = 0
    last_accessed_at: datetime | None = None
    mention_count: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_COUNT)] = 1
    session_id: SessionId | None = None
    title: Title | None = None
    facts: Facts = []
    narrative: Narrative | None = None
    related_files: Files = []
    related_people: People = []
    superseded_by: ImportedId | None = None
    workspace: Name | None = None
    store: MemoryStore = "private"
    # The exact-dedup key as exported ("" outside dedup); absent: computed as `add` does.
    content_hash: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    embedding: Embedding | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    idle_ttl_s: IdleTtlSeconds | None = None

    def __post_init__(self) -> None:
        nfc_names(self)
        self.tags = normalize_tags(self.tags)
        check_validity(self.valid_from, self.valid_until)


class ImportRequest(Request, kw_only=True):
    """Write exported memories as they were: same ids, times, expiry and counters. A memory
    whose id exists already is left as it is, so running an import twice changes nothing."""

    memories: Annotated[
        list[ImportedMemory], msgspec.Meta(min_length=1, max_length=limits.MAX_IMPORT)
    ]


# --------------------------------------------------------------------------- records


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


# --------------------------------------------------------------------------- replies


class Reply(msgspec.Struct, kw_only=True):
    success: bool = True


class ErrorReply(Reply, kw_only=True):
    success: bool = False
    code: str
    error: str


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


class Applied(msgspec.Struct, kw_only=True):
    # The action's index in the request, the memory it wrote (for a `supersede`, the new
    # one; for an `add` that repeated a live memory, that memory), and the action.
    index: int
    id: str
    action: Literal["add", "update", "supersede", "delete"]


class ApplyReply(Reply, kw_only=True):
    # One per action, in request order.
    results: list[Applied]


class UpdateReply(Reply, kw_only=True):
    id: str
    workflow_id: str | None
    importance: float
    updated_at: datetime
    expires_at: datetime | None
    # As on AddReply: the kinds of secret redacted from the new content (v3).
    redacted: list[str] | msgspec.UnsetType = msgspec.UNSET


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


class ExportedMemory(Memory, kw_only=True):
    """A memory as `export` gives it: everything `import` needs to write it back."""

    # The exact-dedup key ("" for a memory outside dedup); opaque to clients.
    content_hash: str = ""
    # The stored vector, when the export asked for `embeddings`.
    embedding: list[float] | None = None


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


# --------------------------------------------------------------------------- events


class Event(msgspec.Struct, kw_only=True):
    action: str
    id: str
    type: str
    workflow_id: str | None
    agent_id: str | None
    at: datetime
    preview: str
    # The memory's workspace (absent when it has none).
    workspace: str | msgspec.UnsetType = msgspec.UNSET
    # The memory's store.
    store: MemoryStore = "private"
    # The durable write's `Nats-Msg-Id` that made this change (absent for request/reply).
    request_id: str | msgspec.UnsetType = msgspec.UNSET


class RejectedEvent(msgspec.Struct, kw_only=True):
    """A durable write that can never succeed (bad input), on
    `mem.<ns>.events._rejected.<op>.rejected`: it is not retried."""

    request_id: str
    code: str
    error: str


ERROR_CODES: tuple[str, ...] = (
    "invalid_request",
    "not_found",
    "conflict",
    "too_large",
    "forbidden",
    "unavailable",
    "internal",
)
