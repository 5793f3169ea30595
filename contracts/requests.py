"""Every request of the wire protocol, as msgspec Structs: strict (unknown fields are
errors, `invalid_request`), keyword-only (`kw_only` is not inherited, so each class sets
it), with the checks a request makes on itself (tags, names in NFC, validity windows)."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from contracts import limits
from contracts.fields import (
    SESSION_ID_PATTERN,
    AgentId,
    Description,
    Embedding,
    ExpectedVersion,
    Facts,
    Files,
    Fusion,
    IdleTtlSeconds,
    Ids,
    Importance,
    ImportedId,
    Keys,
    MaxTokens,
    MemoryId,
    MemoryKey,
    MemoryStore,
    Name,
    Narrative,
    People,
    Query,
    ReadScope,
    SearchMode,
    Source,
    Steps,
    StoreScope,
    Tags,
    TaskText,
    Title,
    TtlSeconds,
    TypeList,
    TypeName,
    WorkflowId,
    compose_content,
    normalize_tags,
)
from contracts.types import STATE_TYPE

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
# A memory's v4 `key` is not among them: it is the writer's identifier, matched byte for byte
# as ids are, and reported as written.
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
    # v4: the memory's name, unique among the current memories of its store: an add with a
    # key a current memory holds replaces that memory (same id, version + 1).
    key: MemoryKey | None = None
    # v4, with `key`: replace only the memory at this version; 0: only if none holds the key.
    expected_version: ExpectedVersion | None = None
    # Whether `expected_version` is of the keyed memory (an `apply` supersede's is its
    # target's).
    _version_of_key: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tags = normalize_tags(self.tags)
        check_validity(self.valid_from, self.valid_until)
        if self._version_of_key and self.expected_version is not None and self.key is None:
            raise ValueError(
                "expected_version on add needs a key: it is the version of the memory"
                " holding that key (0: none may hold it yet)"
            )
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
    # v4: write only if the memory is at this version then (else `conflict`).
    expected_version: ExpectedVersion | None = None

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
    # v4: supersede only if memory `id` is at this version then (else `conflict`).
    expected_version: ExpectedVersion | None = None
    _version_of_key: ClassVar[bool] = False


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
    # v4: delete only if the memory is at this version then (else `conflict`).
    expected_version: ExpectedVersion | None = None


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
    ids: Ids | None = None
    # v4: the current memories holding these keys (in the stores the caller sees).
    keys: Keys | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ids is None and self.keys is None:
            raise ValueError("get needs `ids` or `keys` (or both)")


class DeleteRequest(Request, kw_only=True):
    ids: Ids
    # v4: who deletes, as the history's `deleted` (or `erased`) entry names them.
    agent_id: AgentId | None = None
    # v4: erase the memories' text everywhere the service keeps data (history kept as a
    # tombstone, embedding cache, recall sessions, the bus's JetStream streams). Full trust.
    erase: bool = False


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
    # "" keeps the memory outside exact dedup; any other value, or none, is recomputed from
    # the imported content as `add` computes it (never taken from the line).
    content_hash: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    embedding: Embedding | None = None
    # The export's digest of what `embedding` is the vector of: without it, or when it does
    # not match this content and the namespace's embedder, the content is embedded anew.
    embedding_of: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    idle_ttl_s: IdleTtlSeconds | None = None
    # v4: kept, so that an export and import round trip leaves versions as they were.
    version: Annotated[int, msgspec.Meta(ge=1, le=limits.MAX_COUNT)] = 1
    # v4: kept too, unless a current memory of the namespace holds it already.
    key: MemoryKey | None = None

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
