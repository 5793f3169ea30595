"""Recall sessions: per session, its turn count and what each memory was given in which turn
(with an 8-bit copy of its unit vector, so later turns compare without reading it again)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.failures import Guard
from handlers.store.resp import text

# The turn counter's field in a session hash (memory ids, the other fields, are never this).
_TURN = "turn"


class Recalled(NamedTuple):
    """A memory recalled in a session: the turn, and its unit vector (8-bit, enough to tell
    a near-duplicate) so that later turns compare with it without reading it again."""

    turn: int
    vector: np.ndarray | None


def _recall_entry(turn: int, unit: np.ndarray | None) -> bytes:
    if unit is None:
        return str(turn).encode()
    quantised = np.clip(np.rint(unit * 127), -127, 127).astype(np.int8)
    return str(turn).encode() + b"|" + quantised.tobytes()


def _recalled(raw: bytes) -> Recalled:
    turn, _, vec = raw.partition(b"|")
    if not vec:
        return Recalled(int(turn), None)
    v = np.frombuffer(vec, dtype=np.int8).astype(np.float32)
    n = float(np.linalg.norm(v))
    return Recalled(int(turn), v / n if n else None)


class Sessions:
    """Every Redis read and write of recall sessions (one hash per session)."""

    def __init__(self, client: aioredis.Redis, guard: Guard) -> None:
        self.client = client
        self._guard = guard

    async def turn(
        self, ns: str, session_id: str, turn: int | None, ttl_s: int, last: int
    ) -> tuple[int, dict[str, Recalled]]:
        """Advance the session to its next turn (or to `turn`, if given and later than the
        count); the turn, and for each memory recalled in the session when that was and its
        vector. A turn past `last` is returned but not stored (the caller refuses it). The
        caller holds the session's lock."""
        key = keys.session_key(ns, session_id)
        async with self._guard():
            raw = await self.client.hgetall(key)
            count = int(raw.pop(_TURN.encode(), 0))
            state = {
                text(k): _recalled(v if isinstance(v, bytes) else v.encode())
                for k, v in raw.items()
            }
            now_turn = count + 1 if turn is None else turn
            if now_turn > last:
                return now_turn, state
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key, _TURN, max(count, now_turn))
            pipe.expire(key, ttl_s)
            await pipe.execute()
        return now_turn, state

    async def count(self, ns: str, session_id: str) -> int:
        """The session's last turn (0 for a new or expired session)."""
        async with self._guard():
            raw = await self.client.hget(keys.session_key(ns, session_id), _TURN)
        return int(raw) if raw else 0

    async def recalled(
        self,
        ns: str,
        session_id: str,
        turn: int,
        given: dict[str, np.ndarray | None],
        stale: list[str],
        ttl_s: int,
    ) -> None:
        """Record that the `given` memories (id -> unit vector, if known) were recalled in
        `turn`, and forget `stale` ones."""
        key = keys.session_key(ns, session_id)
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            if given:
                pipe.hset(key, mapping={mid: _recall_entry(turn, v) for mid, v in given.items()})
            if stale:
                pipe.hdel(key, *stale)
            pipe.expire(key, ttl_s)
            await pipe.execute()
