"""Time as the store keeps it (epoch milliseconds) and as the protocol shows it (datetimes)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from handlers.store.record import PERMANENT_MS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ms_to_dt(ms: int) -> datetime:
    # Integer arithmetic keeps millisecond timestamps exact (no float rounding to .122999).
    return datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)


def dt_to_ms(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    # Exact integer arithmetic: float timestamps can lose the last millisecond.
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def expiry_dt(expires_ms: int) -> datetime | None:
    """A record's expiry as the protocol shows it: null for a permanent memory."""
    return None if expires_ms >= PERMANENT_MS else ms_to_dt(expires_ms)


def expires_ms(now: int, ttl_s: int | None) -> int:
    """When a memory written now with this TTL expires (PERMANENT_MS: never; 0 or None)."""
    return now + ttl_s * 1000 if ttl_s else PERMANENT_MS


def opt_dt(ms: int | None) -> datetime | None:
    """An optional time as the protocol shows it (v3 validity bounds: null is open)."""
    return None if ms is None else ms_to_dt(ms)


def opt_ms(dt: datetime | None) -> int | None:
    return None if dt is None else dt_to_ms(dt)
