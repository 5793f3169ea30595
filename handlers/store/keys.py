"""Every Redis key the service uses, in one place. All start with `membus:`; a namespace's
keys carry its name as their hash tag, `membus:{<ns>}:...` (namespace names hold no `:`,
`{` or `}`), so namespaces never share a key, and on a Redis Cluster all of a namespace's
keys live in one slot, on one node: its Lua scripts touch one slot, and its own index there
covers all of its memories. On a cluster, a namespace born pooled carries its pool's tag
instead, `membus:{pool.<group>}:<ns>:...` (`Pooled`), so that its pool lives in one slot.
Keys of no namespace are few and touched one at a time. The layout before hash tags
(`membus:<ns>:...`) is migrated by `layout`."""

from __future__ import annotations

import hashlib

ROOT = "membus"
# redisvl's embeddings cache (see `handlers.embed.cache`): shared by every namespace.
EMBED_CACHE = f"{ROOT}:embcache"


class Pooled(str):
    """A namespace born pooled on a Redis Cluster: its name, whose keys carry its pool's
    hash tag (`pool_tag`) instead of its own, for good, so that its pool index (which
    RediSearch can only make over keys of its name's slot) covers it. One server never
    needs this: there every namespace's keys carry its own tag (`Indexes.locate`).

    The name is the string itself, so every key function takes either; keep it out of
    messages (msgspec encodes only exact strings)."""

    __slots__ = ("sequence",)
    sequence: int

    def __new__(cls, name: str, sequence: int) -> Pooled:
        self = super().__new__(cls, name)
        self.sequence = sequence
        return self


# Namespaces per pool index: a text query in a pooled namespace reads its words' matches
# across the whole pool (see `Namespace.mine_for_text`), so a pool stays small: 64
# namespaces, each promoted to an index of its own once it holds `pool_max` (100) memories.
POOL_NAMESPACES = 64


def pool_tag(sequence: int) -> str:
    """The hash tag of a pool's keys on a Redis Cluster, by a pooled namespace's sequence:
    one per pool group (`pool_of`). The dot keeps it apart from every namespace's name."""
    return f"pool.{sequence // POOL_NAMESPACES}"


def ns_prefix(ns: str) -> str:
    """What every key of the namespace starts with: its hash tag (its pool's for a
    `Pooled` one, then its name)."""
    if isinstance(ns, Pooled):
        return f"{ROOT}:{{{pool_tag(ns.sequence)}}}:{ns}:"
    return f"{ROOT}:{{{ns}}}:"


def record_prefix(ns: str) -> str:
    """Prefix of the namespace's memory hashes: the only keys its index covers."""
    return ns_prefix(ns) + "m:"


def record_key(ns: str, memory_id: str) -> str:
    return record_prefix(ns) + memory_id


def id_of(ns: str, key: str) -> str:
    """The memory id in a record key."""
    return key.removeprefix(record_prefix(ns))


def access_key(ns: str, memory_id: str) -> str:
    """A memory's access counters: kept out of the indexed hash, so reads never re-index it."""
    return ns_prefix(ns) + f"a:{memory_id}"


def dedup_prefix(ns: str) -> str:
    """Prefix of the exact-dedup keys (content hash -> memory id)."""
    return ns_prefix(ns) + "h:"


def dedup_key(ns: str, content_hash: str) -> str:
    """The dedup key of a content hash; for a memory outside dedup, the bare prefix, which
    names no key (the scripts read a key ending in `:` as none) but is in the namespace's
    slot: a cluster refuses a script whose keys span slots, and "" would."""
    return dedup_prefix(ns) + content_hash


def key_prefix(ns: str) -> str:
    """Prefix of the v4 memory keys' index (a digest of store and key -> memory id)."""
    return ns_prefix(ns) + "k:"


def key_index(ns: str, store: str, key: str | None) -> str:
    """Where the memory holding `key` in `store` is named: a digest (SHA-1, as the scripts
    compute it with `redis.sha1hex`), since the key is the writer's text, kept only in its
    memory. No key: the bare prefix, which the scripts read as none (see `dedup_key`)."""
    if key is None:
        return key_prefix(ns)
    return key_prefix(ns) + hashlib.sha1(f"{store}\0{key}".encode()).hexdigest()


def history_key(ns: str, memory_id: str) -> str:
    """A memory's history: a list of JSON entries, oldest first. It expires with the memory,
    and is kept for a while after a delete."""
    return ns_prefix(ns) + f"hist:{memory_id}"


def history_prefix(ns: str) -> str:
    return history_key(ns, "")


def meta_key(ns: str) -> str:
    """What the namespace's vectors are (embedder and dimension), set by its first writer."""
    return ns_prefix(ns) + "meta"


def memory_keys(ns: str, ids: list[str], history: bool = False) -> list[str]:
    """Record and access key (and history key) of each memory, interleaved, as the Lua
    scripts take them."""
    keys: list[str] = []
    for mid in ids:
        keys += [record_key(ns, mid), access_key(ns, mid)]
        if history:
            keys.append(history_key(ns, mid))
    return keys
