"""Where a namespace's memories are indexed: its key functions and the Lua fragment the
writes use. A new namespace starts *pooled*, sharing an index with up to
`keys.POOL_NAMESPACES` - 1 other small namespaces of its vector dimension, its memories
marked with its pool number (`pool_number`); once it outgrows the pool it is promoted to an
index of its own (`promotion`). Its tier key says which, and the write scripts read it
(`POOLED`), so a memory is written into the right index even by a handler that has not yet
heard of a promotion. On a Redis Cluster, a namespace's home says where its keys live
(`Indexes.locate`)."""

from __future__ import annotations

from handlers.store.keys import POOL_NAMESPACES, ROOT, ns_prefix, pool_tag


def index_name(ns: str) -> str:
    """The namespace's own RediSearch index. RediSearch declares an index's name as the key
    of its FT.* commands, so a cluster sends them to the node of the name's slot: with the
    namespace's hash tag, the node that holds its memories."""
    return ns_prefix(ns)[:-1]


# Counts up once per pooled namespace: its pool number's sequence part (see `pool_number`).
POOL_SEQUENCE = f"{ROOT}:pool:seq"
# Vector dimensions stay below this (RediSearch caps them at 32,768).
_DIMENSIONS = 65536


# On a cluster, new pooled namespaces go round this many pools at a time (`spread`), so they
# spread over the slots about as namespaces with tags of their own would (1,000 of them land
# 92 to 116 on each of 10 primaries; with 16 pools, 0 to 250), and the first ones (a
# deployment's few large tenants, maybe) each take a slot: a namespace keeps its pool's
# slot when it outgrows the pool. A pool index with one memory costs about 215 KB
# (`schema.POOL_BLOCK`).
OPEN_POOLS = 256


def spread(count: int) -> int:
    """The pool sequence of a cluster's `count`-th pooled namespace (from 1): consecutive
    ones in `OPEN_POOLS` different groups, each group filled to `POOL_NAMESPACES`."""
    block, place = divmod(count - 1, POOL_NAMESPACES * OPEN_POOLS)
    group = block * OPEN_POOLS + place % OPEN_POOLS
    return group * POOL_NAMESPACES + place // OPEN_POOLS


def pool_number(sequence: int, dimension: int) -> int:
    """A pooled namespace's number, in its memories' `pool` field: unique to the namespace;
    its remainder by 65,536 is the dimension, and its sequence part picks the pool index
    among that dimension's (an exact float64 well past 2**40 namespaces)."""
    return sequence * _DIMENSIONS + dimension


def pool_of(number: int) -> tuple[int, int]:
    """The pool index a pool number belongs to: (its dimension, its group)."""
    return number % _DIMENSIONS, number // _DIMENSIONS // POOL_NAMESPACES


def pool_index_name(number: int, clustered: bool = False) -> str:
    """The index the pooled namespace with this pool number shares with up to
    POOL_NAMESPACES - 1 others of the same vector dimension. On a cluster, in its pool's
    slot: named with the pool's tag (`pool.` keeps it apart from a namespace's index)."""
    dimension, group = pool_of(number)
    if clustered:
        return f"{pool_prefix(number, clustered)}pool.{dimension}"
    return f"{ROOT}:pool:{dimension}:{group}"


def pool_prefix(number: int, clustered: bool = False) -> str:
    """The key prefix a pool index covers (its FILTER picks its pooled memories there):
    every key on one server; the pool's slot on a cluster."""
    if clustered:
        return f"{ROOT}:{{{pool_tag(number // _DIMENSIONS)}}}:"
    return f"{ROOT}:"


def pool_filter(number: int, field: str) -> str:
    """That pool index's FILTER: only the hashes whose `field` holds a pool number of its
    dimension and group (every other hash under the prefix, and the memories of a
    namespace with an index of its own, lack the field)."""
    dimension, group = pool_of(number)
    low = group * POOL_NAMESPACES * _DIMENSIONS
    high = (group + 1) * POOL_NAMESPACES * _DIMENSIONS
    return (
        f"exists(@{field}) && @{field} % {_DIMENSIONS} == {dimension}"
        f" && @{field} >= {low} && @{field} < {high}"
    )


def home_key(ns: str) -> str:
    """On a Redis Cluster, where the namespace's keys live, set by its first user: `own`
    (`OWN_INDEX`: under its own tag) or its pool sequence (`Pooled`). In its own slot."""
    return f"{ROOT}:{{{ns}}}:home"


def tier_key(ns: str) -> str:
    """Where the namespace's memories are indexed: its `pool_number` while it is pooled, or
    `OWN_INDEX` once it has its own index (set when first used, changed once at promotion)."""
    return ns_prefix(ns) + "tier"


OWN_INDEX = "own"
# The tier while a promotion builds the namespace's own index: readers use the passing one.
OWN_BUILDING = "own+"


def passing_index_name(ns: str) -> str:
    """The index a promotion reads a namespace from while its own one is built (same slot)."""
    return index_name(ns) + ":passing"


# Where a new memory is indexed (`tier_key`): a pooled namespace's memories carry its pool
# number in the `pool` field, read here so that a write follows a promotion at once. Nil when
# the namespace is not set up (Redis lost it): the write is refused, see `Writes.add`.
POOLED = """
local function pooled(tierkey, pairs)
  local tier = redis.call('GET', tierkey)
  if tier and tonumber(tier) then
    pairs[#pairs + 1] = 'pool'
    pairs[#pairs + 1] = tier
  end
  return tier
end
"""
