"""Size and count limits of the wire protocol (PROTOCOL.md, Limits)."""

MAX_BODY_BYTES = 256 * 1024
MAX_CONTENT_BYTES = 32 * 1024
MAX_QUERY_CHARS = 4096
MAX_METADATA_BYTES = 8 * 1024
# Deep nesting can only come from `metadata` (or an attack); real requests stay shallow.
MAX_NESTING = 32
# Inside `metadata`: an object nested deeper than this is refused (flatten it).
MAX_METADATA_NESTING = 8


def nesting(value: object) -> int:
    """How deep a JSON value nests, as MAX_METADATA_NESTING counts it: each object or array
    is a level (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


MAX_TAGS = 32
# Observation fields of a memory (PROTOCOL v2, "More on the record").
MAX_TITLE_CHARS = 256
MAX_LIST_ITEMS = 32
MAX_FACT_CHARS = 1024
MAX_FILE_CHARS = 512
MAX_PERSON_CHARS = 128
MAX_NARRATIVE_BYTES = 32 * 1024
MAX_IDS = 100
# Memories one `add` may supersede.
MAX_SUPERSEDES = 10
MAX_SEARCH_LIMIT = 100
MAX_RECALL_LIMIT = 50
# A recall's explicit `turn` (a safe integer in every client language).
MAX_TURN = 2**53 - 1
# `messages` of one recall (a burst of short messages).
MAX_RECALL_MESSAGES = 32
MAX_LIST_LIMIT = 200
# `timeline`: memories on each side of the anchor.
MAX_TIMELINE_SIDE = 50
MAX_PEOPLE_LIMIT = 200
# RediSearch refuses to page past MAXSEARCHRESULTS (10k by default).
MAX_LIST_OFFSET = 10_000
MAX_EMBEDDING_DIM = 4096
MAX_AGENT_ID_CHARS = 128
MAX_SOURCE_CHARS = 1024
MAX_ID_CHARS = 64
# v4: a memory's `key` (PROTOCOL.md: 1..256 characters).
MAX_KEY_CHARS = 256
# An imported id: what the service makes (ULIDs) and common ids of other systems (UUIDs,
# slugs); nothing a key, a query or a terminal would read as anything but the id.
IMPORTED_ID_PATTERN = r"^[0-9A-Za-z_-]{1,64}\Z"
# A counter of a memory (accesses, mentions) as an import may set it: a safe integer in
# every client language, with room for Redis to go on counting.
MAX_COUNT = 2**53 - 1
PREVIEW_CHARS = 100
# Each text of a request's `context` block (goal, memory, constraints), in UTF-8 bytes.
MAX_CONTEXT_TEXT_BYTES = 4 * 1024
# `describe` lists at most this many distinct tags (and then says `tags_truncated`).
MAX_DESCRIBE_TAGS = 1000
# Longest TTL: 100 years (`ttl_s: 0` is permanent). Beyond it an expiry would pass year 9999.
MAX_TTL_S = 3_155_760_000
# Workspaces and states.
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 4096
MAX_FOLDER_CHARS = 1024
MAX_PREFERENCES_BYTES = 8 * 1024
MAX_TASK_CHARS = 4096
MAX_STEP_CHARS = 1024
# Workspaces one namespace may hold, and states one workspace may hold (each list is one reply).
MAX_WORKSPACES = 10_000
MAX_STATES = 10_000
# Capture of tool runs: the tool's name, and how much of its output and arguments a trace keeps.
MAX_TOOL_CHARS = 128
CAPTURE_OUTPUT_BYTES = 2 * 1024
CAPTURE_ARGS_BYTES = 2 * 1024
# `export`: memories one page holds at most, and `import`: memories one request writes.
MAX_EXPORT_LIMIT = 1000
MAX_IMPORT = 100

# `reconcile` (v3): candidate facts per call, and neighbours returned per fact.
MAX_RECONCILE_FACTS = 50
# Actions one `apply` writes atomically (v3).
MAX_APPLY_ACTIONS = 50
MAX_RECONCILE_NEIGHBOURS = 10
# `compact` (v3): the most memories of a type it keeps.
MAX_COMPACT_KEEP = 100_000
