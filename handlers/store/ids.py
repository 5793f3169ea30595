"""Memory ids: ULIDs (26 Crockford base32 characters), sortable by creation time.

Within one millisecond a process hands out increasing ids (the random part of the previous
id plus one, as ULID's monotonic mode does), so one writer's memories sort in the order it
added them even when several land in the same millisecond.
"""

from __future__ import annotations

import hashlib
import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_last = (0, 0)  # (ms, random part) of the previous id


def new_id(now_ms: int | None = None) -> str:
    global _last
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    last_ms, last_random = _last
    if ms == last_ms and last_random + 1 < 1 << _RANDOM_BITS:
        random = last_random + 1
    else:
        random = int.from_bytes(os.urandom(10), "big")
    _last = (ms, random)
    return _encode((ms << _RANDOM_BITS) | random)


def derived_id(ms: int, key: str) -> str:
    """The id a durable write's new memory gets: its time part from when the write was
    published, its random part from the write's request id, so a write applied again (a
    handler died between the write and its acknowledgement) rewrites the same memory
    instead of adding a second one."""
    random = int.from_bytes(hashlib.sha256(key.encode()).digest()[:10], "big")
    return _encode((ms << _RANDOM_BITS) | random)


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
