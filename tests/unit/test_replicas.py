"""Which replicas a durable write waits for, read from a cluster node's own node table
(CLUSTER NODES as valkey prints it), whatever their link's state this second."""

from __future__ import annotations

from handlers.store.replicas import declared_replicas

# A primary with its replica, as the three-primary cluster of `deploy up --cluster` prints.
HEALTHY = b"""\
30b99ff8 127.0.0.1:42472@52472 slave b0d5e751 0 1795806287175 4 connected
1bec3d5b 127.0.0.1:46406@56406 master - 0 1795806287074 3 connected 10922-16383
dd88b3f7 127.0.0.1:24197@34197 slave 5cae056a 0 1795806287074 1 connected
5cae056a 127.0.0.1:51264@61264 master - 0 1795806287000 1 connected 5461-10921
b0d5e751 127.0.0.1:38467@48467 myself,master - 0 0 4 connected 0-5460
f1a6aaaf 127.0.0.1:45422@55422 slave 1bec3d5b 0 1795806287074 3 connected
"""


def test_a_primary_with_a_replica_declares_one() -> None:
    assert declared_replicas(HEALTHY) == ["127.0.0.1:42472"]
    assert declared_replicas(HEALTHY.decode()) == ["127.0.0.1:42472"]


def test_a_replica_cut_off_or_failed_is_still_declared() -> None:
    # The partition of issue 35: the replica's link was just reset (0 connected replicas),
    # then the replica is suspected and at last marked failed. Each time it still counts.
    for flags, link in (
        ("slave", "disconnected"),
        ("slave,fail?", "disconnected"),
        ("slave,fail", "disconnected"),
    ):
        table = HEALTHY.decode().replace(
            "30b99ff8 127.0.0.1:42472@52472 slave b0d5e751 0 1795806287175 4 connected",
            f"30b99ff8 127.0.0.1:42472@52472 {flags} b0d5e751 0 1795806287175 4 {link}",
        )
        assert declared_replicas(table) == ["127.0.0.1:42472"], flags


def test_a_promoted_replica_whose_old_primary_is_dead_declares_none() -> None:
    # After a failover the dead primary is listed as a failed primary of no one: the new
    # primary has no replica to wait for until the old one rejoins as its replica.
    after = """\
1bec3d5b 127.0.0.1:46406@56406 master - 0 1795806293397 3 connected 10922-16383
30b99ff8 127.0.0.1:42472@52472 myself,master - 0 0 6 connected 0-5460
f1a6aaaf 127.0.0.1:45422@55422 slave 1bec3d5b 0 1795806293196 3 connected
b0d5e751 127.0.0.1:38467@48467 master,fail - 1795806288060 1795806287053 4 disconnected
5cae056a 127.0.0.1:51264@61264 master - 0 1795806293196 1 connected 5461-10921
dd88b3f7 127.0.0.1:24197@34197 slave 5cae056a 0 1795806293196 1 connected
"""
    assert declared_replicas(after) == []
    rejoined = after.replace("master,fail - 1795806288060", "slave 30b99ff8 1795806288060")
    assert declared_replicas(rejoined) == ["127.0.0.1:38467"]


def test_a_node_that_is_a_replica_now_is_no_primary_to_wait_on() -> None:
    # A slot map out of date names the old primary, a replica since the failover.
    table = HEALTHY.decode().replace("myself,master - 0 0 4", "myself,slave 30b99ff8 0 0 4")
    assert declared_replicas(table) is None
    assert declared_replicas("") is None


def test_a_primary_with_two_replicas_declares_both() -> None:
    extra = "99999999 127.0.0.1:40000@50000 slave,fail b0d5e751 0 0 4 disconnected\n"
    assert declared_replicas(HEALTHY.decode() + extra) == ["127.0.0.1:42472", "127.0.0.1:40000"]


def test_a_replica_announced_by_hostname_is_named_by_its_address() -> None:
    # The Kubernetes overlay's nodes announce a hostname after the bus port.
    table = HEALTHY.decode().replace("42472@52472", "42472@52472,redis-4.membus-redis-cluster")
    assert declared_replicas(table) == ["127.0.0.1:42472"]
