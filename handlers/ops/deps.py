"""What every operation is given: `Deps`, built once per handler process by the wiring, and
the caller's `Access` (its trust, from the subject) set on it per request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.trace import Tracer

from contracts.subjects import DEFAULT_STORE, FULL_TRUST, TRUST_LEVELS, VISIBLE_STORES
from handlers.embed import Embedder
from handlers.settings import Settings
from handlers.store.store import Store
from handlers.streams import Streams

if TYPE_CHECKING:  # prometheus-client is in the `observability` extra
    from handlers.metrics import Metrics
    from handlers.ops.rerank import SecondOpinion

Publish = Callable[[str, bytes], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Access:
    """What a caller of one trust level sees and where its writes go."""

    trust: str
    visible: tuple[str, ...]
    default_store: str | None

    @property
    def stores(self) -> tuple[str, ...] | None:
        """The stores a read is cut to; None for full trust, which sees them all."""
        return None if self.trust == FULL_TRUST else self.visible

    def sees(self, store: str) -> bool:
        return store in self.visible


@dataclass(frozen=True, slots=True)
class DurableWrite:
    """A write taken from the JetStream stream: its `Nats-Msg-Id` (which the events it
    causes carry), when it was published, and its place in the stream: (when the stream was
    created, in µs, and its sequence there), so that writes of a stream made anew come after
    those of the one before."""

    request_id: str
    published_ms: int
    position: tuple[int, int] = (0, 0)


ACCESS = {t: Access(t, VISIBLE_STORES[t], DEFAULT_STORE[t]) for t in TRUST_LEVELS}


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
    # The caller's trust; dispatch sets it per request (dataclasses.replace) below full.
    access: Access = ACCESS[FULL_TRUST]
    # Set for a durable write (from JetStream), else None.
    write: DurableWrite | None = None
    # The bus's JetStream streams, which an erasure scrubs; None where the handler has no
    # NATS connection of its own (some tests).
    streams: Streams | None = None
    # The handler's Prometheus metrics and the tracer of its request spans; None when off
    # (MEMBUS_METRICS_PORT, OTEL_*), so that they then cost nothing. Only dispatch uses them.
    metrics: Metrics | None = None
    tracer: Tracer | None = None
    # The search's second opinion (MEMBUS_RERANK); None when off or its extra is missing.
    reranker: SecondOpinion | None = None
