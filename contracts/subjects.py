"""Subject names: `mem.<ns>.<op>` for requests, `mem.<ns>.events.<scope>.<type>.<action>`
for events."""

from __future__ import annotations

import re

PREFIX = "mem"
SERVICE_NAME = "memory"
QUEUE_GROUP = "memory"
DEFAULT_NAMESPACE = "default"
# Event subjects use this token for memories that belong to no workflow.
GENERAL_SCOPE_TOKEN = "_general"

NAMESPACE_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
WORKFLOW_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}\Z"
_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)

OPERATIONS: tuple[str, ...] = (
    "add",
    "search",
    "describe",
    "list",
    "get",
    "delete",
    "clear_by_type",
    "update",
    "history",
    "recall",
    "timeline",
    "people",
    "create_workspace",
    "list_workspaces",
    "load_workspace",
    "update_workspace",
    "archive_workspace",
    "create_state",
    "list_states",
    "load_state",
    "archive_state",
    "capture",
)


def is_valid_namespace(ns: str) -> bool:
    return bool(_NAMESPACE_RE.match(ns))


def request_subject(ns: str, op: str) -> str:
    return f"{PREFIX}.{ns}.{op}"


def endpoint_subject(op: str) -> str:
    """The wildcard subject a handler serves for one operation, across every namespace."""
    return f"{PREFIX}.*.{op}"


def event_subject(ns: str, workflow_id: str | None, type_: str, action: str) -> str:
    scope = workflow_id if workflow_id is not None else GENERAL_SCOPE_TOKEN
    return f"{PREFIX}.{ns}.events.{scope}.{type_}.{action}"


def event_filter(
    ns: str,
    workflow_id: str | None = None,
    *,
    general: bool = False,
    type_: str | None = None,
    action: str | None = None,
) -> str:
    """A subscription subject for events; unspecified parts are wildcards."""
    scope = GENERAL_SCOPE_TOKEN if general else workflow_id or "*"
    return f"{PREFIX}.{ns}.events.{scope}.{type_ or '*'}.{action or '*'}"


def parse_request_subject(subject: str) -> tuple[str, str] | None:
    """(namespace, operation) of a request subject, or None when it is not one."""
    parts = subject.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    return parts[1], parts[2]
