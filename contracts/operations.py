"""Every operation of the protocol, once: its request and reply types, how it may be sent,
and an example of its request.

The subjects a handler serves, the durable and full-trust lists, which reply list a handler
may trim to fit, the protocol reference, the tools' examples and the tests' parametrisations
and starting bodies are all read from `TABLE`. A handler binds its function to an operation
by request type (handlers.ops.registry).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from contracts import messages as m

# Values the examples share: a memory, a workspace and one of its states.
EXAMPLE_ID = "01JZ8Q4M3V7T2K9D5X6R1N0BCA"
EXAMPLE_WORKSPACE = "Project Alpha"
EXAMPLE_STATE = "Auth Module Progress"


@dataclass(frozen=True, kw_only=True)
class Operation:
    name: str
    request: type[m.Request]
    # Every shape the reply may take (`list` and `timeline` have a compact one).
    replies: tuple[type[msgspec.Struct], ...]
    # May be sent to the JetStream stream (`memq.<ns>.<name>`) as well as by request/reply.
    durable: bool = False
    # Forbidden below full trust: a full-trust agent's own working set, or a whole namespace.
    full_trust_only: bool = False
    # The reply's list that a handler shortens, from its end, so that the reply fits the
    # server's max payload (setting `truncated`); None: the reply is small by construction.
    trimmed: str | None = None
    # A request body as an agent would send it (valid: a unit test decodes each one). The
    # protocol reference and the tools show it; tests start from it. Ids, workspaces and
    # states in it need not exist.
    example: Mapping[str, Any]

    def example_body(self) -> dict[str, Any]:
        """A copy of `example`, to change freely."""
        return copy.deepcopy(dict(self.example))


TABLE: tuple[Operation, ...] = (
    Operation(
        name="add",
        request=m.AddRequest,
        replies=(m.AddReply,),
        durable=True,
        example={
            "type": "decision",
            "content": (
                "Project Alpha's API uses PostgreSQL 16, not MySQL: we need JSONB columns and"
                " row-level security. Agreed with Dana at the schema review."
            ),
            "tags": ["database", "project-alpha"],
            "related_people": ["Dana"],
        },
    ),
    Operation(
        name="search",
        request=m.SearchRequest,
        replies=(m.SearchReply,),
        trimmed="results",
        example={
            "query": "which database does the Alpha API use",
            "types": ["decision", "fact"],
            "limit": 5,
        },
    ),
    Operation(
        name="describe",
        request=m.DescribeRequest,
        replies=(m.DescribeReply,),
        example={"scope": "both"},
    ),
    Operation(
        name="list",
        request=m.ListRequest,
        replies=(m.ListReply, m.CompactListReply),
        trimmed="memories",
        example={"mode": "compact", "types": ["todo", "goal"], "limit": 20},
    ),
    Operation(
        name="get",
        request=m.GetRequest,
        replies=(m.GetReply,),
        trimmed="memories",
        example={"ids": [EXAMPLE_ID]},
    ),
    Operation(
        name="delete",
        request=m.DeleteRequest,
        replies=(m.DeleteReply,),
        durable=True,
        example={"ids": [EXAMPLE_ID]},
    ),
    Operation(
        name="clear_by_type",
        request=m.ClearByTypeRequest,
        replies=(m.ClearByTypeReply,),
        example={"type": "todo", "workflow_id": "wf_checkout"},
    ),
    Operation(
        name="compact",
        request=m.CompactRequest,
        replies=(m.ClearByTypeReply,),
        example={"type": "observation", "keep": 200, "by": "recency", "workflow_id": "wf_checkout"},
    ),
    Operation(
        name="update",
        request=m.UpdateRequest,
        replies=(m.UpdateReply,),
        durable=True,
        example={
            "id": EXAMPLE_ID,
            "content": (
                "Deploys of Project Alpha go through `make release` (not `make deploy`, removed"
                " in June); it runs the migrations first."
            ),
            "tags": ["deploy", "procedure"],
        },
    ),
    Operation(
        name="apply",
        request=m.ApplyRequest,
        replies=(m.ApplyReply,),
        example={
            "actions": [
                {
                    "action": "supersede",
                    "id": EXAMPLE_ID,
                    "type": "knowledge",
                    "content": "Deploys of Project Alpha go through `make ship` (since June).",
                },
                {
                    "action": "add",
                    "type": "user_pref",
                    "content": "The user prefers answers with code examples.",
                },
            ]
        },
    ),
    Operation(
        name="history",
        request=m.HistoryRequest,
        replies=(m.HistoryReply,),
        trimmed="entries",
        example={"id": EXAMPLE_ID},
    ),
    Operation(
        name="recall",
        request=m.RecallRequest,
        replies=(m.RecallReply,),
        trimmed="results",
        example={
            "message": "Shall we store the order events in MySQL?",
            "session_id": "session-42",
            "workflow_id": "wf_checkout",
        },
    ),
    Operation(
        name="timeline",
        request=m.TimelineRequest,
        replies=(m.TimelineReply, m.CompactTimelineReply),
        trimmed="memories",
        example={"anchor": EXAMPLE_ID, "before": 3, "after": 3},
    ),
    Operation(
        name="people",
        request=m.PeopleRequest,
        replies=(m.PeopleReply,),
        trimmed="people",
        example={"query": "dana"},
    ),
    Operation(
        name="create_workspace",
        request=m.CreateWorkspaceRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
        example={
            "name": EXAMPLE_WORKSPACE,
            "description": "E-commerce platform rebuild",
            "root_folder": "projects/alpha",
            "purpose": "Rebuild the legacy e-commerce platform as a set of services",
            "key_files": ["projects/alpha/README.md"],
        },
    ),
    Operation(
        name="list_workspaces",
        request=m.ListWorkspacesRequest,
        replies=(m.ListDataReply,),
        full_trust_only=True,
        trimmed="data",
        example={"include_archived": False},
    ),
    Operation(
        name="load_workspace",
        request=m.LoadWorkspaceRequest,
        replies=(m.WorkspaceReply,),
        full_trust_only=True,
        example={"name": EXAMPLE_WORKSPACE},
    ),
    Operation(
        name="update_workspace",
        request=m.UpdateWorkspaceRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
        example={
            "name": EXAMPLE_WORKSPACE,
            "workflows": ["Review a pull request", "Release to staging"],
        },
    ),
    Operation(
        name="archive_workspace",
        request=m.ArchiveWorkspaceRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
        example={"name": EXAMPLE_WORKSPACE},
    ),
    Operation(
        name="create_state",
        request=m.CreateStateRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
        example={
            "workspace": EXAMPLE_WORKSPACE,
            "name": EXAMPLE_STATE,
            "conversation_context": "We chose JWT for auth and set up the basic structure.",
            "active_task": "Implementing token refresh",
            "active_files": ["src/auth/jwt.ts", "src/auth/middleware.ts"],
            "next_steps": ["Add the refresh endpoint", "Test token expiry", "Add logout"],
            "tags": ["auth", "in-progress"],
        },
    ),
    Operation(
        name="list_states",
        request=m.ListStatesRequest,
        replies=(m.ListDataReply,),
        full_trust_only=True,
        trimmed="data",
        example={"workspace": EXAMPLE_WORKSPACE},
    ),
    Operation(
        name="load_state",
        request=m.LoadStateRequest,
        replies=(m.StateReply,),
        full_trust_only=True,
        example={"workspace": EXAMPLE_WORKSPACE, "name": EXAMPLE_STATE},
    ),
    Operation(
        name="archive_state",
        request=m.ArchiveStateRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
        example={"workspace": EXAMPLE_WORKSPACE, "name": EXAMPLE_STATE},
    ),
    Operation(
        name="capture",
        request=m.CaptureRequest,
        replies=(m.AddReply,),
        durable=True,
        example={
            "tool": "read_file",
            "args": {"path": "src/auth/jwt.ts"},
            "output": "export function sign(claims: Claims): string { ... }",
            "duration_ms": 12.5,
            "workflow_id": "wf_checkout",
        },
    ),
    Operation(
        name="reconcile",
        request=m.ReconcileRequest,
        replies=(m.ReconcileReply,),
        example={
            "facts": [
                {"content": "Deploys of Project Alpha go through `make ship`", "type": "knowledge"},
                {"content": "The user prefers answers with code examples", "type": "user_pref"},
            ]
        },
    ),
    Operation(
        name="export",
        request=m.ExportRequest,
        replies=(m.ExportReply,),
        full_trust_only=True,
        example={"cursor": "0", "limit": 500},
    ),
    Operation(
        name="import",
        request=m.ImportRequest,
        replies=(m.ImportReply,),
        durable=True,
        full_trust_only=True,
        example={
            "memories": [
                {
                    "id": EXAMPLE_ID,
                    "type": "fact",
                    "content": "The staging database is restored from backup every Sunday.",
                    "tags": ["staging"],
                    "created_at": "2026-01-15T09:30:00Z",
                }
            ]
        },
    ),
)

BY_NAME: dict[str, Operation] = {op.name: op for op in TABLE}
BY_REQUEST: dict[type[m.Request], Operation] = {op.request: op for op in TABLE}

OPERATIONS: tuple[str, ...] = tuple(BY_NAME)
REQUEST_TYPES: dict[str, type[m.Request]] = {op.name: op.request for op in TABLE}
DURABLE_OPERATIONS: tuple[str, ...] = tuple(op.name for op in TABLE if op.durable)
FULL_TRUST_OPERATIONS: tuple[str, ...] = tuple(op.name for op in TABLE if op.full_trust_only)
# Reply type -> the list a handler may trim (see `Operation.trimmed`).
TRIMMED: dict[type[msgspec.Struct], str] = {
    reply: op.trimmed for op in TABLE if op.trimmed is not None for reply in op.replies
}
