"""Recall sessions: per session, its turn count and the turn each memory was last given in.

A session keeps turns only: later turns read the vectors of what they compare with from the
memories themselves. (An 8-bit copy of each vector kept here cost about 400 bytes per memory
given, per session, for the session's TTL: in a soak, sessions held more of Redis than the
memories did.)"""

from __future__ import annotations

import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.failures import Guard
from handlers.store.resp import text


# The turn counter's field in a session hash (memory ids, the other fields, are never this).
def session_key(ns: str, session_id: str) -> str:
    """A session's recall state: its turn counter (`turn`) and, per memory id, the turn it
    was last recalled in. Any handler serves any turn; the key's TTL slides with each turn."""
    return keys.ns_prefix(ns) + f"sess:{session_id}"


_TURN = "turn"


def _turn_of(raw: bytes) -> int:
    return int(raw)


class Sessions:
    """Every Redis read and write of recall sessions (one hash per session)."""

    def __init__(self, client: aioredis.Redis, guard: Guard) -> None:
        self.client = client
        self._guard = guard

    async def turn(
        self, ns: str, session_id: str, turn: int | None, ttl_s: int, last: int
    ) -> tuple[int, dict[str, int]]:
        """Advance the session to its next turn (or to `turn`, if given and later than the
        count); the turn, and for each memory recalled in the session the turn it was. A turn
        past `last` is returned but not stored (the caller refuses it). The caller holds the
        session's lock."""
        key = session_key(ns, session_id)
        async with self._guard():
            raw = await self.client.hgetall(key)
            count = int(raw.pop(_TURN.encode(), 0))
            state = {
                text(k): _turn_of(v if isinstance(v, bytes) else v.encode()) for k, v in raw.items()
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
            raw = await self.client.hget(session_key(ns, session_id), _TURN)
        return int(raw) if raw else 0

    async def recalled(
        self,
        ns: str,
        session_id: str,
        turn: int,
        given: list[str],
        stale: list[str],
        ttl_s: int,
    ) -> None:
        """Record that the `given` memories were recalled in `turn`, and forget `stale`
        ones."""
        key = session_key(ns, session_id)
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            if given:
                pipe.hset(key, mapping=dict.fromkeys(given, turn))
            if stale:
                pipe.hdel(key, *stale)
            pipe.expire(key, ttl_s)
            await pipe.execute()
