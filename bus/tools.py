"""The memory bus as tools for any LLM: definitions generated from the contracts, a
system-prompt section on using them well, and an executor that runs a model's tool call.

    specs = tool_specs()                      # 19 ToolSpecs (name, description, schema, example)
    tools = openai_tools()                    # OpenAI function calling
    prompt = system_prompt(workspace="Alpha")  # "## Memory & Knowledge Management" ...
    executor = ToolExecutor(bus, workflow_id="wf_1", agent_id="coder", workspace="Alpha")
    text = await executor.call("memory_search", '{"query": "database choice"}')

Each tool's parameter schema is its operation's request schema (`msgspec.json.schema`) with
`$ref`s inlined, `\\Z` written as `$`, and the fields the executor sets itself left out
(`context`, `workflow_id`, `agent_id`, `embedding`). The executor never raises for what a
model sends: every outcome is JSON text the model can read and recover from.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from nats.errors import Error as NatsError

from bus.client import MemoryBus
from bus.errors import BusTimeout, Unavailable
from contracts import limits
from contracts.messages import NAME_PATTERN, SESSION_ID_PATTERN, Request
from contracts.operations import REQUEST_TYPES
from contracts.subjects import WORKFLOW_ID_PATTERN
from contracts.types import DAY_S, DEFAULT_TYPES, STATE_TYPE, TRACE_TYPE, TypeTable

log = structlog.get_logger("membus.tools")

# Tool name -> operation. The memory tools carry a prefix (a bare `add` or `get` says nothing
# among a model's other tools); workspace and state tools already say what they act on.
TOOL_OPS: dict[str, str] = {
    "memory_add": "add",
    "memory_search": "search",
    "memory_describe": "describe",
    "memory_list": "list",
    "memory_get": "get",
    "memory_update": "update",
    "memory_delete": "delete",
    "memory_timeline": "timeline",
    "memory_history": "history",
    "memory_people": "people",
    "create_workspace": "create_workspace",
    "list_workspaces": "list_workspaces",
    "load_workspace": "load_workspace",
    "update_workspace": "update_workspace",
    "archive_workspace": "archive_workspace",
    "create_state": "create_state",
    "list_states": "list_states",
    "load_state": "load_state",
    "archive_state": "archive_state",
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_OPS)

# Set by the executor from its configuration, never by a model: identity must not be
# something a model can invent, and a model cannot compute the namespace's embeddings.
HIDDEN_FIELDS: tuple[str, ...] = ("context", "workflow_id", "agent_id", "embedding")

# Every request with a `workspace` field gets the configured one when the model leaves it
# out; these need one (`workspace` is required by their contract).
_STATE_OPS = frozenset({"create_state", "list_states", "load_state", "archive_state"})

# Fields the schema requires although the request struct does not: a search without an
# `embedding` (hidden from models) needs its `query`.
_MORE_REQUIRED: dict[str, tuple[str, ...]] = {"search": ("query",)}

_EXAMPLE_ID = "01JZ8Q4M3V7T2K9D5X6R1N0BCA"
_WORKSPACE = "Project Alpha"
_STATE = "Auth Module Progress"

# ----------------------------------------------------------------------------- field texts

_SCOPE_READ = (
    'Which memories to read: "both" (default) = this workflow\'s plus general ones;'
    ' "workflow" = this workflow only; "general" = only general (cross-workflow) ones.'
)
_TYPES_FILTER = "Only memories of these types (see memory_add for the types)."
_TAGS_FILTER = "Only memories with ANY of these tags (lower-case)."
_PEOPLE_FILTER = "Only memories naming ANY of these people (case-insensitive)."
_SUPERSEDED = "Also return memories that a newer one superseded (changed decisions)."
_WORKSPACE_FILTER = (
    "Only memories of this workspace. Leave out to use the configured workspace, if any."
)
_MAX_TOKENS = "Stop adding results once they would pass this many tokens (saves your context)."
_ID = "A memory id, as returned by memory_add, memory_search or memory_list."
_TAGS_WRITE = (
    "Short lower-case labels for filtering later, e.g. topic, project, kind:"
    ' "database", "project-alpha", "procedure", "pitfall". Characters: a-z 0-9 _ : . -'
)
_WS_NAME = "The workspace's name (unique in this memory)."
_STATE_WORKSPACE = (
    "The workspace the state belongs to. Leave out to use the configured workspace;"
    " without one, pass it (list_workspaces shows the names)."
)
_STATE_NAME = "The state's name."

FIELD_TEXTS: dict[str, dict[str, str]] = {
    "memory_add": {
        "type": "",  # generated from the type table, see `_type_field_text`
        "content": (
            "The note, self-contained: it will be read later without this conversation."
            " Say what, when/where it applies, and why. Optional when `title` is given."
        ),
        "tags": _TAGS_WRITE,
        "importance": "0..1; leave out to use the type's default.",
        "scope": (
            'Leave out: the type decides (recommended). "general" = visible from every'
            ' workflow; "workflow" = only this workflow.'
        ),
        "ttl_s": (
            "Forget it after this many seconds; leave out for the type's default, 0 = keep forever."
        ),
        "source": 'Where the information came from (a URL, a file, "user").',
        "metadata": "Free JSON object (at most 8 KiB) returned as given.",
        "dedup": (
            '"exact" (default): the same content again bumps the existing memory\'s'
            ' mention_count instead of storing a copy; "semantic" also folds in'
            ' near-duplicates; "none" always stores.'
        ),
        "dedup_threshold": 'Cosine similarity from which "semantic" dedup folds (default 0.95).',
        "title": "A short title. With a title, `content` may be left out: it is composed.",
        "facts": "Atomic facts, one per item.",
        "narrative": "A longer account, when facts alone lose the story.",
        "related_files": "Files this memory is about (paths).",
        "related_people": "People this memory names (full names as usually written).",
        "supersedes": (
            "Ids of older memories this one replaces (e.g. a changed decision): reads then"
            " leave them out, and their history keeps them."
        ),
        "workspace": (
            "The name of an existing workspace this memory belongs to. Leave out to use the"
            " configured workspace, if any."
        ),
        "store": (
            'Who may see it: "private" (only fully trusted agents), "shared" (also the inner'
            ' circle) or "social" (also familiar agents). Leave out for your default; a store'
            " you cannot see is refused."
        ),
    },
    "memory_search": {
        "query": "What you are looking for, in plain words (keywords and ids match too).",
        "scope": _SCOPE_READ,
        "types": _TYPES_FILTER,
        "tags": _TAGS_FILTER,
        "limit": "How many results at most (default 10).",
        "min_score": "Leave out results scoring below this (0..1).",
        "since": "Only memories created at or after this time (ISO 8601: 2025-01-31T00:00:00Z).",
        "until": "Only memories created at or before this time (ISO 8601).",
        "mode": (
            'Leave out (hybrid by default). "text" for exact words or ids, "vector" for'
            " meaning only."
        ),
        "fusion": "How hybrid mode fuses meaning and words; leave out for the default.",
        "max_tokens": _MAX_TOKENS,
        "diversify": "0..1: lower values keep near-duplicates from crowding the results.",
        "people": _PEOPLE_FILTER,
        "include_superseded": _SUPERSEDED,
        "workspace": _WORKSPACE_FILTER,
    },
    "memory_describe": {"scope": _SCOPE_READ, "workspace": _WORKSPACE_FILTER},
    "memory_list": {
        "mode": '"compact" lists id, type and a 100-character preview: cheap browsing.',
        "types": _TYPES_FILTER,
        "tags": _TAGS_FILTER,
        "scope": _SCOPE_READ,
        "limit": "How many at most (default 20).",
        "offset": "Skip this many (paging; newest first).",
        "max_tokens": _MAX_TOKENS,
        "people": _PEOPLE_FILTER,
        "include_superseded": _SUPERSEDED,
        "workspace": _WORKSPACE_FILTER,
    },
    "memory_get": {"ids": "The ids of the memories to read in full."},
    "memory_update": {
        "id": _ID,
        "content": "The new content (replaces the old; keep what is still useful).",
        "tags": "The new tags (replace the old ones).",
        "importance": "The new importance, 0..1.",
        "ttl_s": "Forget it this many seconds from now; 0 = keep forever.",
    },
    "memory_delete": {"ids": "The ids of the memories to delete."},
    "memory_timeline": {
        "anchor": _ID,
        "before": "How many memories before the anchor (default 5).",
        "after": "How many memories after the anchor (default 5).",
        "scope": _SCOPE_READ,
        "types": _TYPES_FILTER,
        "mode": '"compact" (default) previews, or "full" records.',
        "include_superseded": _SUPERSEDED,
    },
    "memory_history": {"id": _ID},
    "memory_people": {
        "query": "Part of a name (case-insensitive); leave out to list everyone.",
        "scope": _SCOPE_READ,
        "limit": "How many people at most (default 20).",
    },
    "create_workspace": {
        "name": _WS_NAME,
        "description": "What this workspace is.",
        "root_folder": "The folder the work lives in.",
        "purpose": "What the workspace is used for.",
        "workflows": "Common workflows, in words.",
        "key_files": "Important files (paths).",
        "preferences": "Free JSON object of preferences for work in this workspace.",
    },
    "list_workspaces": {"include_archived": "Also list archived workspaces."},
    "load_workspace": {"name": _WS_NAME},
    "update_workspace": {
        "name": "The name of the workspace to change (names do not change).",
        "description": "New description.",
        "root_folder": "New root folder.",
        "purpose": "New purpose.",
        "workflows": "New list of workflows (replaces the old).",
        "key_files": "New list of key files (replaces the old).",
        "preferences": "New preferences object (replaces the old).",
        "is_archived": "false restores an archived workspace; true archives it.",
    },
    "archive_workspace": {"name": _WS_NAME},
    "create_state": {
        "workspace": _STATE_WORKSPACE,
        "name": (
            "Unique in the workspace, forever (states are immutable): make it specific,"
            ' e.g. "auth-refresh-2025-06-01" or "Auth Module Progress v2".'
        ),
        "conversation_context": "What was happening when you saved: decisions, findings, state.",
        "active_task": "The task you were working on.",
        "active_files": "The files you were working with ([] if none).",
        "next_steps": "The immediate next steps when resuming, in order.",
        "description": "A one-line summary shown by list_states.",
        "tags": "Labels for the state (lower-case).",
    },
    "list_states": {
        "workspace": _STATE_WORKSPACE,
        "include_archived": "Also list archived states.",
    },
    "load_state": {"workspace": _STATE_WORKSPACE, "name": _STATE_NAME},
    "archive_state": {"workspace": _STATE_WORKSPACE, "name": _STATE_NAME},
}

# What each memory type is for; the table itself (scope, TTL) comes from `contracts.types`.
TYPE_USES: dict[str, str] = {
    "user_pref": "how the user likes things done (style, tools, formats)",
    "preference": "a preference that is not the user's own: a team's, a project's convention",
    "identity": "who the user or an agent is (name, role); always recalled",
    "knowledge": "durable know-how: a procedure that works, what failed, a pitfall",
    "fact": "a durable fact about the user's setup, environment or domain",
    "decision": "a decision taken in this work, with why",
    "goal": "what this work is trying to achieve",
    "todo": "something still to do",
    "context": "scratch context for the current work",
    "event": "something that happened (a deploy, a meeting, a failure)",
    "observation": "something noticed while working, best with `title` and `facts`",
    TRACE_TYPE: "a tool run; recorded automatically, rarely added by hand",
    STATE_TYPE: "a workspace save point; made only by create_state, never by memory_add",
}

# ----------------------------------------------------------------------------- examples

EXAMPLES: dict[str, dict[str, Any]] = {
    "memory_add": {
        "type": "decision",
        "content": (
            "Project Alpha's API uses PostgreSQL 16, not MySQL: we need JSONB columns and"
            " row-level security. Agreed with Dana at the schema review."
        ),
        "tags": ["database", "project-alpha"],
        "related_people": ["Dana"],
    },
    "memory_search": {
        "query": "which database does the Alpha API use",
        "types": ["decision", "fact"],
        "limit": 5,
    },
    "memory_describe": {"scope": "both"},
    "memory_list": {"mode": "compact", "types": ["todo", "goal"], "limit": 20},
    "memory_get": {"ids": [_EXAMPLE_ID]},
    "memory_update": {
        "id": _EXAMPLE_ID,
        "content": (
            "Deploys of Project Alpha go through `make release` (not `make deploy`, removed"
            " in June); it runs the migrations first."
        ),
        "tags": ["deploy", "procedure"],
    },
    "memory_delete": {"ids": [_EXAMPLE_ID]},
    "memory_timeline": {"anchor": _EXAMPLE_ID, "before": 3, "after": 3},
    "memory_history": {"id": _EXAMPLE_ID},
    "memory_people": {"query": "dana"},
    "create_workspace": {
        "name": _WORKSPACE,
        "description": "E-commerce platform rebuild",
        "root_folder": "projects/alpha",
        "purpose": "Rebuild the legacy e-commerce platform as a set of services",
        "key_files": ["projects/alpha/README.md"],
    },
    "list_workspaces": {"include_archived": False},
    "load_workspace": {"name": _WORKSPACE},
    "update_workspace": {
        "name": _WORKSPACE,
        "workflows": ["Review a pull request", "Release to staging"],
    },
    "archive_workspace": {"name": _WORKSPACE},
    "create_state": {
        "workspace": _WORKSPACE,
        "name": _STATE,
        "conversation_context": "We chose JWT for auth and set up the basic structure.",
        "active_task": "Implementing token refresh",
        "active_files": ["src/auth/jwt.ts", "src/auth/middleware.ts"],
        "next_steps": ["Add the refresh endpoint", "Test token expiry", "Add logout"],
        "tags": ["auth", "in-progress"],
    },
    "list_states": {"workspace": _WORKSPACE},
    "load_state": {"workspace": _WORKSPACE, "name": _STATE},
    "archive_state": {"workspace": _WORKSPACE, "name": _STATE},
}

# ----------------------------------------------------------------------------- type table


def _duration(seconds: int) -> str:
    if seconds % DAY_S == 0:
        days = seconds // DAY_S
        return f"{days} day" + ("s" if days != 1 else "")
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds} s"


def _addable(types: TypeTable) -> list[str]:
    """The types a model may give `memory_add` (the server makes `state` memories itself)."""
    return [name for name in types if name != STATE_TYPE]


def type_lines(types: TypeTable = DEFAULT_TYPES, *, addable_only: bool = False) -> str:
    """One line per memory type: name, scope, default TTL, and what it is for."""
    lines = []
    for name, config in types.items():
        if addable_only and name == STATE_TYPE:
            continue
        where = "general" if config.scope == "general" else "this workflow"
        ttl = f", forgotten after {_duration(config.ttl_s)}" if config.ttl_s else ""
        use = TYPE_USES.get(name)
        lines.append(f"- `{name}` ({where}{ttl})" + (f": {use}" if use else ""))
    return "\n".join(lines)


def _scope_names(types: TypeTable, scope: str) -> str:
    return ", ".join(n for n, c in types.items() if c.scope == scope and n != STATE_TYPE)


def _type_field_text(types: TypeTable) -> str:
    return (
        f"The kind of memory, one of: {', '.join(_addable(types))}. It decides the default"
        f" scope (general: {_scope_names(types, 'general')}; this workflow:"
        f" {_scope_names(types, 'workflow')}), importance and lifetime."
    )


# ----------------------------------------------------------------------------- schemas


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen:
                raise ValueError(f"recursive schema through {name}: cannot inline it")
            target = _inline_refs(defs[name], defs, (*seen, name))
            rest = {k: _inline_refs(v, defs, seen) for k, v in node.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline_refs(v, defs, seen) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(v, defs, seen) for v in node]
    return node


def _ecma_patterns(node: Any) -> Any:
    """`\\Z` (Python: the very end) as `$`: ECMAScript regexes have no `\\Z`, and without the
    multiline flag their `$` matches only at the end."""
    if isinstance(node, dict):
        out = {k: _ecma_patterns(v) for k, v in node.items()}
        if isinstance(out.get("pattern"), str):
            out["pattern"] = re.sub(r"\\Z", "$", out["pattern"])
        return out
    if isinstance(node, list):
        return [_ecma_patterns(v) for v in node]
    return node


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional property as the model should give it: left out rather than null, so
    `anyOf [X, null]` becomes X (the executor still accepts a null)."""
    options = prop.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        merged = {k: v for k, v in prop.items() if k != "anyOf"}
        if "default" in merged and merged["default"] is None:
            del merged["default"]
        prop = {**rest[0], **merged} if len(rest) == 1 else {**merged, "anyOf": rest}
    enum = prop.get("enum")
    # Some function-calling back ends need a `type` beside an `enum`.
    if isinstance(enum, list) and "type" not in prop and all(isinstance(v, str) for v in enum):
        prop = {"type": "string", **prop}
    return prop


def request_schema(op: str) -> dict[str, Any]:
    """The operation's request schema as msgspec generates it, `$ref`s inlined and patterns
    in ECMAScript syntax: a plain `type: object` schema."""
    raw = msgspec.json.schema(REQUEST_TYPES[op])
    schema: dict[str, Any] = _ecma_patterns(_inline_refs(raw, raw.get("$defs", {})))
    return schema


def tool_schema(name: str) -> dict[str, Any]:
    """The parameter schema of one tool (without per-field descriptions)."""
    op = TOOL_OPS[name]
    full = request_schema(op)
    hidden = set(HIDDEN_FIELDS)
    props = {k: _not_null(v) for k, v in full["properties"].items() if k not in hidden}
    required = [r for r in full.get("required", []) if r not in hidden]
    required += [r for r in _MORE_REQUIRED.get(op, ()) if r not in required]
    if op in _STATE_OPS:
        # The executor fills it from its configured workspace.
        required = [r for r in required if r != "workspace"]
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


# ----------------------------------------------------------------------------- descriptions


def _ex(name: str) -> str:
    return json.dumps(EXAMPLES[name], ensure_ascii=False)


def _descriptions(types: TypeTable) -> dict[str, str]:
    general, workflow = _scope_names(types, "general"), _scope_names(types, "workflow")
    return {
        "memory_add": (
            "Save one note to persistent memory, shared with the other agents and found by"
            " later sessions. Save proactively: the user's preferences, decisions and why,"
            " facts about the setup, procedures that worked (and what failed), pitfalls,"
            " open todos.\n\nPick the type (it sets scope, importance and lifetime):\n"
            f"{type_lines(types, addable_only=True)}\n\n"
            f"General types ({general}) are visible from every workflow; workflow types"
            f" ({workflow}) stay in this workflow. Leave `scope` out unless you are sure.\n\n"
            "Pitfalls:\n"
            "- Write it self-contained and specific: say what, when/where it applies, and why;"
            " one fact or decision per note.\n"
            "- Never save secrets (passwords, API keys, tokens), one-off outputs or transient"
            " status.\n"
            "- Saving the same content again does not duplicate it: it bumps the existing"
            " memory's mention_count (the reply's duplicate_of names it).\n"
            "- A decision or fact that changed: add the new one with `supersedes: [old id]`"
            " (find the id with memory_search) rather than leaving both.\n"
            "- Give `content`, or a `title` with `facts`/`narrative`.\n\n"
            f"Example: {_ex('memory_add')}"
        ),
        "memory_search": (
            "Search persistent memory by meaning and keywords; results are ranked by"
            " relevance, importance and recency, best first, each with its id.\n\n"
            "Use it before assuming: at the START of a task (preferences, conventions, earlier"
            " decisions, known pitfalls), before a complex or multi-step task, when the user"
            " refers to earlier work, and before saving (to update or supersede instead of"
            " repeating).\n\n"
            "Pitfalls:\n"
            "- Phrase the query as the content would be written; search again with other"
            " words when nothing fits.\n"
            "- Filter with `types`, `tags`, `people`, `since`/`until` when you know what you"
            " need; `scope` defaults to this workflow plus general memories.\n"
            "- Changed decisions are left out unless `include_superseded` is true.\n"
            "- Don't know what is stored? memory_describe first.\n\n"
            f"Example: {_ex('memory_search')}"
        ),
        "memory_describe": (
            "What memory holds, without content: counts by type, tags, oldest and newest"
            " dates, workflow and general counts. Cheap: use it first when you don't know"
            " what is stored, then memory_search or memory_list with the right filters.\n\n"
            f"Example: {_ex('memory_describe')}"
        ),
        "memory_list": (
            "List memories newest first, with filters (types, tags, people, workspace) and"
            ' paging (limit, offset). Use `mode: "compact"` to browse cheaply (id, type,'
            " preview), then memory_get for the ones you need in full. Prefer memory_search"
            " when you are looking for something specific.\n\n"
            f"Example: {_ex('memory_list')}"
        ),
        "memory_get": (
            "Read memories in full by id (ids come from memory_search, memory_list,"
            " memory_timeline or memory_people). Unknown ids come back in `missing`, not as an"
            " error. Superseded memories are returned too (see `superseded_by`).\n\n"
            f"Example: {_ex('memory_get')}"
        ),
        "memory_update": (
            "Change one memory in place: its content, tags, importance or lifetime (fields"
            " left out stay). Use it when a note is inaccurate, incomplete or outdated, or a"
            " saved procedure no longer works. Find the id with memory_search first, and"
            " keep what is still useful from the old content.\n\n"
            "Pitfalls: a decision that changed is better added anew with `supersedes` (the"
            " old one stays in history); states cannot be updated (they are immutable).\n\n"
            f"Example: {_ex('memory_update')}"
        ),
        "memory_delete": (
            "Delete memories by id. Only for what is wrong and useless; for something that"
            " changed, prefer memory_update or a new memory with `supersedes`. Unknown ids"
            " come back in `missing`. States cannot be deleted (archive_state hides them).\n\n"
            f"Example: {_ex('memory_delete')}"
        ),
        "memory_timeline": (
            "The memories just before and after one (the anchor), oldest first: what"
            " happened around a decision, an event or a failure. `anchor_index` points at"
            " the anchor in `memories`.\n\n"
            f"Example: {_ex('memory_timeline')}"
        ),
        "memory_history": (
            "What happened to one memory, oldest first: added, updated (old and new"
            " values), mentioned again, superseded, deleted; by which agent and session."
            " Use it before trusting an old or surprising memory, or to recover a deleted"
            " memory's content.\n\n"
            f"Example: {_ex('memory_history')}"
        ),
        "memory_people": (
            "Who the memories name (`related_people`), most recently mentioned first, with"
            " how many memories name each and the ids of the newest ones. Use it to find"
            " what is known about someone (then memory_search with `people`).\n\n"
            f"Example: {_ex('memory_people')}"
        ),
        "create_workspace": (
            "Create a workspace: a named container for one project (its folder, purpose,"
            " key files, workflows, preferences). Memories and states can belong to it."
            " Check list_workspaces first: a taken name fails.\n\n"
            f"Example: {_ex('create_workspace')}"
        ),
        "list_workspaces": (
            "List the workspaces (name and description), oldest first. Use it to find the"
            " workspace to load, or when a workspace name is not found.\n\n"
            f"Example: {_ex('list_workspaces')}"
        ),
        "load_workspace": (
            "Load a workspace's full context (description, root folder, purpose, workflows,"
            " key files, preferences). Do it when you start working in a workspace.\n\n"
            f"Example: {_ex('load_workspace')}"
        ),
        "update_workspace": (
            "Change a workspace's fields; those left out stay. Lists and preferences are"
            " replaced, not merged (load_workspace first to keep what is there)."
            " `is_archived: false` restores an archived workspace.\n\n"
            f"Example: {_ex('update_workspace')}"
        ),
        "archive_workspace": (
            "Archive a workspace: list_workspaces no longer shows it; its memories and"
            " states stay, and update_workspace with `is_archived: false` restores it.\n\n"
            f"Example: {_ex('archive_workspace')}"
        ),
        "create_state": (
            "Save a state: an immutable save point of the work in a workspace, so that any"
            " later session (yours or another agent's) can resume exactly there. Save one"
            " before you stop, hand over, or end a long session; load_state resumes.\n\n"
            "Pitfalls:\n"
            "- States are immutable and names are unique in the workspace forever: pick a"
            ' specific, unique name (add a date or "-v2"); a taken name fails.\n'
            "- Make it complete: conversation_context and next_steps are all a later session"
            " will have.\n\n"
            f"Example: {_ex('create_state')}"
        ),
        "list_states": (
            "List the states of a workspace (name and description), oldest first. Use it"
            " to find the state to resume from.\n\n"
            f"Example: {_ex('list_states')}"
        ),
        "load_state": (
            "Load a state by name to resume work: what was going on, the active task and"
            " files, and the next steps. Continue from its next_steps.\n\n"
            f"Example: {_ex('load_state')}"
        ),
        "archive_state": (
            "Archive a state that is no longer useful: list_states no longer shows it, it"
            " stays loadable, and its name stays taken.\n\n"
            f"Example: {_ex('archive_state')}"
        ),
    }


# ----------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its name, the operation it runs, a description for a model, its JSON
    schema (a plain `type: object`), and the example its description shows."""

    name: str
    op: str
    description: str
    parameters: dict[str, Any]
    example: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """OpenAI function calling (Chat Completions `tools`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def mcp(self) -> dict[str, Any]:
        """An MCP tool definition (`tools/list`)."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": copy.deepcopy(self.parameters),
        }


def tool_specs(types: TypeTable = DEFAULT_TYPES) -> list[ToolSpec]:
    """The 19 tools; `types` is the handlers' type table when it is not the default."""
    descriptions = _descriptions(types)
    specs = []
    for name, op in TOOL_OPS.items():
        schema = tool_schema(name)
        texts = dict(FIELD_TEXTS[name])
        if name == "memory_add":
            texts["type"] = _type_field_text(types)
        for field, prop in schema["properties"].items():
            # A field new in the contracts still works undescribed (a unit test flags it).
            if field in texts:
                prop["description"] = texts[field]
        specs.append(
            ToolSpec(
                name=name,
                op=op,
                description=descriptions[name],
                parameters=schema,
                example=copy.deepcopy(EXAMPLES[name]),
            )
        )
    return specs


def openai_tools(types: TypeTable = DEFAULT_TYPES) -> list[dict[str, Any]]:
    return [spec.openai() for spec in tool_specs(types)]


def mcp_tools(types: TypeTable = DEFAULT_TYPES) -> list[dict[str, Any]]:
    return [spec.mcp() for spec in tool_specs(types)]


# ----------------------------------------------------------------------------- system prompt


def system_prompt(*, types: TypeTable = DEFAULT_TYPES, workspace: str | None = None) -> str:
    """The "Memory & Knowledge Management" section of a system prompt for an agent with
    these tools. `workspace`: the workspace the executor is configured with, if any."""
    general, workflow = _scope_names(types, "general"), _scope_names(types, "workflow")
    current = (
        f"\n- Your current workspace is {json.dumps(workspace, ensure_ascii=False)}: notes you"
        " save go into it; searches, lists and describe look only inside it; the state tools"
        " use it unless you pass another `workspace`. Load it with `load_workspace` when you start"
        " (`create_workspace` if it does not exist yet)."
        if workspace
        else "\n- Without a configured workspace, pass `workspace` to the state tools."
    )
    return f"""## Memory & Knowledge Management

You have a persistent memory shared with the other agents of your workflow. It outlives this
conversation: what you save, later sessions and other agents can find, and they save for you.

### When to search memory
- At the START of a task, call `memory_search` with what the task is about: the user's
  preferences, project conventions, earlier decisions and known pitfalls may already be there.
- Before any complex or multi-step task, search for related procedures and known pitfalls.
- When the user refers to something from earlier, search for it.
- When you are unsure about the user's preferences or conventions, search before assuming.
- Not sure what is stored? `memory_describe` gives counts by type and the tags, and
  `memory_list` with `mode: "compact"` browses cheaply. Narrow searches with `types`, `tags`,
  `people` and `since`/`until`.

### When to save to memory
Call `memory_add` proactively:
- When the user shares preferences or personal details, or how they like things done.
- When you find a working approach after trial and error: save what works AND what failed.
- When something does not work as expected or has a non-obvious pitfall.
- When a decision is taken: save it with the reason.
- When you learn durable facts about the user's setup, environment or domain.
- Add tags for retrieval (a topic, a project, a kind: "procedure", "pitfall", "convention").

Pick the type that fits; it decides who sees the note and how long it lives:
{type_lines(types, addable_only=True)}

### How to write good notes
- Make notes self-contained: they will be read out of context, in a later conversation.
- Say WHEN and WHERE a note applies ("In project Alpha...", "When deploying to staging...").
- Keep notes atomic: one fact, decision or procedure per note retrieves better.
- For an observation, give a `title` and `facts`; name `related_people` and `related_files`.
- Do NOT save secrets, passwords, API keys or tokens, one-off command outputs, or
  transient status.

### Maintaining memory
- Search before saving. Saving the same content again is safe: it bumps the existing
  memory's `mention_count` instead of storing a copy.
- A saved note that turned out wrong, incomplete or outdated: `memory_update` it by id,
  keeping what is still useful.
- A decision or fact that changed: add the new one with `supersedes: [old id]`; searches then
  leave the old one out, and `memory_history` keeps it.
- `memory_delete` only what is wrong and useless.
- Older notes may be outdated: check `created_at`, `memory_history` (who changed what) and
  `memory_timeline` (what happened around it) before relying on something critical.

### Scopes
- General types are shared by every workflow, so a user preference learnt here is found
  everywhere: {general}.
- Workflow types stay in this workflow: {workflow}.
- The type decides; set `scope` on `memory_add` only when you are sure the default is wrong.
- Reads see this workflow plus general memories (`scope: "both"`); narrow with
  `"workflow"` or `"general"`.

### Workspaces and states
- A workspace is a named project container: `list_workspaces`, `load_workspace`,
  `create_workspace`, `update_workspace`, `archive_workspace`.{current}
- Before you stop (the end of a session, a handoff, a long pause), save a state with
  `create_state`: the conversation context, the active task and files, and the next steps.
  States are immutable and their names unique forever: choose a specific name (add a date or
  "-v2"). States are stored as `{STATE_TYPE}` memories; tool runs as `{TRACE_TYPE}` memories.
- To resume, `list_states`, then `load_state`, and continue from its next steps.
- `archive_state` hides a state that is no longer useful (it stays loadable).
"""


# ----------------------------------------------------------------------------- executor


class ToolCallError(Exception):
    """A tool call that cannot be sent: carries the reply the model gets instead."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def reply(self) -> dict[str, Any]:
        return {"success": False, "code": self.code, "error": self.message}


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A validated tool call: the operation, its request, and the body to send."""

    tool: str
    op: str
    request: Request
    body: bytes


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gave: `data` is the reply as the model sees it (null and empty
    fields left out), `text` its JSON."""

    tool: str
    data: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.data.get("success") is True

    @property
    def code(self) -> str | None:
        code = self.data.get("code")
        return code if isinstance(code, str) else None

    @property
    def text(self) -> str:
        return msgspec.json.encode(self.data).decode()


def _compact(value: Any, top: bool = True) -> Any:
    """Leave out nulls everywhere, and empty strings, lists and objects below the top level
    (a top-level `results: []` is an answer; a record's `facts: []` is noise)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _compact(item, top=False)
            if item is None or (not top and isinstance(item, str | list | dict) and not item):
                continue
            out[key] = item
        return out
    if isinstance(value, list):
        return [_compact(item, top=False) for item in value]
    return value


_UNKNOWN_FIELD_RE = re.compile(r"unknown field `([^`]*)`")
_FIELD_PATH_RE = re.compile(r"at `\$\.(\w+)")
_encoder = msgspec.json.Encoder()
_WORKFLOW_RE = re.compile(WORKFLOW_ID_PATTERN)
_NAME_RE = re.compile(NAME_PATTERN)
_SESSION_RE = re.compile(SESSION_ID_PATTERN)


def check_identity(field: str, value: str) -> None:
    """Raise `ValueError` when `value` is not a valid `workflow_id`, `workspace`,
    `agent_id` or `session_id` (the message starts with the field's name)."""
    if field == "workflow_id":
        ok, rule = bool(_WORKFLOW_RE.match(value)), f"match {WORKFLOW_ID_PATTERN}"
    elif field == "workspace":
        ok = len(value) <= limits.MAX_NAME_CHARS and bool(_NAME_RE.match(value))
        rule = f"be a workspace name (1..{limits.MAX_NAME_CHARS} printable characters)"
    elif field == "agent_id":
        ok = 1 <= len(value) <= limits.MAX_AGENT_ID_CHARS
        rule = f"be 1..{limits.MAX_AGENT_ID_CHARS} characters"
    elif field == "session_id":
        ok, rule = bool(_SESSION_RE.match(value)), f"match {SESSION_ID_PATTERN}"
    else:
        raise ValueError(f"{field} is not an identity field")
    if not ok:
        raise ValueError(f"{field} {value!r} must {rule}")


class ToolExecutor:
    """Runs a model's tool calls over the bus, as one agent: the identity given here
    (workflow, agent, session, default workspace) goes on every request, never the model's.

    `call` returns the JSON text for the model and never raises for anything the model
    sent or the bus answered: errors come back as `{"success": false, "code", "error"}`.
    """

    def __init__(
        self,
        bus: MemoryBus,
        *,
        workflow_id: str | None = None,
        workspace: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        types: TypeTable = DEFAULT_TYPES,
    ) -> None:
        # A bad identity is the developer's mistake, so it fails here, loudly.
        for field, value in (
            ("workflow_id", workflow_id),
            ("workspace", workspace),
            ("agent_id", agent_id),
            ("session_id", session_id),
        ):
            if value is not None:
                check_identity(field, value)
        self.bus = bus
        self.workflow_id = workflow_id
        self.workspace = workspace
        self.agent_id = agent_id
        self.session_id = session_id
        self.specs: dict[str, ToolSpec] = {spec.name: spec for spec in tool_specs(types)}

    # -- preparing -------------------------------------------------------------------------

    def prepare(self, name: str, arguments: Mapping[str, Any] | str | bytes | None) -> PreparedCall:
        """Validate a model's arguments and build the request with this executor's identity.
        Raises `ToolCallError` (with the text for the model) when that is not possible."""
        spec = self.specs.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(self.specs), n=1)
            hint = f' Did you mean "{close[0]}"?' if close else ""
            raise ToolCallError(
                "invalid_request",
                f'Unknown tool "{name}".{hint} The memory tools are: {", ".join(self.specs)}.',
            )
        args = self._arguments(name, arguments)
        self._check_fields(spec, args)
        body = self._with_identity(spec, args)
        cls = REQUEST_TYPES[spec.op]
        try:
            data = _encoder.encode(body)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise ToolCallError(
                "invalid_request", f"Arguments of {name} are not plain JSON values ({exc})."
            ) from None
        if len(data) > limits.MAX_BODY_BYTES:
            raise ToolCallError(
                "too_large",
                f"Arguments of {name} are {len(data)} bytes; the limit is"
                f" {limits.MAX_BODY_BYTES} (content up to 32 KiB). Send less.",
            )
        try:
            request = msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as exc:
            raise ToolCallError("invalid_request", self._explain(spec, str(exc))) from None
        except RecursionError:
            raise ToolCallError(
                "invalid_request", f"Arguments of {name} nest too deeply."
            ) from None
        return PreparedCall(tool=name, op=spec.op, request=request, body=data)

    @staticmethod
    def _arguments(name: str, arguments: Mapping[str, Any] | str | bytes | None) -> dict[str, Any]:
        if arguments is None:
            return {}
        if isinstance(arguments, str | bytes):
            if not arguments.strip():
                return {}
            if len(arguments) > limits.MAX_BODY_BYTES:
                raise ToolCallError(
                    "too_large",
                    f"Arguments of {name} are over {limits.MAX_BODY_BYTES} bytes. Send less.",
                )
            try:
                arguments = msgspec.json.decode(arguments)
            except (msgspec.DecodeError, RecursionError) as exc:
                raise ToolCallError(
                    "invalid_request",
                    f"Arguments of {name} are not valid JSON ({exc}). Send one JSON object.",
                ) from None
        if not isinstance(arguments, Mapping):
            raise ToolCallError(
                "invalid_request",
                f"Arguments of {name} must be a JSON object of named fields, not"
                f" {type(arguments).__name__}.",
            )
        if not all(isinstance(key, str) for key in arguments):
            raise ToolCallError("invalid_request", f"Field names of {name} must be strings.")
        return dict(arguments)

    @staticmethod
    def _check_fields(spec: ToolSpec, args: Mapping[str, Any]) -> None:
        # The request structs know the hidden fields, so msgspec alone would let a model
        # set its own identity: check against the tool's schema first.
        known = list(spec.parameters["properties"])
        for field in args:
            if field in known:
                continue
            if field in HIDDEN_FIELDS:
                raise ToolCallError(
                    "invalid_request",
                    f'Leave out "{field}" from {spec.name}: the memory tool sets it itself.',
                )
            close = difflib.get_close_matches(field, known, n=1)
            hint = f' Did you mean "{close[0]}"?' if close else ""
            raise ToolCallError(
                "invalid_request",
                f'Unknown field "{field}" for {spec.name}.{hint} Known fields: {", ".join(known)}.',
            )

    def _with_identity(self, spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
        fields = REQUEST_TYPES[spec.op].__struct_fields__
        body = dict(args)
        if "workflow_id" in fields and self.workflow_id is not None:
            body["workflow_id"] = self.workflow_id
        if "agent_id" in fields and self.agent_id is not None:
            body["agent_id"] = self.agent_id
        if "workspace" in fields and body.get("workspace") is None:
            if self.workspace is not None:
                body["workspace"] = self.workspace
            elif spec.op in _STATE_OPS:
                raise ToolCallError(
                    "invalid_request",
                    f"{spec.name} needs `workspace`: no default workspace is configured."
                    " Pass the workspace's name (list_workspaces shows them).",
                )
            else:
                body.pop("workspace", None)
        if self.session_id is not None:
            body["context"] = {"session_id": self.session_id}
        return body

    @staticmethod
    def _explain(spec: ToolSpec, text: str) -> str:
        message = f"Invalid arguments for {spec.name}: {text}."
        if match := _UNKNOWN_FIELD_RE.search(text):  # defensive: `_check_fields` runs first
            return f'Unknown field "{match.group(1)}" for {spec.name}.'
        if match := _FIELD_PATH_RE.search(text):
            prop = spec.parameters["properties"].get(match.group(1), {})
            if isinstance(prop.get("enum"), list):
                message += f" {match.group(1)} must be one of: {', '.join(prop['enum'])}."
            elif prop.get("description"):
                message += f" {match.group(1)}: {prop['description']}"
        return message

    # -- running ---------------------------------------------------------------------------

    async def run(self, name: str, arguments: Mapping[str, Any] | str | bytes | None) -> ToolResult:
        """Run one tool call; the result's `data` is what the model should see."""
        try:
            prepared = self.prepare(name, arguments)
            reply = await self._send(prepared)
        except ToolCallError as exc:
            reply = exc.reply()
        except Exception:
            # Never let a model's call take the agent down; the id ties the text to the log.
            ref = uuid.uuid4().hex[:12]
            log.exception("tool.failed", tool=name, ref=ref)
            reply = {
                "success": False,
                "code": "internal",
                "error": f"The memory tool failed unexpectedly (ref {ref}). Retry once; if it"
                " fails again, go on without memory.",
            }
        return ToolResult(tool=name, data=_compact(reply))

    async def call(self, name: str, arguments: Mapping[str, Any] | str | bytes | None) -> str:
        """Run one tool call and return the JSON text a model should see."""
        return (await self.run(name, arguments)).text

    async def _send(self, prepared: PreparedCall) -> dict[str, Any]:
        # The bus's own send path: its trust's subjects and the request's trace.
        try:
            data = await self.bus.request_raw(prepared.op, prepared.body)
        except BusTimeout:
            raise ToolCallError(
                "unavailable",
                f"No reply from the memory service within {self.bus.timeout:g}s. Retry the"
                " same call in a moment.",
            ) from None
        except Unavailable:
            raise ToolCallError(
                "unavailable",
                "The memory service is not running (no responders). Retry in a moment;"
                " if it keeps failing, go on without memory.",
            ) from None
        except NatsError as exc:
            raise ToolCallError(
                "unavailable",
                f"Cannot reach the memory bus ({type(exc).__name__}). Retry in a moment.",
            ) from None
        try:
            reply = msgspec.json.decode(data)
        except msgspec.DecodeError:
            reply = None
        if not isinstance(reply, dict):
            raise ToolCallError(
                "internal", f"The memory service sent an unreadable reply to {prepared.op}."
            )
        return reply
