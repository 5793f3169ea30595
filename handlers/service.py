"""Wiring only: connect to NATS and Redis, build `Deps` once, serve the `memory` micro service,
and drain in-flight requests on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import nats
import redis.asyncio as aioredis
import redis.exceptions
import structlog
from nats.micro import add_service
from nats.micro.request import Request as MicroRequest
from nats.micro.service import Service
from opentelemetry.trace import Tracer, TracerProvider
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from contracts.operations import OPERATIONS
from contracts.subjects import QUEUE_GROUP, SERVICE_NAME, endpoint_subject, nats_servers
from handlers import __version__
from handlers.admission import Admission
from handlers.dispatch import dispatch, error_body, shed
from handlers.durable import DurableWriteConsumer
from handlers.embed import Embedder, build_embedder
from handlers.embed.cache import cached
from handlers.embed.timed import TimedEmbedder
from handlers.errors import Busy
from handlers.logs import configure_logging
from handlers.micro import ErrorStats, stop_taking_requests, wants_reply
from handlers.ops.clock import now_ms
from handlers.ops.deps import Deps, Publish
from handlers.ops.rerank import make_reranker
from handlers.settings import Settings, SettingsError, load_settings
from handlers.store import layout
from handlers.store.cluster import Cluster, is_cluster_url
from handlers.store.failures import is_connection_error, is_loading
from handlers.store.keys import EMBED_CACHE
from handlers.store.packing import packed
from handlers.store.store import Store
from handlers.streams import Streams
from handlers.tracing import (
    EXTRA_HINT,
    configure_tracing,
    handler_tracer,
    instrument_redis,
    untraced,
)

if TYPE_CHECKING:  # prometheus-client is in the `observability` extra
    from handlers.metrics import Metrics
    from handlers.probes import ProbeServer

log = structlog.get_logger("membus.service")


def redis_client(url: str, max_connections: int = 144) -> aioredis.Redis:
    # Fail fast while Redis is down (callers get `unavailable`), reconnect on the next call.
    # The retry must be redis.asyncio's: the asyncio connection ignores redis.retry's. It
    # makes a pooled connection that died with a Redis restart reconnect and retry once,
    # instead of failing one request per idle connection.
    # A blocking pool makes bursts wait for a free connection (briefly: a request that
    # cannot get one is answered "busy", see store.failures) instead of failing.
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=2.0,
        socket_connect_timeout=1.0,
        socket_timeout=5.0,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=1),
    )
    pool.connection_class = packed(pool.connection_class)
    # from_pool: closing the client also closes the pool's connections.
    return aioredis.Redis.from_pool(pool)


async def open_redis(url: str, max_connections: int = 144) -> tuple[Any, bool]:
    """A client for the Redis at `url`, and whether its kind is known: a `RedisCluster`
    when that server is a node of a Redis Cluster (it finds the others, and routes each
    namespace's commands to the node of its slot: see `store.cluster`), else
    `redis_client`. While Redis does not answer, a `redis_client`, not known to be right
    (see `_keep_layout`)."""
    try:
        cluster = await is_cluster_url(url)
    except (redis.exceptions.RedisError, OSError) as exc:
        log.warning("redis.unreachable_at_start", error=str(exc))
        return redis_client(url, max_connections), False
    if not cluster:
        return redis_client(url, max_connections), True
    client = Cluster.from_url(
        url,
        # RESP2, as `redis_client`: the cluster client would otherwise speak RESP3, whose
        # FT.SEARCH replies the store does not read the same way.
        protocol=2,
        max_connections=max_connections,
        # A connect timeout makes redis-py drop the node's idle connections (see
        # `cluster.Cluster`): more room than one server's 1 s, for a burst of new ones.
        socket_connect_timeout=5.0,
        socket_timeout=5.0,
    )
    await client.initialize()
    log.info("redis.cluster", nodes=len(client.get_nodes()), primaries=len(client.get_primaries()))
    return client, True


async def _keep_layout(
    deps: Deps, url: str, known: bool, stop: asyncio.Event, restart: asyncio.Event
) -> None:
    """Bring Redis to the current key layout (`layout.ensure`), retrying while Redis is
    down or loading its data; requests wait for it (`Store.layout_ready`). A handler that
    started before Redis answered took it for a single server: if it is a cluster node, it
    stops (`restart`), to be started again by its supervisor, and then connects as a
    cluster client."""
    while not stop.is_set():
        try:
            if not known and await is_cluster_url(url):
                log.error("redis.cluster_found_late", action="restarting the handler")
                restart.set()
                stop.set()
                return
            known = True
            renamed = await layout.ensure(deps.store)
        except Exception as exc:
            # Requests that cannot wait are told why (`Store._after_layout`).
            deps.store.redis_loading = is_loading(exc)
            if deps.store.redis_loading:
                log.warning("layout.redis_loading", error=str(exc))
            elif is_connection_error(exc):
                log.warning("layout.redis_unavailable", error=str(exc))
            else:
                log.exception("layout.failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
            continue
        if renamed:
            log.info("layout.ready", renamed=renamed)
        deps.store.redis_loading = False
        deps.store.layout_ready.set()
        return


class RestartNeeded(Exception):
    """The handler must be started again (by its supervisor) to serve correctly."""


class Handler:
    """Runs operations as tasks so one slow request never holds up the next, and sheds
    what it cannot run in time (see `Admission`)."""

    def __init__(self, deps: Deps, admission: Admission) -> None:
        self.deps = deps
        self.admission = admission
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors: ErrorStats | None = None

    def bind(self, service: Service) -> None:
        self._errors = ErrorStats(service)

    def endpoint(self, op: str, name: str | None = None) -> Any:
        async def on_request(req: MicroRequest) -> None:
            # Never wait here: this callback holds up the subscription's next message.
            task = asyncio.create_task(self._serve(op, req, name or op))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_request

    async def _serve(self, op: str, req: MicroRequest, endpoint: str) -> None:
        received = time.perf_counter()
        if await self.admission.enter():
            try:
                body, error = await dispatch(
                    op, req.subject, req.data, self.deps, headers=req.headers, received=received
                )
            finally:
                self.admission.leave()
        else:
            error = Busy(self.admission.running, self.admission.waiting)
            body = error_body(error)
            log.warning("request.shed", op=op, running=error.running, waiting=error.waiting)
            shed(op, req.subject, self.deps, error, req.headers, received)
        if not wants_reply(req):
            if error is not None:  # a plain publish (a capture): nobody else will hear of it
                log.warning("request.unanswered_error", op=op, code=error.code, error=error.message)
                if self.deps.metrics is not None:
                    self.deps.metrics.unanswered_failure(op, error.code)
            return
        try:
            if error is None:
                await req.respond(body)
            else:
                if self._errors is not None:
                    self._errors.count(endpoint, error.status, error.code)
                await req.respond_error(error.status, error.message, data=body)
        except Exception:
            log.exception("reply.failed", op=op)

    async def drain(self, grace_s: float) -> None:
        if self._tasks:
            log.info("drain.waiting", inflight=len(self._tasks))
            await asyncio.wait(set(self._tasks), timeout=grace_s)


async def _nats_disconnected() -> None:
    log.warning("nats.disconnected")


async def _nats_reconnected() -> None:
    log.info("nats.reconnected")


async def _nats_error(exc: Exception) -> None:
    log.warning("nats.error", error=str(exc))


async def _connect_or_stop(url: str, stop: asyncio.Event) -> nats.NATS | None:
    """Connect to NATS, retrying while it is not up yet; None when asked to stop first."""
    connecting = asyncio.ensure_future(
        nats.connect(
            nats_servers(url),
            name=f"membus-handler-{__version__}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=_nats_error,
            disconnected_cb=_nats_disconnected,
            reconnected_cb=_nats_reconnected,
        )
    )
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if connecting.done():
        return connecting.result()
    connecting.cancel()
    return None


def make_embedder(
    settings: Settings,
    client: aioredis.Redis,
    metrics: Metrics | None = None,
    busy: Callable[[], bool] | None = None,
) -> Embedder:
    embedder: Embedder = build_embedder(
        settings.embedder,
        hash_dimension=settings.hash_dimension,
        openai_base_url=settings.openai_base_url,
        openai_model=settings.openai_model,
        openai_api_key=settings.openai_api_key,
        busy=busy,
    )
    if metrics is not None:
        # Inside the cache: the metrics count the model's work, not cache hits.
        embedder = TimedEmbedder(embedder, metrics.embedder_report(embedder.name))
    if settings.embed_cache and embedder.name != "hash":
        embedder = cached(embedder, EMBED_CACHE, settings.embed_cache_ttl_s, client)
    return embedder


def make_deps(
    settings: Settings,
    client: aioredis.Redis,
    embedder: Embedder,
    publish: Publish,
    max_payload: int,
    metrics: Metrics | None = None,
    tracer: Tracer | None = None,
    streams: Streams | None = None,
) -> Deps:
    """What the operations share, built once per process (tests build theirs with this too)."""
    return Deps(
        settings=settings,
        store=Store(
            client,
            embedder.name,
            embedder.dimension,
            settings.pool_max,
            settings.replicas_required,
        ),
        embedder=embedder,
        publish=publish,
        clock=now_ms,
        max_payload=max_payload,
        metrics=metrics,
        tracer=tracer,
        streams=streams,
        reranker=make_reranker(settings, client),
    )


def make_metrics(settings: Settings) -> Metrics | None:
    """The handler's metrics when MEMBUS_METRICS_PORT is set, else None (off, no cost)."""
    if not settings.metrics_port:
        return None
    try:
        from handlers.metrics import Metrics
    except ImportError:
        raise SettingsError(
            f"MEMBUS_METRICS_PORT={settings.metrics_port} needs prometheus-client:"
            f" {EXTRA_HINT}, or unset it."
        ) from None
    return Metrics()


async def start_probes(
    settings: Settings,
    metrics: Metrics,
    client: aioredis.Redis,
    nats_connected: Callable[[], bool],
) -> ProbeServer:
    """Serve /metrics, /healthz and /readyz on MEMBUS_METRICS_PORT (from before NATS answers,
    so that a handler waiting for NATS is alive but not ready)."""
    from handlers.probes import ProbeServer

    async def ready() -> str | None:
        if not nats_connected():
            return "NATS is not connected"
        try:
            with untraced():  # a probe every few seconds would otherwise be a trace each
                async with asyncio.timeout(1.0):
                    await client.ping()
        except TimeoutError:
            return "Redis did not answer PING within 1 s"
        except Exception as exc:
            return f"Redis did not answer PING: {exc!r}"
        return None

    probes = ProbeServer(metrics.registry, ready)
    try:
        await probes.start(settings.metrics_host, settings.metrics_port)
    except OSError as exc:
        raise SettingsError(
            f"MEMBUS_METRICS_PORT={settings.metrics_port}: cannot listen on"
            f" {settings.metrics_host}:{settings.metrics_port} ({exc.strerror or exc})."
        ) from None
    return probes


async def serve(
    settings: Settings, stop: asyncio.Event, tracer_provider: TracerProvider | None = None
) -> None:
    """Serve until `stop` is set. Traces go to `tracer_provider` (tests give one), else to
    what the OTEL_* variables configure (nowhere when they ask for nothing)."""
    metrics = make_metrics(settings)
    provider = tracer_provider if tracer_provider is not None else configure_tracing()
    # A connection for each running request, and some for locks and index set-up.
    client, known = await open_redis(settings.redis_url, settings.max_inflight + 16)
    if provider is not None:
        instrument_redis(client, provider)
    admission = Admission(settings.max_inflight, settings.max_waiting, settings.queue_wait_s)
    embedder = make_embedder(settings, client, metrics, busy=lambda: admission.running > 1)
    nc: nats.NATS | None = None
    probes: ProbeServer | None = None
    try:
        if metrics is not None:
            probes = await start_probes(
                settings, metrics, client, lambda: nc is not None and nc.is_connected
            )
        nc = await _connect_or_stop(settings.nats_url, stop)
        if nc is None:
            log.info("service.stopped", reason="stopped before NATS answered")
            return
        tracer = handler_tracer(provider) if provider is not None else None
        deps = make_deps(
            settings,
            client,
            embedder,
            nc.publish,
            nc.max_payload,
            metrics,
            tracer,
            Streams(nc.jetstream()),
        )
        deps.store.layout_ready.clear()
        restart = asyncio.Event()
        keeping = asyncio.ensure_future(
            _keep_layout(deps, settings.redis_url, known, stop, restart)
        )
        try:
            await _serve_requests(settings, stop, nc, deps, admission)
        finally:
            keeping.cancel()
            if deps.reranker is not None:
                await deps.reranker.close()  # its cache writes still pending
        if restart.is_set():
            raise RestartNeeded("Redis turned out to be a cluster node: start the handler again")
    finally:
        await embedder.close()
        await client.aclose()
        if probes is not None:
            await probes.close()
        if provider is not None and tracer_provider is None:
            # Sends the spans still batched (in a thread: the exporter blocks).
            await asyncio.to_thread(getattr(provider, "shutdown", lambda: None))


async def _serve_requests(
    settings: Settings, stop: asyncio.Event, nc: nats.NATS, deps: Deps, admission: Admission
) -> None:
    if deps.metrics is not None:
        deps.metrics.watch_admission(lambda: admission.running, lambda: admission.waiting)
    handler = Handler(deps, admission)
    embedder = deps.embedder
    service = await add_service(
        nc,
        name=SERVICE_NAME,
        version=__version__,
        description="memory-bus: shared memory for multi-agent workflows",
        queue_group=QUEUE_GROUP,
        metadata={"embedder": embedder.name, "dimension": str(embedder.dimension)},
    )
    for op in OPERATIONS:
        # `mem.<ns>.<op>` is full trust; `mem.<ns>.<op>.<trust>` the reduced levels.
        await service.add_endpoint(
            name=op, subject=endpoint_subject(op), handler=handler.endpoint(op)
        )
        await service.add_endpoint(
            name=f"{op}-reduced",
            subject=endpoint_subject(op, reduced=True),
            handler=handler.endpoint(op, f"{op}-reduced"),
        )
    handler.bind(service)
    durable = DurableWriteConsumer(nc, deps)
    stop_durable = asyncio.Event()
    pulling = (
        asyncio.ensure_future(durable.run(stop_durable))
        if settings.durable and await durable.start()
        else None
    )
    log.info(
        "service.started",
        id=service.id,
        nats=settings.nats_url,
        embedder=embedder.name,
        dimension=embedder.dimension,
        durable=pulling is not None,
        metrics_port=settings.metrics_port or None,
        tracing=deps.tracer is not None,
    )
    try:
        await stop.wait()
    finally:
        log.info("service.stopping")
        stop_durable.set()
        await stop_taking_requests(service)
        if pulling is not None:
            # The batch in hand is finished and acknowledged; the rest stays in the stream.
            await asyncio.wait({pulling}, timeout=settings.drain_timeout_s)
            await durable.close()
        await handler.drain(settings.drain_timeout_s)
        await deps.store.settle()
        await deps.store.replicas.aclose()
        await nc.drain()
        log.info("service.stopped")


async def migrate(settings: Settings) -> int:
    """Bring the Redis at MEMBUS_REDIS_URL to the current key layout (`layout`), without
    serving: what a handler does first when it starts. How many keys and namespaces it
    changed."""
    client, _ = await open_redis(settings.redis_url)
    try:
        # What a namespace from before metas gets as its own: this deployment's vectors.
        embedder = make_embedder(settings, client)
        store = Store(client, embedder.name, embedder.dimension, settings.pool_max)
        return await layout.ensure(store, again=True)
    finally:
        await client.aclose()


def main() -> None:
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.stderr.write(f"memory-bus handler: {exc}\n")
        raise SystemExit(2) from None
    configure_logging(settings.log_level)
    if sys.argv[1:] == ["migrate"]:
        changed = asyncio.run(migrate(settings))
        sys.stdout.write(
            f"memory-bus: Redis is at key layout {layout.LAYOUT} ({changed} changed)\n"
        )
        return

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    try:
        asyncio.run(run())
    except SettingsError as exc:  # found at start-up: MEMBUS_METRICS_PORT unusable
        sys.stderr.write(f"memory-bus handler: {exc}\n")
        raise SystemExit(2) from None
    except RestartNeeded as exc:
        sys.stderr.write(f"memory-bus handler: {exc}\n")
        raise SystemExit(3) from None
