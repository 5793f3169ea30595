"""Load shedding: how many requests a handler runs at once, how many may wait, and for how
long, so that overload is answered `unavailable` ("busy") instead of a caller's timeout."""

from __future__ import annotations

import asyncio


class Admission:
    """Slots for running requests, and a bounded, time-limited wait for one.

    A request that finds no free slot waits at most `wait_s`, and only while fewer than
    `max_waiting` others wait; otherwise it is refused at once. Waiters are served in
    arrival order (asyncio.Semaphore is fair), so none waits behind later ones.
    """

    def __init__(self, max_inflight: int, max_waiting: int, wait_s: float) -> None:
        self.max_inflight = max_inflight
        self.max_waiting = max_waiting
        self.wait_s = wait_s
        self._slots = asyncio.Semaphore(max_inflight)
        self.running = 0
        self.waiting = 0
        self.refused = 0

    async def enter(self) -> bool:
        """Take a slot (True), or give up (False): the caller must then answer "busy"."""
        if not self._slots.locked():
            await self._slots.acquire()  # free now: returns without yielding
            self.running += 1
            return True
        if self.waiting >= self.max_waiting or self.wait_s <= 0:
            self.refused += 1
            return False
        self.waiting += 1
        try:
            async with asyncio.timeout(self.wait_s):
                await self._slots.acquire()
            self.running += 1
            return True
        except TimeoutError:
            self.refused += 1
            return False
        finally:
            self.waiting -= 1

    def leave(self) -> None:
        self.running -= 1
        self._slots.release()
