"""Which keys the layout migration renames, and to what (pure: no server)."""

from __future__ import annotations

import pytest

from handlers.store import keys
from handlers.store.claims import applied_key
from handlers.store.layout import new_name
from handlers.store.lock import lock_key
from handlers.store.placement import (
    OPEN_POOLS,
    POOL_SEQUENCE,
    home_key,
    index_name,
    passing_index_name,
    pool_index_name,
    pool_number,
    pool_prefix,
    spread,
    tier_key,
)
from handlers.store.replicas import replicated_key
from handlers.store.sessions import session_key
from handlers.store.spaces import archived_states_key, states_key, workspace_index, workspace_key
from handlers.store.tallies import tally_prefix
from handlers.store.text import words_key


@pytest.mark.parametrize(
    ("old", "kind", "new"),
    [
        ("membus:team-1:m:01ABC", "hash", keys.record_key("team-1", "01ABC")),
        ("membus:team-1:a:01ABC", "hash", keys.access_key("team-1", "01ABC")),
        ("membus:team-1:hist:01ABC", "list", keys.history_key("team-1", "01ABC")),
        ("membus:team-1:t:h:wf", "hash", tally_prefix("team-1") + "h:wf"),
        ("membus:team-1:ws:a:b c", "hash", workspace_key("team-1", "a:b c")),
        ("membus:team-1:words", "hash", words_key("team-1")),
        ("membus:tier:team-1", "string", tier_key("team-1")),
        ("membus:meta:team-1", "string", keys.meta_key("team-1")),
        # Namespace `tier`'s word counts, not namespace `words`' tier: the type says so.
        ("membus:tier:words", "hash", words_key("tier")),
        ("membus:meta:wsindex", "zset", workspace_index("meta")),
    ],
)
def test_old_keys_move_under_their_namespace_tag(old: str, kind: str, new: str) -> None:
    assert new_name(old, kind) == new
    assert new.startswith("membus:{")


@pytest.mark.parametrize(
    ("old", "kind"),
    [
        (keys.record_key("team-1", "01ABC"), "hash"),  # already migrated
        (tier_key("team-1"), "string"),
        (f"{keys.EMBED_CACHE}:5f1d", "hash"),  # shared by every namespace
        (POOL_SEQUENCE, "string"),
        ("membus:layout", "string"),
        ("membus:not a namespace:m:1", "hash"),  # not ours
        ("other:team-1:m:1", "hash"),
    ],
)
def test_keys_of_no_namespace_and_new_keys_stay(old: str, kind: str) -> None:
    assert new_name(old, kind) is None


def _every_key(ns: str) -> list[str]:
    return [
        keys.record_key(ns, "x"),
        keys.access_key(ns, "x"),
        keys.dedup_key(ns, "h"),
        keys.history_key(ns, "x"),
        tally_prefix(ns),
        words_key(ns),
        session_key(ns, "s"),
        workspace_key(ns, "w"),
        workspace_index(ns),
        states_key(ns, "w"),
        archived_states_key(ns, "w"),
        lock_key(ns, "l"),
        keys.meta_key(ns),
        tier_key(ns),
        replicated_key(ns),
        applied_key(ns, "r" * 200),
        index_name(ns),
        passing_index_name(ns),
    ]


def test_every_key_of_a_namespace_has_its_hash_tag() -> None:
    assert all(k.startswith("membus:{team-1}") for k in _every_key("team-1"))


def test_a_pooled_namespace_on_a_cluster_has_its_pools_tag() -> None:
    pooled = keys.Pooled("team-1", 130)
    made = _every_key(pooled)
    assert all(k.startswith("membus:{pool.2}:team-1:") for k in made[:-2])
    assert made[-2:] == ["membus:{pool.2}:team-1", "membus:{pool.2}:team-1:passing"]
    # Its pool index is in the same slot, and named apart from any namespace's index.
    number = pool_number(pooled.sequence, 384)
    assert pool_prefix(number, clustered=True) == "membus:{pool.2}:"
    assert pool_index_name(number, clustered=True) == "membus:{pool.2}:pool.384"
    # Its home is found by its name alone, in its own slot.
    assert home_key(pooled) == home_key("team-1") == "membus:{team-1}:home"
    # One server keeps one prefix for every pool.
    assert pool_prefix(number) == "membus:"


def test_a_clusters_pooled_namespaces_go_round_the_open_pools() -> None:
    span = keys.POOL_NAMESPACES * OPEN_POOLS
    sequences = [spread(count) for count in range(1, 3 * span + 1)]
    # Each sequence once, none skipped: every pool fills to POOL_NAMESPACES.
    assert sorted(sequences) == list(range(3 * span))
    groups = [s // keys.POOL_NAMESPACES for s in sequences]
    # Consecutive namespaces land in OPEN_POOLS different pools (so slots).
    assert all(len(set(groups[i : i + OPEN_POOLS])) == OPEN_POOLS for i in range(0, 200))
    assert groups[:2] == [0, 1] and groups[OPEN_POOLS] == 0
