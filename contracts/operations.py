"""Every operation of the protocol, once: its request and reply types and how it may be sent.

The subjects a handler serves, the durable and full-trust lists, which reply list a handler
may trim to fit, the protocol reference and the tests' parametrisations are all read from
`TABLE`. A handler binds its function to an operation by request type (handlers.ops.registry).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from contracts import messages as m


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


TABLE: tuple[Operation, ...] = (
    Operation(name="add", request=m.AddRequest, replies=(m.AddReply,), durable=True),
    Operation(name="search", request=m.SearchRequest, replies=(m.SearchReply,), trimmed="results"),
    Operation(name="describe", request=m.DescribeRequest, replies=(m.DescribeReply,)),
    Operation(
        name="list",
        request=m.ListRequest,
        replies=(m.ListReply, m.CompactListReply),
        trimmed="memories",
    ),
    Operation(name="get", request=m.GetRequest, replies=(m.GetReply,), trimmed="memories"),
    Operation(name="delete", request=m.DeleteRequest, replies=(m.DeleteReply,), durable=True),
    Operation(name="clear_by_type", request=m.ClearByTypeRequest, replies=(m.ClearByTypeReply,)),
    Operation(name="compact", request=m.CompactRequest, replies=(m.ClearByTypeReply,)),
    Operation(name="update", request=m.UpdateRequest, replies=(m.UpdateReply,), durable=True),
    Operation(name="apply", request=m.ApplyRequest, replies=(m.ApplyReply,)),
    Operation(
        name="history", request=m.HistoryRequest, replies=(m.HistoryReply,), trimmed="entries"
    ),
    Operation(name="recall", request=m.RecallRequest, replies=(m.RecallReply,), trimmed="results"),
    Operation(
        name="timeline",
        request=m.TimelineRequest,
        replies=(m.TimelineReply, m.CompactTimelineReply),
        trimmed="memories",
    ),
    Operation(name="people", request=m.PeopleRequest, replies=(m.PeopleReply,), trimmed="people"),
    Operation(
        name="create_workspace",
        request=m.CreateWorkspaceRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
    ),
    Operation(
        name="list_workspaces",
        request=m.ListWorkspacesRequest,
        replies=(m.ListDataReply,),
        full_trust_only=True,
        trimmed="data",
    ),
    Operation(
        name="load_workspace",
        request=m.LoadWorkspaceRequest,
        replies=(m.WorkspaceReply,),
        full_trust_only=True,
    ),
    Operation(
        name="update_workspace",
        request=m.UpdateWorkspaceRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
    ),
    Operation(
        name="archive_workspace",
        request=m.ArchiveWorkspaceRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
    ),
    Operation(
        name="create_state",
        request=m.CreateStateRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
    ),
    Operation(
        name="list_states",
        request=m.ListStatesRequest,
        replies=(m.ListDataReply,),
        full_trust_only=True,
        trimmed="data",
    ),
    Operation(
        name="load_state",
        request=m.LoadStateRequest,
        replies=(m.StateReply,),
        full_trust_only=True,
    ),
    Operation(
        name="archive_state",
        request=m.ArchiveStateRequest,
        replies=(m.OkReply,),
        full_trust_only=True,
    ),
    Operation(name="capture", request=m.CaptureRequest, replies=(m.AddReply,), durable=True),
    Operation(name="reconcile", request=m.ReconcileRequest, replies=(m.ReconcileReply,)),
    Operation(
        name="export", request=m.ExportRequest, replies=(m.ExportReply,), full_trust_only=True
    ),
    Operation(
        name="import",
        request=m.ImportRequest,
        replies=(m.ImportReply,),
        durable=True,
        full_trust_only=True,
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
