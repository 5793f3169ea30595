"""Which keys the layout migration renames, and to what (pure: no server)."""

from __future__ import annotations

import pytest

from handlers.store import keys
from handlers.store.layout import new_name


@pytest.mark.parametrize(
    ("old", "kind", "new"),
    [
        ("membus:team-1:m:01ABC", "hash", keys.record_key("team-1", "01ABC")),
        ("membus:team-1:a:01ABC", "hash", keys.access_key("team-1", "01ABC")),
        ("membus:team-1:hist:01ABC", "list", keys.history_key("team-1", "01ABC")),
        ("membus:team-1:t:h:wf", "hash", keys.tally_prefix("team-1") + "h:wf"),
        ("membus:team-1:ws:a:b c", "hash", keys.workspace_key("team-1", "a:b c")),
        ("membus:team-1:words", "hash", keys.words_key("team-1")),
        ("membus:tier:team-1", "string", keys.tier_key("team-1")),
        ("membus:meta:team-1", "string", keys.meta_key("team-1")),
        # Namespace `tier`'s word counts, not namespace `words`' tier: the type says so.
        ("membus:tier:words", "hash", keys.words_key("tier")),
        ("membus:meta:wsindex", "zset", keys.workspace_index("meta")),
    ],
)
def test_old_keys_move_under_their_namespace_tag(old: str, kind: str, new: str) -> None:
    assert new_name(old, kind) == new
    assert new.startswith("membus:{")


@pytest.mark.parametrize(
    ("old", "kind"),
    [
        (keys.record_key("team-1", "01ABC"), "hash"),  # already migrated
        (keys.tier_key("team-1"), "string"),
        (f"{keys.EMBED_CACHE}:5f1d", "hash"),  # shared by every namespace
        (keys.POOL_SEQUENCE, "string"),
        ("membus:layout", "string"),
        ("membus:not a namespace:m:1", "hash"),  # not ours
        ("other:team-1:m:1", "hash"),
    ],
)
def test_keys_of_no_namespace_and_new_keys_stay(old: str, kind: str) -> None:
    assert new_name(old, kind) is None


def test_every_key_of_a_namespace_has_its_hash_tag() -> None:
    ns = "team-1"
    made = [
        keys.record_key(ns, "x"),
        keys.access_key(ns, "x"),
        keys.dedup_key(ns, "h"),
        keys.history_key(ns, "x"),
        keys.tally_prefix(ns),
        keys.words_key(ns),
        keys.session_key(ns, "s"),
        keys.workspace_key(ns, "w"),
        keys.workspace_index(ns),
        keys.states_key(ns, "w"),
        keys.archived_states_key(ns, "w"),
        keys.lock_key(ns, "l"),
        keys.meta_key(ns),
        keys.tier_key(ns),
        keys.replicated_key(ns),
        keys.applied_key(ns, "r" * 200),
    ]
    assert all(k.startswith("membus:{team-1}:") for k in made)
