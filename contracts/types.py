"""The memory-type table: default importance, storage scope and TTL per type.

The defaults are PROTOCOL.md's; handlers may replace the table from configuration
(`MEMBUS_TYPES_FILE`), parsed with `decode_type_table`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

DAY_S = 24 * 3600


class TypeConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    importance: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    scope: Literal["general", "workflow"]
    # None: permanent.
    ttl_s: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # v3: forgotten this long after its last access (None: not for idleness).
    idle_ttl_s: Annotated[int, msgspec.Meta(ge=60)] | None = None


TypeTable = dict[str, TypeConfig]

DEFAULT_TYPES: TypeTable = {
    "user_pref": TypeConfig(importance=0.8, scope="general"),
    "knowledge": TypeConfig(importance=0.6, scope="general"),
    "context": TypeConfig(importance=0.3, scope="workflow", ttl_s=7 * DAY_S),
    "decision": TypeConfig(importance=0.7, scope="workflow"),
    "identity": TypeConfig(importance=1.0, scope="general"),
    "goal": TypeConfig(importance=0.9, scope="workflow"),
    "todo": TypeConfig(importance=0.8, scope="workflow"),
    "preference": TypeConfig(importance=0.7, scope="general"),
    "fact": TypeConfig(importance=0.6, scope="general"),
    "event": TypeConfig(importance=0.4, scope="workflow"),
    "observation": TypeConfig(importance=0.3, scope="workflow"),
    # A tool run (`capture`), and a workspace's immutable save point (`create_state`).
    "trace": TypeConfig(importance=0.2, scope="workflow", ttl_s=30 * DAY_S),
    "state": TypeConfig(importance=0.9, scope="general"),
}
# Types the server writes itself: `add` refuses `state` (use `create_state`).
STATE_TYPE = "state"
TRACE_TYPE = "trace"

TYPE_NAME_PATTERN = r"^[a-z0-9_]{1,64}\Z"

_table_decoder = msgspec.json.Decoder(
    dict[Annotated[str, msgspec.Meta(pattern=TYPE_NAME_PATTERN)], TypeConfig]
)


def decode_type_table(raw: bytes | str) -> TypeTable:
    """Parse a JSON type table (`{"name": {"importance":..,"scope":..,"ttl_s":..}}`)."""
    table = _table_decoder.decode(raw)
    if not table:
        raise ValueError("the memory-type table is empty")
    return table
