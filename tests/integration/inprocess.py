"""A stand-in for the NATS client under `MemoryBus`: requests run `dispatch()` in this process.

The SDK calls `request()` for operations; that is answered here exactly as a handler
answers it (reply body, and the micro error headers on an error), so the same tests hold
through either path. A `publish()` to an operation's subject runs it too, its reply
dropped, as a handler does with a request that has no reply subject. Everything else
(subscribe, other publishes, inboxes) goes to a real connection.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER

from contracts.operations import OPERATIONS
from contracts.subjects import parse_request_subject
from handlers.dispatch import dispatch
from handlers.ops import Deps


class InProcess:
    def __init__(self, nc: NatsClient, deps: Deps) -> None:
        self.nc = nc
        self.deps = deps

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float = 0.5,
        headers: dict[str, str] | None = None,
        **_: Any,
    ) -> Msg:
        parsed = parse_request_subject(subject)
        if parsed is None or parsed[1] not in OPERATIONS:
            raise NoRespondersError  # no handler subscribes to that subject
        # The headers carry the SDK's trace context, as they would through NATS.
        body, error = await dispatch(parsed[1], subject, payload, self.deps, headers=headers)
        # A handler counts accesses after its reply (Store.touch_later), and the reply's
        # trip through NATS gives that time to land before the caller's next request; here
        # the reply comes back at once, so wait for it.
        await self.deps.store.settle()
        headers = None
        if error is not None:
            headers = {ERROR_HEADER: error.message, ERROR_CODE_HEADER: error.status}
        return Msg(_client=self.nc, subject=subject, data=body, headers=headers)

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        parsed = parse_request_subject(subject)
        if parsed is None or parsed[1] not in OPERATIONS or reply:
            await self.nc.publish(subject, payload, reply=reply, headers=headers)
            return
        await dispatch(parsed[1], subject, payload, self.deps, headers=headers)
        await self.deps.store.settle()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.nc, name)


# A fixed instant for tests that set the clock (`Clock`): 2026-09-21.
T0 = 1_790_000_000_000


class Clock:
    """A settable clock for `Deps.clock` (ms), starting at T0."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now
