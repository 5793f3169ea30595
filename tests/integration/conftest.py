"""Session-scoped real servers and handlers for the integration tests.

Servers come from, in order: `MEMBUS_NATS_URL` + `MEMBUS_REDIS_URL` when both are set;
testcontainers when a Docker engine answers (official `nats` and `redis/redis-stack-server`
images); otherwise the embedded servers from PyPI packages. `MEMBUS_TEST_SERVERS=env|docker|
embedded` forces one. Every test gets a fresh namespace, so tests never see each other's data.

A test's `bus` reaches the operations one of two ways (its `transport`):
- "in_process" (the default): the SDK's requests call `dispatch()` in this process, against
  the session's real Redis, so a failure shows its traceback; events still go out on NATS.
- "nats": through NATS to two handler processes, for wiring, events, scaling and faults.
- "cluster": in process as "in_process", but against a Redis Cluster of 3 primaries (its
  own embedded servers, started once for the session), as a handler given a cluster node.
A module or test marked `@pytest.mark.transports("in_process", "nats", "cluster")` runs once
each way.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from inprocess import InProcess
from nats.aio.client import Client as NatsClient

from bus import AgentMemory, MemoryBus
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.service import make_deps, make_embedder, open_redis, redis_client
from handlers.settings import load_settings
from handlers.store.cluster import is_cluster
from handlers.streams import Streams

HANDLERS = 2
LOG_DIR = Path(os.environ.get("MEMBUS_TEST_LOG_DIR", ".membus/test-logs"))


@dataclass
class Servers:
    nats_url: str
    redis_url: str
    kind: str


def _docker_answers() -> bool:
    """A raw `/_ping` on the engine's socket: the docker SDK leaks its socket on failure."""
    import socket

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: object = host.removeprefix("unix://")
        elif host.startswith("tcp://"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            h, _, p = host.removeprefix("tcp://").partition(":")
            target = (h, int(p or 2375))
        else:
            return False
    except OSError:
        return False
    with sock:
        sock.settimeout(2)
        try:
            sock.connect(target)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256)
        except OSError:
            return False


@contextlib.contextmanager
def _containers() -> Iterator[Servers]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with (
        DockerContainer("nats:2.10").with_command("-js").with_exposed_ports(4222) as n,
        DockerContainer("redis/redis-stack-server:7.2.0-v13").with_exposed_ports(6379) as r,
    ):
        wait_for_logs(n, "Server is ready")
        wait_for_logs(r, "Ready to accept connections")
        yield Servers(
            nats_url=f"nats://{n.get_container_host_ip()}:{n.get_exposed_port(4222)}",
            redis_url=f"redis://{r.get_container_host_ip()}:{r.get_exposed_port(6379)}/0",
            kind="docker",
        )


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    choice = os.environ.get("MEMBUS_TEST_SERVERS", "")
    env_nats, env_redis = os.environ.get("MEMBUS_NATS_URL"), os.environ.get("MEMBUS_REDIS_URL")
    if choice == "env" or (not choice and env_nats and env_redis):
        assert env_nats and env_redis, "MEMBUS_TEST_SERVERS=env needs both MEMBUS_*_URL"
        yield Servers(env_nats, env_redis, "env")
    elif choice == "docker" or (not choice and _docker_answers()):
        with _containers() as found:
            yield found
    else:
        stack = EmbeddedStack.temporary()
        stack.log_dir = LOG_DIR / "servers"
        stack.start_servers()
        try:
            yield Servers(stack.nats_url, stack.redis_url, "embedded")
        finally:
            stack.stop()


@pytest.fixture(scope="session")
async def handlers(servers: Servers) -> AsyncIterator[EmbeddedStack]:
    """Two handler processes (hash embedder) serving every test's namespace."""
    stack = EmbeddedStack(
        data_dir=LOG_DIR,
        log_dir=LOG_DIR / "handlers",
        external_nats_url=servers.nats_url,
        external_redis_url=servers.redis_url,
    )
    procs = stack.start_handlers(HANDLERS, {"MEMBUS_EMBEDDER": "hash"})
    try:
        await wait_for_handlers(servers.nats_url, HANDLERS, procs, timeout=60)
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def ns() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def nc(servers: Servers) -> AsyncIterator[NatsClient]:
    client = await nats.connect(servers.nats_url)
    yield client
    await client.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("transports")
    if marker is not None and "transport" in metafunc.fixturenames:
        metafunc.parametrize("transport", marker.args)


@pytest.fixture
def transport() -> str:
    """How this test's `bus` reaches the operations (see the module docstring): in process,
    or on the Redis Cluster with `MEMBUS_TEST_TRANSPORT=cluster`."""
    return os.environ.get("MEMBUS_TEST_TRANSPORT", "in_process")


@contextlib.asynccontextmanager
async def handler_here(
    nats_url: str, redis_url: str, client: Any, env: dict[str, str] | None = None
) -> AsyncIterator[InProcess]:
    """The operations of a handler (hash embedder, as the handler processes) in this
    process, on `client`; their events go out on `nats_url`, where the tests listen. `env`:
    more of its settings."""
    settings = load_settings(
        {"MEMBUS_EMBEDDER": "hash", "MEMBUS_REDIS_URL": redis_url, **(env or {})}
    )
    events = await nats.connect(nats_url)
    embedder = make_embedder(settings, client)
    deps = make_deps(
        settings,
        client,
        embedder,
        events.publish,
        events.max_payload,
        streams=Streams(events.jetstream()),
    )
    try:
        yield InProcess(events, deps)
    finally:
        await events.drain()
        await embedder.close()
        await deps.store.replicas.aclose()
        await client.aclose()


@pytest.fixture(scope="session")
async def in_process(servers: Servers) -> AsyncIterator[InProcess]:
    """A handler in this process on the session's Redis."""
    async with handler_here(
        servers.nats_url, servers.redis_url, redis_client(servers.redis_url)
    ) as here:
        yield here


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedStack]:
    """A Redis Cluster of 3 primaries (no replicas: the failover tests have their own)."""
    stack = EmbeddedStack.temporary()
    stack.redis_primaries = 3
    stack.redis_cluster_replicas = False
    stack.log_dir = LOG_DIR / "cluster"
    stack.start_servers()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
async def on_cluster(servers: Servers, redis_cluster: EmbeddedStack) -> AsyncIterator[InProcess]:
    """The operations of a handler in this process, on the Redis Cluster (events still go
    out on the session's NATS, where the tests listen)."""
    url = redis_cluster.redis_url
    client, known = await open_redis(url)
    assert known and is_cluster(client)
    async with handler_here(servers.nats_url, url, client) as here:
        yield here


@pytest.fixture
def bus_client(transport: str, request: pytest.FixtureRequest) -> InProcess | None:
    """The NATS client stand-in of an in-process `bus`; None (a real client) over NATS."""
    if transport == "nats":
        request.getfixturevalue("handlers")
        return None
    if transport == "cluster":
        return request.getfixturevalue("on_cluster")
    assert transport == "in_process", f"unknown transport {transport!r}"
    return request.getfixturevalue("in_process")


@pytest.fixture
async def bus(bus_client: InProcess | None, servers: Servers, ns: str) -> AsyncIterator[MemoryBus]:
    if bus_client is None:
        b = await MemoryBus.connect(servers.nats_url, namespace=ns)
    else:
        b = await MemoryBus.connect(namespace=ns, nc=bus_client)  # type: ignore[arg-type]
    yield b
    await b.close()


@pytest.fixture
async def key_ns(ns: str, bus_client: InProcess | None) -> str:
    """The test's namespace as its Redis keys name it (`Store.locate`): on the cluster, a
    pooled one carries its pool's hash tag. For tests that read keys directly."""
    if bus_client is None:
        return ns
    return await bus_client.deps.store.locate(ns)


@pytest.fixture
async def rds(
    servers: Servers, transport: str, request: pytest.FixtureRequest
) -> AsyncIterator[aioredis.Redis]:
    """A client of the Redis the test's `bus` writes to (the cluster's, for "cluster")."""
    if transport == "cluster":
        client, _ = await open_redis(request.getfixturevalue("redis_cluster").redis_url)
    else:
        client = aioredis.Redis.from_url(servers.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def wf123(bus: MemoryBus) -> AgentMemory:
    return bus.agent(workflow_id="wf_123", agent_id="researcher")


@pytest.fixture
def wf456(bus: MemoryBus) -> AgentMemory:
    return bus.agent(workflow_id="wf_456", agent_id="writer")
