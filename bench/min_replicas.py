"""Bench: what Redis's `min-replicas-to-write` costs the `deploy up --cluster` layout (3
primaries with a replica each, cluster-node-timeout 2 s), the option issue 35 asked to weigh
for an isolated primary that should refuse writes instead of taking them.

For each setting (off, and `min-replicas-to-write 1` with `min-replicas-max-lag` N on every
node, as a replica may be promoted), it prints:
- the Redis main thread's CPU per SET on a primary (from /proc), sequential requests;
- after the SIGKILL of a primary: how long until a write to one of its slots succeeds
  again (its replica promoted), probing every 50 ms up to --give-up seconds;
- after that primary is started again (it rejoins as a replica): how long until a write
  succeeds, where none had.

Prints figures; not a test. Run from the project root:

    .venv/bin/python bench/min_replicas.py [--sets 20000] [--max-lag 2] [--give-up 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from redis.crc import key_slot

from deploy.embedded import EmbeddedStack

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int) -> float:
    """The main thread's user+system CPU (its task has the process's pid)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS


def primary_of(stack: EmbeddedStack, slot: int) -> int:
    client = redis.Redis(port=stack.redis_cluster_ports[0])
    try:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return stack.redis_cluster_ports.index(int(primary[1]))
    finally:
        client.close()
    raise SystemExit(f"slot {slot} has no owner")


def until_written(client: redis.RedisCluster, key: str, give_up: float) -> float | None:
    """Seconds until a SET of `key` succeeds, or None within `give_up`."""
    start = time.monotonic()
    while time.monotonic() - start < give_up:
        try:
            client.set(key, "1")
            return time.monotonic() - start
        except redis.exceptions.RedisError:
            time.sleep(0.05)
    return None


def run(min_replicas: bool, sets: int, max_lag: int, give_up: float) -> dict[str, str]:
    stack = EmbeddedStack.temporary()
    stack.redis_primaries = 3
    try:
        stack.start_servers()
        if min_replicas:
            for port in stack.redis_cluster_ports:
                node = redis.Redis(port=port)
                node.config_set("min-replicas-to-write", 1)
                node.config_set("min-replicas-max-lag", max_lag)
                node.close()
        key = "{bench}:probe"
        victim = primary_of(stack, key_slot(key.encode()))
        name = stack.redis_node_name(victim)
        pid = stack.servers[name].pid
        direct = redis.Redis(port=stack.redis_cluster_ports[victim])
        before = cpu_ms(pid)
        for i in range(sets):
            direct.set(f"{{bench}}:k{i % 100}", i)
        per_set_us = (cpu_ms(pid) - before) * 1000 / sets
        direct.close()

        client = redis.RedisCluster(host="127.0.0.1", port=stack.redis_cluster_ports[0])
        stack.servers[name].send_signal(signal.SIGKILL)
        stack.servers[name].wait()
        after_kill = until_written(client, key, give_up)
        stack.start_redis_node(victim)
        after_restart = until_written(client, key, give_up) if after_kill is None else 0.0
        client.close()

        def said(seconds: float | None) -> str:
            return f"not within {give_up:.0f} s" if seconds is None else f"{seconds:.1f} s"

        return {
            "CPU per SET": f"{per_set_us:.1f} us",
            "write after a primary's SIGKILL": said(after_kill),
            "write after it is back": said(after_restart) if after_kill is None else "-",
        }
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=20_000)
    parser.add_argument("--max-lag", type=int, default=2)
    parser.add_argument("--give-up", type=float, default=20.0)
    args = parser.parse_args()
    rows = {
        "off": run(False, args.sets, args.max_lag, args.give_up),
        f"min-replicas-to-write 1, max-lag {args.max_lag}": run(
            True, args.sets, args.max_lag, args.give_up
        ),
    }
    for setting, figures in rows.items():
        print(setting)
        for what, figure in figures.items():
            print(f"  {what}: {figure}")


if __name__ == "__main__":
    main()
