"""Subject names: `mem.<ns>.<op>[.<trust>]` for requests (`memq.` for durable writes),
`mem.<ns>.events.<scope>.<type>.<action>` for events; and what each trust level may see.
The operations themselves, and which may be durable, are in `contracts.operations`."""

from __future__ import annotations

import re

PREFIX = "mem"
# Durable writes: the JetStream stream MEMBUS_WRITES holds `memq.<ns>.<op>[.<trust>]`.
DURABLE_PREFIX = "memq"
DURABLE_STREAM = "MEMBUS_WRITES"
DURABLE_CONSUMER = "membus-handlers"
SERVICE_NAME = "memory"
QUEUE_GROUP = "memory"
DEFAULT_NAMESPACE = "default"
# Event subjects use this token for memories that belong to no workflow.
GENERAL_SCOPE_TOKEN = "_general"

NAMESPACE_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
WORKFLOW_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}\Z"
_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)

# Trust comes from the subject (PROTOCOL "Trust and stores"): no suffix is `full`.
FULL_TRUST = "full"
REDUCED_TRUST = ("inner", "familiar", "public")
TRUST_LEVELS = (FULL_TRUST, *REDUCED_TRUST)
STORES = ("private", "shared", "social")
# The stores each trust level sees, and where its writes go by default.
VISIBLE_STORES: dict[str, tuple[str, ...]] = {
    "full": STORES,
    "inner": ("shared", "social"),
    "familiar": ("social",),
    "public": (),
}
DEFAULT_STORE: dict[str, str | None] = {
    "full": "private",
    "inner": "shared",
    "familiar": "social",
    "public": None,
}


def is_valid_namespace(ns: str) -> bool:
    return bool(_NAMESPACE_RE.match(ns))


def request_subject(ns: str, op: str, trust: str = FULL_TRUST, durable: bool = False) -> str:
    prefix = DURABLE_PREFIX if durable else PREFIX
    return f"{prefix}.{ns}.{op}" + ("" if trust == FULL_TRUST else f".{trust}")


def endpoint_subject(op: str, reduced: bool = False) -> str:
    """The wildcard subject a handler serves for one operation, across every namespace: at
    full trust, or (`reduced`) with a trust suffix."""
    return f"{PREFIX}.*.{op}" + (".*" if reduced else "")


def event_subject(ns: str, workflow_id: str | None, type_: str, action: str) -> str:
    scope = workflow_id if workflow_id is not None else GENERAL_SCOPE_TOKEN
    return f"{PREFIX}.{ns}.events.{scope}.{type_}.{action}"


def rejected_subject(ns: str, op: str) -> str:
    """Where a durable write that can never succeed is reported."""
    return f"{PREFIX}.{ns}.events._rejected.{op}.rejected"


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


def parse_request_subject(subject: str) -> tuple[str, str, str] | None:
    """(namespace, operation, trust) of a request subject, `mem.` or `memq.`, or None when it
    is not one. The trust token is returned as given: the caller checks it."""
    parts = subject.split(".")
    if len(parts) not in (3, 4) or parts[0] not in (PREFIX, DURABLE_PREFIX):
        return None
    return parts[1], parts[2], parts[3] if len(parts) == 4 else FULL_TRUST


def nats_servers(url: str) -> list[str]:
    """The servers of a NATS URL that may list several, comma-separated, as NATS's own clients
    take them (`nats://a:4222,nats://b:4222`): any one of a cluster is enough to connect."""
    return [part.strip() for part in url.split(",") if part.strip()]
