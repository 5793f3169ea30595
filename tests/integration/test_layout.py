"""The migration from the key layout before hash tags (`handlers.store.layout`).

Data in the old layout is made by writing through today's code and moving every key of
the namespace back to its old name (and its own index back to the old prefix): exactly
what a Redis written by the previous version holds. After `layout.ensure` a handler that
knows only the new layout must read everything as before, expiries included."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import msgspec
import pytest

from contracts import (
    AddRequest,
    DeleteRequest,
    DescribeRequest,
    GetRequest,
    HistoryRequest,
    ListRequest,
    RecallRequest,
    SearchRequest,
)
from contracts.messages import CreateWorkspaceRequest, LoadWorkspaceRequest
from handlers.embed import HashEmbedder
from handlers.ops import history as history_ops
from handlers.ops import reads, writes
from handlers.ops import recall as recall_ops
from handlers.ops import search as search_ops
from handlers.ops.deps import Deps
from handlers.ops.workspaces import create_workspace, load_workspace
from handlers.store import keys, layout
from handlers.store.indexes import Indexes
from handlers.store.placement import OWN_INDEX, index_name, tier_key
from handlers.store.resp import text
from handlers.store.schema import NamespaceMeta, schema_dict
from handlers.store.store import Store


def _deps(in_process: Any, pool_max: int) -> Deps:
    """A handler of its own: nothing cached from before the migration."""
    base: Deps = in_process.deps
    store = Store(base.store.client, "hash", 384, pool_max=pool_max)
    return dataclasses.replace(base, store=store, embedder=HashEmbedder(384))


def _old_name(new: str, ns: str) -> str:
    rest = new.removeprefix(keys.ns_prefix(ns))
    return f"membus:{rest}:{ns}" if rest in ("tier", "meta") else f"membus:{ns}:{rest}"


async def _to_old_layout(client: Any, ns: str) -> int:
    """Move the namespace back to the layout before hash tags; how many keys moved."""
    own = await client.get(tier_key(ns)) == OWN_INDEX.encode()
    if own:
        await client.execute_command("FT.DROPINDEX", index_name(ns))
    found = [text(k) async for k in client.scan_iter(match=keys.ns_prefix(ns) + "*")]
    for key in found:
        await client.rename(key, _old_name(key, ns))
    if own:
        schema = schema_dict(ns, 384)["fields"]
        index = Indexes(client, NamespaceMeta("hash", 384), _no_guard)
        # The old index: same fields, over the old prefix.
        old = await index.own(ns, 384, wait_s=0)
        await client.execute_command("FT.DROPINDEX", old.name)
        args: list[Any] = ["ON", "HASH", "PREFIX", 1, f"membus:{ns}:m:", "SCHEMA"]
        for field in old.schema.redis_fields:
            args += field.redis_args()
        assert len(schema) == len(old.schema.redis_fields)
        await client.execute_command("FT.CREATE", f"membus:{ns}", *args)
        for _ in range(500):  # FT.CREATE indexes the existing hashes in the background
            if int((await client.execute_command("FT.INFO", f"membus:{ns}"))[b"num_docs"]):
                break
            await asyncio.sleep(0.01)
        assert int((await client.execute_command("FT.INFO", f"membus:{ns}"))[b"num_docs"])
    return len(found)


def _no_guard() -> Any:
    import contextlib

    return contextlib.nullcontext()


async def _reads(deps: Deps, ns: str, ids: list[str], gone: str) -> dict[str, Any]:
    """Everything a reader sees of the namespace, as plain data."""
    out: dict[str, Any] = {}
    for mode in ("text", "vector", "hybrid"):
        found = await search_ops.search(
            ns, SearchRequest(query="deploy window friday", mode=mode, limit=10), deps
        )
        # The same memories; not necessarily in the same order: renamed keys are indexed
        # again, and BM25 counts the replaced entries until the index's GC runs.
        out[f"search-{mode}"] = sorted(r.id for r in found.results)
    out["list"] = [m.id for m in (await reads.list_(ns, ListRequest(limit=50), deps)).memories]
    got = await reads.get(ns, GetRequest(ids=ids), deps)
    out["get"] = sorted((m.id, m.content, m.expires_at) for m in got.memories)
    described = await reads.describe(ns, DescribeRequest(), deps)
    out["describe"] = msgspec.to_builtins(described)
    out["history"] = msgspec.to_builtins(
        await history_ops.history(ns, HistoryRequest(id=gone), deps)
    )
    ws = await load_workspace(ns, LoadWorkspaceRequest(name="site"), deps)
    out["workspace"] = ws.data.purpose
    return out


async def _fill(deps: Deps, ns: str) -> tuple[list[str], str]:
    ids = []
    for i, content in enumerate(
        [
            "the deploy window is friday afternoon",
            "staging deploys need a second reviewer",
            "the user prefers short answers",
            "friday releases were moved to thursday",
        ]
    ):
        reply = await writes.add(
            ns,
            AddRequest(
                type="knowledge",
                content=content,
                tags=["ops"],
                workflow_id="wf-1" if i % 2 else None,
                ttl_s=3600 if i == 1 else None,
            ),
            deps,
        )
        ids.append(reply.id)
    newer = await writes.add(
        ns,
        AddRequest(type="knowledge", content="the deploy window is monday", supersedes=[ids[0]]),
        deps,
    )
    ids.append(newer.id)
    gone = (await writes.add(ns, AddRequest(type="context", content="scratch"), deps)).id
    await writes.delete(ns, DeleteRequest(ids=[gone]), deps)
    await create_workspace(
        ns,
        CreateWorkspaceRequest(
            name="site", description="the web site", root_folder="/srv", purpose="sell"
        ),
        deps,
    )
    await recall_ops.recall(ns, RecallRequest(message="deploy", session_id="s-1"), deps)
    await deps.store.settle()
    return ids, gone


@pytest.mark.parametrize("pool_max", [0, 1000], ids=["own-index", "pooled"])
async def test_data_of_the_old_layout_reads_the_same_after_the_migration(
    in_process: Any, pool_max: int
) -> None:
    ns = f"t{uuid.uuid4().hex[:12]}"
    before = _deps(in_process, pool_max)
    client = before.store.client
    ids, gone = await _fill(before, ns)
    expected = await _reads(before, ns, ids, gone)
    expiry = await client.pexpiretime(keys.record_key(ns, ids[1]))
    assert expiry > 0

    moved = await _to_old_layout(client, ns)
    assert moved >= 2 * len(ids) + 6  # records, access counters, histories, tallies, ...
    assert not [k async for k in client.scan_iter(match=keys.ns_prefix(ns) + "*")]
    assert await client.exists(f"membus:{ns}:m:{ids[0]}", f"membus:tier:{ns}") == 2
    await client.delete(layout.LAYOUT_KEY)

    # Two handlers start at once: one migrates, the other waits for it.
    after, other = _deps(in_process, pool_max), _deps(in_process, pool_max)
    renamed = await asyncio.gather(layout.ensure(after.store), layout.ensure(other.store))
    assert sorted(renamed)[0] == 0 and sorted(renamed)[1] >= moved
    assert int(await client.get(layout.LAYOUT_KEY)) == layout.LAYOUT
    assert not [k async for k in client.scan_iter(match=f"membus:{ns}:*")]
    assert await client.pexpiretime(keys.record_key(ns, ids[1])) == expiry

    assert await _reads(after, ns, ids, gone) == expected
    # And it takes writes as before.
    late = await writes.add(ns, AddRequest(type="knowledge", content="deploy freeze"), after)
    found = await search_ops.search(ns, SearchRequest(query="freeze", mode="text"), after)
    assert [r.id for r in found.results] == [late.id]


async def test_a_current_layout_is_left_alone(in_process: Any) -> None:
    client = in_process.deps.store.client
    await client.set(layout.LAYOUT_KEY, layout.LAYOUT)
    assert await layout.ensure(in_process.deps.store) == 0
