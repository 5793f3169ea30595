"""The key layout's version, and the one migration to it: from the layout before hash tags
(layout 2, below), then every namespace completed (layout 3, `migration`), then no text
kept outside the memories (layout 4, `migration.hide_texts`).

Before version 2 a namespace's keys were `membus:<ns>:...`, and its tier and meta
`membus:tier:<ns>` and `membus:meta:<ns>`; now they are all `membus:{<ns>}:...`
(`keys.ns_prefix`). The first handler to start on a Redis without `LAYOUT_KEY` migrates it
under a lock while the others wait: every old key is RENAMEd (which keeps its expiry), and
every namespace's own index is dropped (its memories kept) and made again under its new
name (`placement.index_name`) over the new prefix. Pool indexes cover all of `membus:` with a
filter, so they follow the renames themselves. Run the handlers of one version at a time:
an older handler still running would write the old layout. `python -m handlers migrate`
(and `membus migrate`) runs it without serving."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import structlog

from contracts.subjects import is_valid_namespace
from handlers.store import migration
from handlers.store.cluster import batches, is_cluster
from handlers.store.failures import MIGRATING
from handlers.store.indexes import Indexes
from handlers.store.keys import ROOT, meta_key, ns_prefix
from handlers.store.resp import index_prefixes, text
from handlers.store.schema import NamespaceMeta
from handlers.store.store import Store

log = structlog.get_logger("membus.store")

LAYOUT = 4
LAYOUT_KEY = f"{ROOT}:layout"
_LOCK_KEY = f"{ROOT}:layout:lock"
_LOCK_S = 60
# Old keys of no namespace: their names stay.
_GLOBAL = {"embcache", "pool", "layout"}
# Old per-namespace keys that were named `membus:<kind>:<ns>` (strings).
_NAMED_AFTER = {"tier", "meta"}


def new_name(old: str, kind: str) -> str | None:
    """The layout-2 name of an old key of type `kind` (Redis's TYPE), or None to keep it.

    The old layout was ambiguous where a namespace was named like a global key's first
    part: `membus:tier:words` was namespace `words`' tier (a string) or namespace `tier`'s
    word counts (a hash). The type tells them apart."""
    parts = old.split(":")
    if len(parts) < 3 or parts[0] != ROOT or old.startswith(f"{ROOT}:{{"):
        return None
    head = parts[1]
    if len(parts) == 3 and head in _NAMED_AFTER and kind == "string":
        return ns_prefix(parts[2]) + head if is_valid_namespace(parts[2]) else None
    if len(parts) == 3 and head in _GLOBAL:
        return None
    if not is_valid_namespace(head):
        return None
    return ns_prefix(head) + old.split(":", 2)[2]


async def ensure(store: Store, wait_s: float = 600.0, again: bool = False) -> int:
    """Bring Redis to the current key layout (see the module); the number of keys renamed
    and namespaces completed (0 when it was there already, or another handler did it).
    `again`: complete every namespace even so (an operator's `migrate`: one whose counts
    were taken away is counted again)."""
    MIGRATING.set(True)
    client = store.client
    if not again and await _current(client):
        return 0
    token = uuid.uuid4().hex
    deadline = asyncio.get_running_loop().time() + wait_s
    while not await client.set(_LOCK_KEY, token, nx=True, ex=_LOCK_S):
        # Another handler migrates: wait for it (its lock lapses if it died).
        if not again and await _current(client):
            return 0
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the key layout migration did not finish within {wait_s:.0f} s")
        await asyncio.sleep(0.2)
    try:
        if not again and await _current(client):
            return 0
        version = int(await client.get(LAYOUT_KEY) or 1)
        changed = 0
        if version < 2:
            changed += await _migrate(client, store.indexes, token)

        async def keep_lock() -> None:
            await client.set(_LOCK_KEY, token, ex=_LOCK_S)

        changed += await migration.complete(store, keep_lock)
        if version < 4:
            changed += await migration.hide_texts(store, keep_lock)
        await client.set(LAYOUT_KEY, LAYOUT)
        return changed
    finally:
        if text(await client.get(_LOCK_KEY) or b"") == token:
            await client.delete(_LOCK_KEY)


async def _current(client: Any) -> bool:
    raw = await client.get(LAYOUT_KEY)
    return raw is not None and int(raw) >= LAYOUT


async def _migrate(client: Any, indexes: Indexes, token: str) -> int:
    if is_cluster(client):
        # A cluster never ran the old layout: its scripts would have spanned slots.
        return 0
    own = await _old_own_indexes(client)
    for ns in own:
        # The old name, over the old prefix: dropped (memories kept), made again after.
        await client.execute_command("FT.DROPINDEX", f"{ROOT}:{ns}")
    renamed = 0
    # A batch of keys at a time: their types in one round trip, their renames in another.
    async for batch in batches(client.scan_iter(match=f"{ROOT}:[^{{]*", count=1000)):
        names = [text(old) for old in batch]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.type(name)
        kinds = await pipe.execute()
        moves = [
            (name, new)
            for name, kind in zip(names, kinds, strict=True)
            if (new := new_name(name, text(kind))) is not None
        ]
        pipe = client.pipeline(transaction=False)
        for name, new in moves:
            pipe.rename(name, new)
        for outcome in await pipe.execute(raise_on_error=False):
            if not isinstance(outcome, Exception):
                renamed += 1
            elif "no such key" not in str(outcome).lower():  # not expired since the SCAN
                raise outcome
        await client.set(_LOCK_KEY, token, ex=_LOCK_S)
        log.info("layout.migrating", renamed=renamed)
    for ns in own:
        raw = await client.get(meta_key(ns))
        meta = msgspec.json.decode(raw, type=NamespaceMeta) if raw else indexes.mine
        index = await indexes.own(ns, meta.dimension, wait_s=0)
        # It indexes the namespace's memories in the background: wait, holding the lock.
        for _ in range(360):  # an hour at most
            if await indexes.wait_indexed(index, 10.0):
                break
            await client.set(_LOCK_KEY, token, ex=_LOCK_S)
    log.info("layout.migrated", layout=LAYOUT, renamed=renamed, own_indexes=len(own))
    return renamed


async def _old_own_indexes(client: Any) -> list[str]:
    """The namespaces whose own index covers the old layout's memory keys."""
    names = [text(name) for name in await client.execute_command("FT._LIST")]
    found = []
    for name in names:
        ns = name.removeprefix(f"{ROOT}:")
        if name == ns or not is_valid_namespace(ns):
            continue
        info = await client.execute_command("FT.INFO", name)
        if f"{ROOT}:{ns}:m:" in index_prefixes(info):
            found.append(ns)
    return found
