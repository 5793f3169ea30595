"""The migration to layout 3 (`handlers.store.migration`): data written by the layout-2
versions, which kept no tallies, no validity windows, no tier or meta for some namespaces,
and a vector in session entries, reads exactly as today's after it. Then layout 4: word
counts by hash, and no embedding cache of clear texts. Each case makes that
data by writing through today's code and taking away what the older version did not write;
the reads that used to carry a fallback for it then find it complete."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import Servers

from contracts import AddRequest, DescribeRequest, GetRequest, ListRequest, SearchRequest
from handlers.embed import HashEmbedder
from handlers.ops import reads, writes
from handlers.ops import search as search_ops
from handlers.ops.deps import Deps
from handlers.store import keys, layout, migration
from handlers.store.filters import ReadScope, read_filter
from handlers.store.placement import OWN_INDEX, tier_key
from handlers.store.schema import POOL_FIELD
from handlers.store.sessions import session_key
from handlers.store.store import Store
from handlers.store.tallies import (
    TALLIES_COMPLETE,
    VALIDITY_COMPLETE,
    VALIDITY_TALLIED,
    Overview,
    tally_prefix,
)
from handlers.store.text import word_field, words_key


def _ns() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _deps(in_process: Any, pool_max: int = 1000) -> Deps:
    """A handler of its own (its own caches), as one started after the upgrade."""
    base: Deps = in_process.deps
    store = Store(base.store.client, "hash", 384, pool_max=pool_max)
    return dataclasses.replace(base, store=store, embedder=HashEmbedder(384))


async def _add(deps: Deps, ns: str, content: str, **kw: Any) -> str:
    reply = await writes.add(ns, AddRequest(type="knowledge", content=content, **kw), deps)
    await deps.store.settle()
    return reply.id


async def test_a_namespace_without_counts_or_meta_is_counted_by_the_migration(
    in_process: Any,
) -> None:
    old, ns = _deps(in_process), _ns()
    await _add(old, ns, "alpha", tags=["red"])
    await writes.add(
        ns, AddRequest(type="decision", content="beta", scope="general", ttl_s=60), old
    )
    gone = await _add(old, ns, "gamma")
    client = old.store.client
    # As a version without counts (and from before metas were kept) left it.
    await client.delete(*[k async for k in client.scan_iter(match=f"{tally_prefix(ns)}*")])
    await client.delete(keys.meta_key(ns))
    await client.delete(keys.record_key(ns, gone), keys.access_key(ns, gone))

    new = _deps(in_process)
    assert await migration.complete_namespace(new.store, ns) == 1
    assert await client.exists(tally_prefix(ns) + TALLIES_COMPLETE)
    assert msgspec.json.decode(await client.get(keys.meta_key(ns)))["dimension"] == 384

    described = await reads.describe(ns, DescribeRequest(workflow_id="wf"), new)
    assert (described.total, described.tags) == (2, ["red"])
    assert described.idle_count == 0  # only the counts know it: these are the counts
    now = int(time.time() * 1000)
    for scope in (ReadScope("wf", True), ReadScope(None, True), ReadScope("wf", False)):
        kept = await new.store.queries.overview(ns, scope, now)
        full = Overview.of(await new.store.queries.aggregate(ns, read_filter(now, scope)))
        assert kept._replace(idle_count=None) == full
    # Running it again changes nothing.
    assert await migration.complete_namespace(new.store, ns) == 0


async def test_memories_from_before_validity_get_their_windows_by_the_migration(
    in_process: Any,
) -> None:
    old, ns = _deps(in_process), _ns()
    plain = await _add(old, ns, "the team has six people")
    first = await writes.add(ns, AddRequest(type="decision", content="Fridays"), old)
    second = await writes.add(
        ns, AddRequest(type="decision", content="Tuesdays", supersedes=[first.id]), old
    )
    client = old.store.client
    # As a version before v3 wrote them: no window, and a supersede that closed nothing.
    for mid in (first.id, second.id, plain):
        await client.hdel(keys.record_key(ns, mid), "vf", "vu", "valid_until")
    await client.delete(tally_prefix(ns) + VALIDITY_COMPLETE, tally_prefix(ns) + VALIDITY_TALLIED)

    new = _deps(in_process)
    assert await migration.complete_namespace(new.store, ns) == 1
    created = {
        m.id: m.created_at
        for m in (await reads.get(ns, GetRequest(ids=[first.id, second.id]), new)).memories
    }

    async def listed(at: Any) -> set[str]:
        page = await reads.list_(ns, ListRequest(limit=100, as_of=at), new)
        return {m.id for m in page.memories}

    between = created[second.id] - timedelta(milliseconds=1)
    assert await listed(between) == {first.id, plain}
    assert await listed(created[second.id] + timedelta(seconds=1)) == {second.id, plain}
    got = (await reads.get(ns, GetRequest(ids=[first.id]), new)).memories[0]
    assert got.valid_until == created[second.id]
    assert await client.exists(tally_prefix(ns) + VALIDITY_COMPLETE)


async def test_a_namespace_from_before_pools_keeps_its_own_index(in_process: Any) -> None:
    old, ns = _deps(in_process, pool_max=0), _ns()
    mid = await _add(old, ns, "written by an older version")
    await old.store.client.delete(tier_key(ns))  # older versions kept no tier

    new = _deps(in_process)
    assert await migration.complete_namespace(new.store, ns) == 1
    hits = await search_ops.search(ns, SearchRequest(query="older version"), new)
    later = await _add(new, ns, "written after the upgrade")

    assert [h.id for h in hits.results] == [mid]
    assert (await new.store.client.get(tier_key(ns))).decode() == OWN_INDEX
    assert not await new.store.client.hexists(keys.record_key(ns, later), POOL_FIELD)
    listed = await reads.list_(ns, ListRequest(limit=10), new)
    assert listed.total == 2


async def test_the_migration_runs_once_over_every_namespace_and_old_sessions(
    in_process: Any,
) -> None:
    old, ns = _deps(in_process), _ns()
    await _add(old, ns, "counted by the migration")
    client = old.store.client
    await client.delete(tally_prefix(ns) + TALLIES_COMPLETE)
    session = session_key(ns, "s1")
    await client.hset(session, mapping={"turn": "3", "m1": b"2|\x00\x01vector"})
    await client.expire(session, 600)
    await client.set(layout.LAYOUT_KEY, 2)

    new = _deps(in_process)
    assert ns in await migration.namespaces(client)
    assert await layout.ensure(new.store) >= 2  # this namespace and the session, at least
    assert int(await client.get(layout.LAYOUT_KEY)) == layout.LAYOUT == 4
    assert await client.exists(tally_prefix(ns) + TALLIES_COMPLETE)
    assert await client.hget(session, "m1") == b"2"
    assert 0 < await client.ttl(session) <= 600
    # Once there, a handler that starts finds nothing to do.
    assert await layout.ensure(_deps(in_process).store) == 0


@pytest.mark.processes
async def test_membus_migrate_counts_again_a_namespace_whose_counts_were_taken_away(
    in_process: Any, servers: Servers
) -> None:
    old, ns = _deps(in_process), _ns()
    await _add(old, ns, "counted again by the operator")
    client = old.store.client
    await client.delete(tally_prefix(ns) + TALLIES_COMPLETE)
    env = {**os.environ, "MEMBUS_REDIS_URL": servers.redis_url, "MEMBUS_EMBEDDER": "hash"}
    membus = Path(sys.executable).parent / "membus"

    done = await asyncio.to_thread(
        subprocess.run, [str(membus), "migrate"], env=env, capture_output=True, text=True
    )

    assert done.returncode == 0, done.stderr
    assert f"key layout {layout.LAYOUT}" in done.stdout
    assert await client.exists(tally_prefix(ns) + TALLIES_COMPLETE)


async def test_layout_4_keeps_word_counts_by_hash_and_drops_the_clear_text_cache(
    in_process: Any,
) -> None:
    old, ns = _deps(in_process), _ns()
    await _add(old, ns, "the heron migration was counted by words")
    client = old.store.client
    key = words_key(ns)
    # As layout 3 kept them: by the word itself.
    await client.delete(key)
    await client.hset(key, mapping={"*": 3, "heron": 2, "migration": 1})
    await client.expire(key, 600)
    cached = f"{keys.EMBED_CACHE}:{uuid.uuid4().hex}"
    await client.hset(cached, mapping={"content": "the heron migration", "embedding": "[0.1]"})
    await client.set(layout.LAYOUT_KEY, 3)

    new = _deps(in_process)
    assert await layout.ensure(new.store) >= 2
    counts = {k.decode(): int(v) for k, v in (await client.hgetall(key)).items()}

    assert counts == {"*": 3, word_field("heron"): 2, word_field("migration"): 1}
    assert 0 < await client.ttl(key) <= 600
    assert not await client.exists(cached)
    assert int(await client.get(layout.LAYOUT_KEY)) == 4
    # The counts read as before: by the word, through its hash.
    assert await new.store.text.word_counts(ns, ["heron", "migration", "egret"]) == (3, [2, 1, 0])
