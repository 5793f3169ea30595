"""How Redis failures reach callers: a lost connection, or a Redis still loading its data
after a restart, becomes `unavailable` (safe to retry), and a vanished index is told apart
from other query errors."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

import redis.exceptions
import structlog
from redisvl.exceptions import RedisSearchError

from handlers.errors import Unavailable

# What a store part runs each Redis call in: Store._guard, which maps failures (redis_errors).
Guard = Callable[[], contextlib.AbstractAsyncContextManager[None]]
# Runs a write script that answers `unset` (writing nothing) when Redis lost the namespace,
# after setting the namespace up anew (Store.write_with_setup).
WriteWithSetup = Callable[[str, Callable[[], Awaitable[Any]], object], Awaitable[Any]]

log = structlog.get_logger("membus.store")

# Set in the task that migrates Redis to the current layout (`layout`): its own Redis calls
# pass the store's wait for the layout.
MIGRATING: ContextVar[bool] = ContextVar("membus_migrating", default=False)


# A Redis Cluster between a node's failure and its replica's promotion, or while a slot
# moves: the same request succeeds once the cluster has settled.
_CLUSTER_SETTLING = (
    redis.exceptions.ClusterDownError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
    redis.exceptions.SlotNotCoveredError,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """A failure and what caused it, outermost first (wrappers such as redisvl's hide the
    Redis error below)."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def is_connection_error(exc: BaseException) -> bool:
    for seen in _chain(exc):
        if isinstance(seen, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return True
        if isinstance(seen, (OSError, ConnectionError, *_CLUSTER_SETTLING)):
            return True
        if isinstance(seen, AttributeError) and _inside_redis_py(seen):
            # redis-py's cluster client, writing to a connection that its node's failure
            # just tore down, trips over the writer it set to None.
            return True
    return False


def _inside_redis_py(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "/redis/" in tb.tb_frame.f_code.co_filename


def is_missing_index(exc: BaseException) -> bool:
    # RediSearch reports a missing index as an ordinary error whose wording varies by
    # version, so matching the message is the only way to tell it apart.
    text = str(exc).lower()
    return "no such index" in text or "unknown index" in text or "not found" in text


# What redis-py's BlockingConnectionPool raises when no connection frees up in time.
_POOL_EXHAUSTED = "No connection available."


def is_pool_exhausted(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.ConnectionError) and str(exc) == _POOL_EXHAUSTED


def redis_error_kind(exc: BaseException) -> str | None:
    """What kind of Redis error (connection, timeout, pool_exhausted, response) caused a
    failure, for the handler's metrics; None when no Redis error is in its chain."""
    found: str | None = None
    for seen in _chain(exc):
        if is_pool_exhausted(seen):
            return "pool_exhausted"
        if isinstance(seen, redis.exceptions.TimeoutError):
            return "timeout"
        if isinstance(seen, redis.exceptions.ConnectionError):
            return "connection"
        if found is None and isinstance(seen, redis.exceptions.RedisError | RedisSearchError):
            found = "response"  # unless a wrapper (redisvl's) hides a lost connection below
    return found


# What a caller is told while Redis loads its data set from disk (after a restart: it
# listens at once, and answers LOADING to every command until it has read it all: 22 s for
# 30,000 memories, 50 MB of append-only file, on 2 CPUs).
LOADING = (
    "The memory store (Redis) is loading its data from disk after a restart and did not run"
    " this request; retry in a few seconds: it serves again, by itself, once loaded."
)


def is_loading(exc: BaseException) -> bool:
    """Whether Redis refused a command because it is still loading its data set (LOADING:
    redis-py's BusyLoadingError, a ConnectionError), anywhere in the failure's chain."""
    return any(isinstance(seen, redis.exceptions.BusyLoadingError) for seen in _chain(exc))


# A primary that refuses writes until enough replicas are linked (its min-replicas-to-write:
# NOREPLICAS), or a server that was made a replica (READONLY).
REFUSED_FOR_NOW = (
    "The memory store (Redis) refused the write: its primary has too few replicas linked, or"
    " is a replica now (a failover or a network split); retry shortly: it accepts writes"
    " again once a replica is back or the failover is over."
)


def is_refused_for_now(exc: BaseException) -> bool:
    """Whether Redis refused a write for want of replicas or for being a replica now (in
    a script's error too, where the reply names the first error of the command inside)."""
    for seen in _chain(exc):
        if isinstance(seen, redis.exceptions.ReadOnlyError):
            return True
        if isinstance(seen, redis.exceptions.ResponseError) and (
            "NOREPLICAS" in str(seen) or str(seen).startswith("READONLY")
        ):
            return True
    return False


def as_unavailable(exc: BaseException) -> Unavailable | None:
    """What a Redis failure means to the caller: `unavailable` (safe to retry) when this
    handler has every connection busy, or Redis cannot be reached or is still loading its
    data, or refuses writes for now (too few replicas), whatever raised it; None for any
    other error."""
    if is_pool_exhausted(exc):
        # Redis is fine; this handler has every connection busy.
        log.warning("redis.pool_exhausted")
        return Unavailable(
            "The memory service is busy (every store connection of this handler is in"
            " use) and did not finish this request; retry in a moment with backoff."
        )
    if is_loading(exc):
        log.warning("redis.loading", error=str(exc))
        return Unavailable(LOADING)
    if is_refused_for_now(exc):
        log.warning("redis.refused_for_now", error=str(exc))
        return Unavailable(REFUSED_FOR_NOW)
    if is_connection_error(exc):
        log.warning("redis.unreachable", error=repr(exc))
        return Unavailable("The memory store (Redis) is unreachable right now; retry shortly.")
    return None


@contextlib.asynccontextmanager
async def redis_errors(on_lost: Callable[[], None] | None = None) -> AsyncIterator[None]:
    """Turn 'Redis is down' into `unavailable`, so clients know a retry is safe."""
    try:
        yield
    except (
        redis.exceptions.RedisError,
        redis.exceptions.RedisClusterException,
        RedisSearchError,
        OSError,
        AttributeError,
    ) as exc:
        lost = as_unavailable(exc)
        if lost is None:
            raise
        if on_lost is not None and not is_pool_exhausted(exc):
            on_lost()
        raise lost from exc
