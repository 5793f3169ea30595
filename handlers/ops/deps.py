"""What every operation is given: `Deps`, built once per handler process by the wiring."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from handlers.embed import Embedder
from handlers.settings import Settings
from handlers.store.store import Store

Publish = Callable[[str, bytes], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Deps:
    settings: Settings
    store: Store
    embedder: Embedder
    # Sends an event (subject, body); NATS publish in the service.
    publish: Publish
    # Now, in epoch ms (tests pass a clock they control).
    clock: Callable[[], int]
    # The NATS server's max payload: no reply may be larger.
    max_payload: int
