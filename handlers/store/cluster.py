"""Running on a Redis Cluster: what differs from one server, in one place.

Every key of a namespace carries its hash tag (`keys.ns_prefix`), so redis-py's
`RedisCluster` sends each of its commands and Lua scripts to the node of its slot, and
follows MOVED and ASK while slots move. RediSearch declares an index's name as the key of
its FT.* commands, so an FT.* command goes to the node of the name's slot:
- a namespace's own index is named with its tag (`keys.index_name`): the node that holds
  its memories;
- a pool index covers the pooled namespaces of one node, so its name carries a tag whose
  slot that node owns (`node_tag`): each node has its own copy of a pool, over the pooled
  namespaces it holds.
Without a coordinator (RediSearch 2.10) an index covers the keys of its node only; when a
slot moves, the index is missing on its new node, and the query that finds it missing
makes it there (it then indexes the memories that arrived). Redis 8's coordinator creates
an index on every node and fans a query out; the names route the same way there."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

# Tags tried, in order, for a node's pool indexes (`node_tag`): enough that every node of
# a cluster owns the slot of one of them.
_TAGS = 4096


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def node_tag(client: Any, key: str) -> str:
    """The hash tag of the pool indexes on the node that owns `key`'s slot: the first of
    `p0`, `p1`, ... whose slot that node owns ("" on a single server: no tag)."""
    if not is_cluster(client):
        return ""
    node = client.get_node_from_key(key)
    for i in range(_TAGS):
        tag = f"p{i}"
        if client.get_node_from_key(tag) is node:
            return tag
    raise RuntimeError(f"no pool tag maps to the Redis node {node.name}")


async def is_cluster_url(url: str) -> bool:
    """Whether the Redis server at `url` is a node of a Redis Cluster."""
    probe = aioredis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=5.0)
    try:
        info = await probe.info("cluster")
    finally:
        await probe.aclose()
    return bool(int(info.get("cluster_enabled", 0)))


def slot_of(key: str) -> int:
    return int(key_slot(key.encode()))
