"""The store's work after the reply: access counts, word counts, promotions, tally
rebuilds. Kept until done (a shutdown awaits it), a failure logged, never raised."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

import structlog

if TYPE_CHECKING:
    from handlers.store.record import Record

log = structlog.get_logger("membus.store")


class Added(Protocol):
    """Told of memories just written (Store.added): their words are counted and, when they
    are `new` memories, their namespace's size checked now and then."""

    def __call__(self, ns: str, written: list[Record], new: bool = True) -> None: ...


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[object]] = set()

    def run(self, work: Coroutine[Any, Any, object], failed: str) -> None:
        """Run `work` in the background (its result unused); a failure is logged as `failed`."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)

        def done(task: asyncio.Future[object]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.warning(failed, error=repr(task.exception()))

        task.add_done_callback(done)

    async def settle(self) -> None:
        """Wait for what is still running (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
