"""Events as they happen: `bus.subscribe(...)` or `mem.subscribe(...)` give an
`EventStream`, an async iterator of the contract's `Event`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

from bus.errors import BusTimeout
from contracts.messages import Event

_event_decoder = msgspec.json.Decoder(Event)


class EventStream:
    """An async iterator of `Event`s; close it (or use `async with`) to unsubscribe."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub
        self.subject: str = sub.subject

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        async for msg in self._sub.messages:
            yield decode_event(msg)

    async def next(self, timeout: float = 5.0) -> Event:
        try:
            msg = await self._sub.next_msg(timeout=timeout)
        except NatsTimeoutError:
            raise BusTimeout(f"No event on {self.subject} within {timeout}s") from None
        return decode_event(msg)

    async def close(self) -> None:
        await self._sub.unsubscribe()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def decode_event(msg: Msg) -> Event:
    return _event_decoder.decode(msg.data)
