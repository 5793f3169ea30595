"""Layout 3: every namespace complete, so that no read or write carries a fallback for what
an older version wrote. Run once, by `layout.ensure`, under its lock, after the renames of
layout 2. Each namespace gets what later versions keep from its first write:
- a meta (what its vectors are) and a tier (a namespace from before pools keeps the index
  of its own that it has);
- its tallies, counted from its memories (`Tallies.rebuild`);
- every memory's validity window, and the tallies' counts of them (`Validity.backfill`).
A recall session's entries lose the vector that versions before v3 wrote after the turn.
Running it again changes nothing.

Layout 4 (`hide_texts`, run once, when the layout was older): no key but a memory's own
holds its text (PROTOCOL v4, "Erasure"). Each namespace's word counts are kept by each
word's hash (`text.word_field`), their expiry kept; the shared embedding cache, which held
each text in clear, is dropped (only a cache: texts are embedded again on their next use)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog

from handlers.store.cluster import batches, is_cluster
from handlers.store.keys import EMBED_CACHE, ROOT, meta_key
from handlers.store.placement import OWN_INDEX, tier_key
from handlers.store.resp import text
from handlers.store.store import Store
from handlers.store.tallies import (
    TALLIES_COMPLETE,
    VALIDITY_COMPLETE,
    VALIDITY_TALLIED,
    tally_prefix,
)
from handlers.store.text import WORDS_TOTAL, word_field, words_key

log = structlog.get_logger("membus.store")


async def complete(store: Store, keep_lock: Callable[[], Awaitable[None]]) -> int:
    """Bring every namespace to layout 3; how many namespaces and sessions changed."""
    changed = 0
    names = await namespaces(store.client)
    for name in names:
        changed += await complete_namespace(store, name)
        await keep_lock()
    changed += await _sessions(store.client, keep_lock)
    log.info("layout.completed", namespaces=len(names), changed=changed)
    return changed


async def namespaces(client: Any) -> list[str]:
    """Every namespace Redis holds: those with a tier or a meta (under their own tag, or
    their pool's on a cluster), and, on one server, those with an index of their own."""
    found: set[str] = set()
    for pattern in (f"{ROOT}:{{*}}:tier", f"{ROOT}:{{*}}:meta", f"{ROOT}:{{pool.*}}:*:meta"):
        async for key in client.scan_iter(match=pattern, count=1000):
            if (ns := _namespace_of(text(key))) is not None:
                found.add(ns)
    if not is_cluster(client):
        for name in await client.execute_command("FT._LIST"):
            ns = _namespace_of(text(name) + ":tier")
            if ns is not None and not text(name).endswith(":passing"):
                found.add(ns)
    return sorted(found)


def _namespace_of(key: str) -> str | None:
    """The namespace a tier or meta key (or an own index's name) belongs to."""
    head = f"{ROOT}:{{"
    if not key.startswith(head) or "}" not in key:
        return None
    tag, _, rest = key[len(head) :].partition("}")
    parts = rest.split(":")
    if tag.startswith("pool."):
        return parts[1] if len(parts) == 3 and parts[2] in ("tier", "meta") else None
    return tag if parts[1:] in (["tier"], ["meta"]) else None


async def complete_namespace(store: Store, name: str) -> int:
    """Bring one namespace to layout 3; 1 if anything changed, else 0."""
    client = store.client
    ns = await store.locate(name)
    changed = 0
    if await client.set(meta_key(ns), msgspec.json.encode(store.indexes.mine), nx=True):
        changed = 1  # made before metas were kept: its vectors are this deployment's
    if await client.set(tier_key(ns), OWN_INDEX, nx=True):
        changed = 1  # made before pools: its memories are in the index of its own
    prefix = tally_prefix(ns)
    now_ms = int(time.time() * 1000)
    if not await client.exists(prefix + TALLIES_COMPLETE):
        counted = await store.tallies.rebuild(ns, now_ms)
        log.info("layout.tallied", namespace=ns, memories=counted)
        changed = 1
    if await client.exists(prefix + VALIDITY_COMPLETE, prefix + VALIDITY_TALLIED) < 2:
        given = await store.validity.backfill(ns, now_ms)
        log.info("layout.validity", namespace=ns, memories=given)
        changed = 1
    return changed


async def _sessions(client: Any, keep_lock: Callable[[], Awaitable[None]]) -> int:
    """Session entries of versions before v3 (`<turn>|<vector>`) as the turn alone."""
    changed = 0
    async for batch in batches(client.scan_iter(match=f"{ROOT}:{{*}}*:sess:*", count=1000)):
        for key in batch:
            entries = await client.hgetall(key)
            old = {f: v.partition(b"|")[0] for f, v in entries.items() if b"|" in v}
            if old:
                await client.hset(key, mapping=old)  # keeps the key's sliding TTL
                changed += 1
        await keep_lock()
    return changed


async def hide_texts(store: Store, keep_lock: Callable[[], Awaitable[None]]) -> int:
    """Layout 4: word counts by hash, and the embedding cache of clear texts dropped; how
    many word-count keys and cache entries changed."""
    client = store.client
    changed = 0
    for name in await namespaces(client):
        key = words_key(await store.locate(name))
        counts = await client.hgetall(key)
        if not counts:
            continue
        hashed: dict[Any, int] = {}  # (redis-py types the mapping's keys invariantly)
        for word, n in counts.items():
            field = text(word)
            field = field if field == WORDS_TOTAL else word_field(field)
            hashed[field] = hashed.get(field, 0) + int(n)
        ttl_ms = await client.pttl(key)
        pipe = client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=hashed)
        if ttl_ms > 0:
            pipe.pexpire(key, ttl_ms)
        await pipe.execute()
        changed += 1
        await keep_lock()
    # A cluster client's SCAN walks every node; each key is deleted on its own (slots).
    async for batch in batches(client.scan_iter(match=f"{EMBED_CACHE}:*", count=1000)):
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.delete(key)
        changed += sum(await pipe.execute())
        await keep_lock()
    log.info("layout.texts_hidden", changed=changed)
    return changed
