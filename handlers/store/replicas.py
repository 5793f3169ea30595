"""Waiting for a Redis replica to have a namespace's writes (durable writes use it before
their acknowledgement): on one server, or on the node of a cluster that holds the
namespace.

Whether to wait comes from the replicas the deployment declares, never from how many are
connected this second: a primary whose replica link was just reset (a partition) reports
0 connected replicas, and a write acknowledged then is lost when that replica is promoted.
What is declared, in order:
- `MEMBUS_REPLICAS_REQUIRED` (`required`): wait for that many replicas everywhere; 0 never
  waits.
- On a Redis Cluster: the replicas the primary's node table lists for it (CLUSTER NODES),
  whatever their health. A replica that is down or cut off is still expected, so writes
  wait (and are retried) until it is back or the cluster fails over; a primary left
  without any replica (its old primary dead after a failover) acknowledges without one.
- On one server: the primary's `min-replicas-to-write`, or 1 while a replica is connected
  (a server that declares nothing is waited on only while it has a replica).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from handlers.store import keys
from handlers.store.claims import applied_key
from handlers.store.cluster import is_cluster


# How long one WAIT waits for a replica, and how often a node's declared replicas are read
# again (a failover or a replica added or removed shows within this long).
def replicated_key(ns: str) -> str:
    """A marker written just before waiting for Redis's replicas (see `durable`)."""
    return keys.ns_prefix(ns) + "replicated"


REPLICA_WAIT_MS = 1000
TOPOLOGY_CHECK_S = 10.0


def declared_replicas(cluster_nodes: str | bytes) -> list[str] | None:
    """The replicas (each `host:port`) that the node that answered CLUSTER NODES has in its
    own node table, failed or cut off ones included; None when that node is not a primary
    (a replica now, after a failover: the caller's slot map is out of date)."""
    if isinstance(cluster_nodes, bytes):
        cluster_nodes = cluster_nodes.decode()
    rows = [line.split() for line in cluster_nodes.splitlines() if line.strip()]
    me = next((row for row in rows if len(row) > 3 and "myself" in row[2].split(",")), None)
    if me is None or "master" not in me[2].split(","):
        return None
    # The address field is host:port@bus-port, with ",hostname" after where one is announced.
    return [row[1].split("@")[0] for row in rows if len(row) > 3 and row[3] == me[0]]


class Replicas:
    def __init__(self, client: Any, required: int | None = None) -> None:
        self.client = client
        # MEMBUS_REPLICAS_REQUIRED; None: from the topology (see the module's text).
        self.required = required
        # Per node (by name; "" on one server): the replicas to wait for (1 or more: a
        # node with none is read again each time) and when that was read.
        self._wanted: dict[str, tuple[int, float]] = {}
        # On a cluster, a connection of our own to each node (WAIT needs one: see `reached`).
        self._direct: dict[str, aioredis.Redis] = {}

    async def reached(self, ns: str, request_id: str) -> bool:
        """Whether the write of `request_id` (its claim marked done or rejected) is on the
        node that holds the namespace's slot now, and the replicas to wait for have it
        (none where none are declared). Redis's WAIT counts only its own connection's
        writes, so a marker is written on that connection first: replicas apply writes in
        order, so once the marker is there, so is every write before it. Raises what Redis
        raises.

        The claim is read on the node that is waited on, in the same pipeline: the write
        went through the cluster client, whose slot map a failover may have changed since,
        and a promoted replica that declares no replica of its own must not acknowledge a
        write that only its cut-off old primary took."""
        marker = replicated_key(ns)
        claim = applied_key(ns, request_id)
        client, name = self.client, ""
        if is_cluster(self.client):
            node = self.client.get_node_from_key(marker)
            name = node.name
            client = self._direct.get(name)
            if client is None:
                client = self._direct[name] = aioredis.Redis(
                    host=node.host, port=node.port, socket_connect_timeout=1.0, socket_timeout=5.0
                )
        wanted = await self._wanted_on(client, name)
        if wanted is None:
            # A replica now: the write went to the new primary, whose node our slot map will
            # name once a command of the cluster client is redirected. Retry until then.
            return False
        if not wanted and not name:
            return True  # one server: the write is on it
        # On a cluster, a node that no longer holds the slot answers with MOVED.
        pipe = client.pipeline(transaction=False)
        pipe.get(claim)
        if wanted:
            pipe.set(marker, "1", px=60_000)
            pipe.execute_command("WAIT", wanted, REPLICA_WAIT_MS)
        state, *waited = await pipe.execute()
        if state is None or state == b"pending":
            return False  # applied on a node that lost the slot since: apply it again here
        return not wanted or int(waited[1]) >= wanted

    async def _wanted_on(self, client: Any, name: str) -> int | None:
        if self.required is not None:
            return self.required
        now = asyncio.get_running_loop().time()
        cached = self._wanted.get(name)
        if cached is not None and now - cached[1] <= TOPOLOGY_CHECK_S:
            return cached[0]
        if name:
            # Two words: redis-py then leaves the reply as the text (its parser for "CLUSTER
            # NODES" keys nodes by address, which nodes without one share).
            declared = declared_replicas(await client.execute_command("CLUSTER", "NODES"))
            if not declared:
                # No primary, or one without a replica: read again next time. A replica
                # that rejoins a primary left without one is to be waited on from its first
                # write, not up to 10 s later (a cut in those seconds promotes it without
                # the writes acknowledged meanwhile).
                return None if declared is None else 0
            # One replica holding the write is enough: a failover promotes the replica
            # furthest along, and waiting for every one would stop writes while any is down.
            wanted = 1
        else:
            wanted = await _wanted_on_one_server(client)
        self._wanted[name] = (wanted, now)
        return wanted

    async def aclose(self) -> None:
        for direct in self._direct.values():
            await direct.aclose()
        self._direct.clear()


async def _wanted_on_one_server(client: Any) -> int:
    try:
        config = await client.config_get("min-replicas-to-write")
        floor = int(config.get("min-replicas-to-write") or 0)
    except ResponseError:  # CONFIG renamed or refused (managed Redis): nothing declared
        floor = 0
    if floor:
        return floor
    info = await client.info("replication")
    return 1 if int(info.get("connected_slaves", 0)) else 0
