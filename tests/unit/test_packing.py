"""The C packing of Redis commands (handlers.store.packing) gives redis-py's bytes and errors."""

from __future__ import annotations

import numpy as np
import pytest
import redis.exceptions
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection

from handlers.store.packing import PackedConnection, packed

COMMANDS: list[tuple[object, ...]] = [
    ("PING",),
    ("CLIENT SETNAME", "membus"),
    (b"CONFIG GET", b"maxmemory"),
    ("EVALSHA", "a" * 40, 2, "membus:{ns}:m:1", "membus:{ns}:a:1", 1795826997056, "1"),
    ("HSET", "k", "f", 0.1, "g", 1 / 3, "h", -0.0, "i", 1e20, "j", 10**30),
    (
        "FT.SEARCH",
        "idx",
        "*=>[KNN 10 @v $vec]",
        "PARAMS",
        2,
        "vec",
        np.ones(4, np.float32).tobytes(),
    ),
    ("SET", "k", memoryview(b"view")),
    ("SET", "k", np.float64(1.5)),
    ("SET", "ünïcode", "välue"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: str(a[0]))
def test_same_bytes_as_redis_py(args: tuple[object, ...]) -> None:
    ours = b"".join(PackedConnection().pack_command(*args))
    theirs = b"".join(bytes(x) for x in Connection().pack_command(*args))
    assert ours == theirs


@pytest.mark.parametrize("bad", [None, True, 1.5j, object()])
def test_refused_as_redis_py_refuses(bad: object) -> None:
    with pytest.raises(redis.exceptions.DataError):
        Connection().pack_command("SET", "k", bad)
    with pytest.raises(redis.exceptions.DataError):
        PackedConnection().pack_command("SET", "k", bad)


def test_every_kind_of_connection_has_its_packed_twin() -> None:
    for cls in (Connection, SSLConnection, UnixDomainSocketConnection):
        twin = packed(cls)
        assert twin is not cls and issubclass(twin, cls)
    assert packed(PackedConnection) is PackedConnection
