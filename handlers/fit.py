"""Replies that fit: no reply may exceed the NATS server's max payload (NATS would refuse it
and the caller would only time out). A read whose reply is too large drops trailing items and
says `truncated: true`; its `count` then counts what was returned."""

from __future__ import annotations

from typing import Any

import msgspec

# Which list of a reply may lose trailing items: `Operation.trimmed`.
from contracts.operations import TRIMMED

_encoder = msgspec.json.Encoder()


def fitted(reply: msgspec.Struct, max_bytes: int) -> bytes:
    """The reply's JSON, trimmed to at most `max_bytes` where its type allows."""
    out = _encoder.encode(reply)
    field = TRIMMED.get(type(reply))
    if len(out) <= max_bytes or field is None:
        return out
    items: list[Any] = getattr(reply, field)
    # Each item's share of the JSON (its bytes and a comma); the rest is the envelope.
    sizes = [len(_encoder.encode(item)) + 1 for item in items]
    # A recall's prompt `block` has one line per result: it loses the same lines.
    lines: list[str] | None = getattr(reply, "block", "").split("\n") if items else None
    if lines is not None and len(lines) == len(items):
        sizes = [size + len(_encoder.encode(line)) for size, line in zip(sizes, lines, strict=True)]
    else:
        lines = None
    room = max_bytes - (len(out) - sum(sizes)) - 64  # the flag and count may grow a little
    keep = 0
    while keep < len(items) and room - sizes[keep] >= 0:
        room -= sizes[keep]
        keep += 1
    while True:
        changes: dict[str, Any] = {field: items[:keep], "truncated": True}
        if lines is not None:
            changes["block"] = "\n".join(lines[:keep])
        if hasattr(reply, "count"):
            changes["count"] = keep
        out = _encoder.encode(msgspec.structs.replace(reply, **changes))
        if len(out) <= max_bytes or keep == 0:
            return out
        keep -= 1
