"""What a model reads: each field's text, each tool's description and example, the memory
types, and the system-prompt section on using memory well."""

from __future__ import annotations

import json
from typing import Any

from bus.tools.names import TOOL_OPS
from contracts.operations import BY_NAME
from contracts.types import DAY_S, DEFAULT_TYPES, STATE_TYPE, TRACE_TYPE, TypeTable

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
_AS_OF = (
    "Read as of this time (ISO 8601): only what was valid then, including memories replaced"
    " since. Leave out for what holds now."
)
_VALID_FROM = (
    "When the fact started to hold in the world (ISO 8601), if not when you learnt it"
    " (e.g. a move last month)."
)
_VALID_UNTIL = (
    "When the fact stopped (or will stop) holding (ISO 8601); after it, reads leave the"
    " memory out unless they ask `as_of` an earlier time."
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
        "type": "",  # generated from the type table, see `type_field_text`
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
        "idle_ttl_s": (
            "Forget it once nobody has read it for this many seconds (at least 60); every"
            " read keeps it longer. For scratch notes that matter only while in use."
        ),
        "key": (
            'A name for this memory, unique in its store (e.g. "user/theme"): adding again'
            " with the same key replaces that memory (same id, version + 1) instead of"
            " storing another. Leave out for ordinary memories."
        ),
        "expected_version": (
            "With `key`: replace only if the keyed memory is at this version (0: only if no"
            " memory holds the key yet); otherwise a conflict error tells the current version."
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
        "valid_from": _VALID_FROM,
        "valid_until": _VALID_UNTIL,
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
        "as_of": _AS_OF,
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
        "as_of": _AS_OF,
    },
    "memory_get": {
        "ids": "The ids of the memories to read in full.",
        "keys": "Or the keys memories were added with (`key` of memory_add).",
    },
    "memory_update": {
        "id": _ID,
        "content": "The new content (replaces the old; keep what is still useful).",
        "tags": "The new tags (replace the old ones).",
        "importance": "The new importance, 0..1.",
        "ttl_s": "Forget it this many seconds from now; 0 = keep forever.",
        "valid_from": _VALID_FROM + " null: from when it was stored.",
        "valid_until": _VALID_UNTIL + " null: still holds.",
        "expected_version": (
            "The memory's `version` as you last read it: the update applies only if nobody"
            " changed it since (else a conflict error with its current version; read it"
            " again and decide)."
        ),
    },
    "memory_delete": {
        "ids": "The ids of the memories to delete.",
        "erase": (
            "Only when the user asks that something be forgotten for good: its text is then"
            " erased from everything the service keeps (its history stays as a tombstone)."
            " Needs full trust."
        ),
    },
    "memory_timeline": {
        "anchor": _ID,
        "before": "How many memories before the anchor (default 5).",
        "after": "How many memories after the anchor (default 5).",
        "scope": _SCOPE_READ,
        "types": _TYPES_FILTER,
        "mode": '"compact" (default) previews, or "full" records.',
        "include_superseded": _SUPERSEDED,
        "as_of": _AS_OF,
        "workspace": _WORKSPACE_FILTER,
    },
    "memory_history": {"id": _ID},
    "memory_people": {
        "query": "Part of a name (case-insensitive); leave out to list everyone.",
        "scope": _SCOPE_READ,
        "limit": "How many people at most (default 20).",
    },
    "memory_reconcile": {
        "facts": (
            "The facts you extracted (up to 50), each `content` (one short, self-contained"
            " statement), with the `type` you would store it as."
        ),
        "workspace": _WORKSPACE_FILTER,
        "limit": "How many nearest memories to return per fact (default 3, at most 10).",
    },
    "memory_apply": {
        "actions": (
            "Up to 50 writes, applied all together or not at all. Each is one of"
            ' {"action": "add", "type", "content", ...memory_add fields},'
            ' {"action": "supersede", "id": <target from memory_reconcile>, "type", "content",'
            ' ...}, {"action": "update", "id", ...memory_update fields} or'
            ' {"action": "delete", "id"}. `expected_version` on update, supersede and delete:'
            " only at that version of the memory (else the batch is a conflict)."
        ),
        "workspace": _WORKSPACE_FILTER,
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

# Each tool's example is its operation's (contracts.operations), which shows none of the
# fields the executor sets (HIDDEN_FIELDS).
EXAMPLES: dict[str, dict[str, Any]] = {
    name: BY_NAME[op].example_body() for name, op in TOOL_OPS.items()
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


def type_field_text(types: TypeTable) -> str:
    return (
        f"The kind of memory, one of: {', '.join(_addable(types))}. It decides the default"
        f" scope (general: {_scope_names(types, 'general')}; this workflow:"
        f" {_scope_names(types, 'workflow')}), importance and lifetime."
    )


# ----------------------------------------------------------------------------- descriptions


def _ex(name: str) -> str:
    return json.dumps(EXAMPLES[name], ensure_ascii=False)


def tool_descriptions(types: TypeTable) -> dict[str, str]:
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
        "memory_reconcile": (
            "Before storing facts you extracted from a conversation or a tool's output, ask"
            " what is known already. For each fact you get the nearest stored memories and"
            " an action: `noop` (already known: store nothing), `supersede` (memory `target`"
            " says something else about the same thing: memory_add the fact with"
            " `supersedes: [target]`), or `add` (new: memory_add it). Stores nothing itself.\n\n"
            f"Example: {_ex('memory_reconcile')}"
        ),
        "memory_apply": (
            "Store what memory_reconcile told you to, in one step: the `add` and `supersede`"
            " facts (and any `update` or `delete` you decided), all applied together, or, if"
            " one is refused, none (the error names it: fix it and send the batch again)."
            " Leave out the `noop` facts.\n\n"
            f"Example: {_ex('memory_apply')}"
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
