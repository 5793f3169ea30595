"""Running on a Redis Cluster: what differs from one server, in one place.

Every key of a namespace carries a hash tag (`keys.ns_prefix`), so redis-py's
`RedisCluster` sends each of its commands and Lua scripts to the node of its slot, and
follows MOVED and ASK while slots move. RediSearch declares an index's name as the key of
its FT.* commands, so an FT.* command goes to the node of the name's slot; and it reads a
document's fields only when the document's key is in that same slot (a field of another
slot's key comes back empty, even on one node). So on a cluster:
- a namespace's own index is named with its tag (`placement.index_name`): the node and slot of
  its memories;
- a namespace born pooled keeps all its keys under its pool's tag (`keys.Pooled`), and the
  pool index is named with that tag: a pool lives in one slot. New pooled namespaces go
  round `placement.OPEN_POOLS` pools, so the first ones spread over as many slots. Where a
  namespace's keys live is decided by its first user and kept in `placement.home_key`
  (`Indexes.locate`); one that outgrows its pool gets an index of its own in that slot.
Without a coordinator (RediSearch 2.10) an index covers the keys of its node only; when a
slot moves, the index is missing on its new node, and the query that finds it missing
makes it there (it then indexes the memories that arrived). Redis 8's coordinator creates
an index on every node and fans a query out; the names route the same way there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection

from handlers.store import keys
from handlers.store.packing import packed


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


class Cluster(RedisCluster):
    """redis-py's cluster client, one command at a time.

    redis-py 8.1's async cluster client mishandles connections under concurrent commands:
    measured with bursts of 32 concurrent adds on 3 primaries, connections closed under
    requests in flight ("Connection closed by server", then the writer set to None), each
    failure making it drop the node's other idle connections, some in use, in a cascade;
    and a command failing that way had sometimes run (an add was found applied on its
    resend). One command at a time (pipelines aside), the same bursts ran with no
    failure. A handler's throughput on a cluster is then about one Redis round trip per
    command: run more handlers. Failures left are `unavailable` (store.failures)."""

    # Made on first use, inside the event loop that runs the commands.
    _one: asyncio.Lock | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Pack commands in C (`packing`): the nodes found later are made with these
        # arguments, the start-up nodes already were.
        kwargs_ = self.nodes_manager.connection_kwargs
        kwargs_["connection_class"] = packed(kwargs_.get("connection_class", Connection))
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_class = packed(node.connection_class)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._one is None:
            self._one = asyncio.Lock()
        async with self._one:
            return await super().execute_command(*args, **kwargs)


async def is_cluster_url(url: str) -> bool:
    """Whether the Redis server at `url` is a node of a Redis Cluster."""
    probe = aioredis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=5.0)
    try:
        info = await probe.info("cluster")
    finally:
        await probe.aclose()
    return bool(int(info.get("cluster_enabled", 0)))


async def scan_iter(client: Any, ns: str, match: str, count: int = 1000) -> AsyncIterator[Any]:
    """Every key of the namespace matching `match` (which starts with its prefix), on the
    node of its slot on a cluster."""
    cursor = 0
    while True:
        cursor, found = await scan(client, ns, cursor, match, count)
        for key in found:
            yield key
        if cursor == 0:
            return


async def scan(client: Any, ns: str, cursor: int, match: str, count: int) -> tuple[int, list[Any]]:
    """One SCAN step over the namespace's keys: on a cluster, on the node of its slot (a
    cluster client's SCAN would walk every node, with a cursor per node)."""
    if not is_cluster(client):
        found_cursor, found = await client.scan(cursor, match=match, count=count)
        return int(found_cursor), found
    node = client.get_node_from_key(keys.ns_prefix(ns))
    cursors, found = await client.scan(cursor, match=match, count=count, target_nodes=node)
    return int(next(iter(cursors.values()))), found


async def batches(keys: AsyncIterator[Any], size: int = 500) -> AsyncIterator[list[Any]]:
    """The items of an async iterator (a SCAN), `size` at a time."""
    batch: list[Any] = []
    async for key in keys:
        batch.append(key)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
