"""A Redis data set that takes seconds to load, for tests of what waits for it.

valkey's `key-load-delay` (microseconds per key read, a debugging option) makes a small data
set load slowly, the way 30,000 memories do (22 s on 2 CPUs); the data is folded into the
append-only file's base, an RDB, which the server reads a chunk at a time and answers
between (`loading-process-events-interval-bytes`: every key of 1 KB here). The embedded
servers take the options from `MEMBUS_REDIS_OPTIONS`.
"""

from __future__ import annotations

import time

import redis

# About 1 ms a key: `keys` filler keys take `keys` ms to load.
LOAD_SLOWLY = "--key-load-delay 1000 --loading-process-events-interval-bytes 1024"


def fill_for_slow_loading(port: int, keys: int) -> None:
    """Write `keys` filler keys of 1 KB to the Redis on `port` (persisted, append-only) and
    rewrite its append-only file, so that a restart loads them from the file's RDB base."""
    client = redis.Redis(port=port, socket_timeout=30)
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(keys):
            pipe.set(f"filler:{i}", "x" * 1000)
        pipe.execute()
        client.bgrewriteaof()
        deadline = time.monotonic() + 60
        while True:
            info = client.info("persistence")
            if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                break
            assert time.monotonic() < deadline, "the append-only file was not rewritten"
            time.sleep(0.05)
        assert info["aof_last_bgrewrite_status"] == "ok", info
    finally:
        client.close()
