"""The parts of nats.micro this service reaches past its public API, kept in this one module.

nats-py is pinned to a tested range in pyproject.toml, so an upgrade that moves these breaks
here, and the tests say so. Why each is needed:

- Error stats: micro counts an error only when an endpoint handler raises, and then replies
  `repr(error)`. Handlers reply with the protocol's JSON error body instead, so they add
  their errors to micro's counters themselves, and `$SRV.STATS` still shows them.
- Draining: `Service.stop()` unsubscribes the endpoints, which discards requests already
  queued in the client; draining each endpoint subscription first serves them.
- Reply subjects: micro's `Request` does not say whether the sender waits for a reply.
"""

from __future__ import annotations

from typing import Protocol, cast

import structlog
from nats.micro.request import Request
from nats.micro.service import Service

log = structlog.get_logger("membus.service")


def wants_reply(req: Request) -> bool:
    return bool(req._msg.reply)


class _ErrorCounters(Protocol):
    """A micro `Endpoint`'s error counters as micro uses them: it stores `repr(error)` in
    `_last_error` and reports it as `EndpointStats.last_error` (`str | None`), but its
    `__init__` sets it to a bare None, so a type checker reads it as always None."""

    _num_errors: int
    _last_error: str | None


class ErrorStats:
    """Counts errors that handlers answered themselves in micro's endpoint stats."""

    def __init__(self, service: Service) -> None:
        self._endpoints: dict[str, _ErrorCounters] = {
            ep._name: cast(_ErrorCounters, ep) for ep in service._endpoints
        }

    def count(self, op: str, status: str, code: str) -> None:
        ep = self._endpoints.get(op)
        if ep is not None:
            ep._num_errors += 1
            ep._last_error = f"{status}:{code}"


async def stop_taking_requests(service: Service) -> None:
    """Stop receiving requests but serve those this replica already received."""
    for ep in service._endpoints:
        if ep._subscription is not None:
            try:
                await ep._subscription.drain()
            except Exception:  # a closed connection has nothing left to drain
                log.warning("endpoint.drain_failed", endpoint=ep._name, exc_info=True)
    # The endpoints are drained; stop() then only ends the $SRV (ping/info/stats) subjects.
    service._endpoints = []
    await service.stop()
