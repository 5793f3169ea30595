"""Waiting for a Redis replica to have a namespace's writes (durable writes use it before
their acknowledgement): on one server, or on the node of a cluster that holds the
namespace."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.cluster import is_cluster

# How long to wait for a replica, and how often to ask a node how many replicas it has.
REPLICA_WAIT_MS = 1000
REPLICAS_CHECK_S = 5.0


class Replicas:
    def __init__(self, client: Any) -> None:
        self.client = client
        # Per node (by name; "" on one server): its replica count and when it was read.
        self._counts: dict[str, tuple[int, float]] = {}
        # On a cluster, a connection of our own to each node (WAIT needs one: see `reached`).
        self._direct: dict[str, aioredis.Redis] = {}

    async def reached(self, ns: str) -> bool:
        """Whether a replica has every write of the namespace so far (True where there is no
        replica). Redis's WAIT counts only its own connection's writes, so a marker is
        written on that connection first: replicas apply writes in order, so once the
        marker is there, so is every write before it. Raises what Redis raises."""
        marker = keys.replicated_key(ns)
        client, name = self.client, ""
        if is_cluster(self.client):
            node = self.client.get_node_from_key(marker)
            name = node.name
            client = self._direct.get(name)
            if client is None:
                client = self._direct[name] = aioredis.Redis(
                    host=node.host, port=node.port, socket_connect_timeout=1.0, socket_timeout=5.0
                )
        now = asyncio.get_running_loop().time()
        count, checked = self._counts.get(name, (0, -REPLICAS_CHECK_S))
        if now - checked > REPLICAS_CHECK_S:
            info = await client.info("replication")
            count = int(info.get("connected_slaves", 0))
            self._counts[name] = (count, now)
        if not count:
            return True
        # On a cluster, a node that no longer holds the slot answers the SET with MOVED.
        pipe = client.pipeline(transaction=False)
        pipe.set(marker, "1", px=60_000)
        pipe.execute_command("WAIT", 1, REPLICA_WAIT_MS)
        _, reached = await pipe.execute()
        return int(reached) >= 1

    async def aclose(self) -> None:
        for direct in self._direct.values():
            await direct.aclose()
        self._direct.clear()
