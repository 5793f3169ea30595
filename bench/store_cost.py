"""Bench: the store's cost per request, as Redis's own CPU time (INFO commandstats, usec),
at growing numbers of memories in one namespace.

Redis runs commands on one main thread, so its time per request caps the whole bus whatever
the number of handlers; commandstats counts that time alone, and the core count or a busy
machine hardly changes it (unlike wall time). The operations run in this process against
the embedded Redis (hash embedder, no NATS round trip), on the seeded corpus of
bench/corpus.py (70% general memories, the rest in 20 workflows; queries drawn from it, each
asked from a workflow). Prints, per size: Redis ms per request and the commands behind it.

    .venv/bin/python bench/store_cost.py [--sizes 10000,100000] [--requests 200] [--seed 7]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nats
import numpy as np
import redis.asyncio as aioredis
from corpus import WORKFLOWS, CorpusMemory, CorpusQuery, make_corpus, make_queries
from measure import command_stats, script_shares, top_level
from redisvl.query import VectorQuery

from contracts.messages import (
    AddRequest,
    DescribeRequest,
    GetRequest,
    ListRequest,
    RecallRequest,
    SearchMode,
    SearchRequest,
)
from deploy.embedded import EmbeddedStack
from handlers.ops import HANDLERS, Deps
from handlers.service import make_deps, make_embedder, redis_client
from handlers.settings import load_settings
from handlers.store.schema import VECTOR_FIELD

NS = "cost"
# Requests run first with MONITOR on, to tell the commands scripts send (`redis_ms`).
CALIBRATION = 20
# Commands of the measurement itself, not of the requests.
_OWN = {"info", "config|resetstat", "config"}


async def run(deps: Deps, op: str, body: Any, ns: str = NS) -> Any:
    return await HANDLERS[op](ns, body, deps)


async def load(
    deps: Deps, memories: list[CorpusMemory], ids: list[str], batch: int = 64, ns: str = NS
) -> float:
    """Add `memories` (in `ns`), appending each one's stored id (a repeat's: the memory it
    folded into); the fastest way in: the operation itself, `batch` at a time."""
    t0 = time.perf_counter()
    for i in range(0, len(memories), batch):
        reqs = [
            AddRequest(workflow_id=m.workflow_id, agent_id=m.agent_id, **m.add_kwargs())
            for m in memories[i : i + batch]
        ]
        replies = await asyncio.gather(*(run(deps, "add", r, ns) for r in reqs))
        ids += [r.duplicate_of or r.id for r in replies]
    await deps.store.settle()
    return time.perf_counter() - t0


async def redis_ms(
    rds: aioredis.Redis,
    url: str,
    deps: Deps,
    count: int,
    request: Callable[[int], Awaitable[object]],
) -> tuple[float, list[tuple[str, float, float]], float]:
    """Redis ms per request over `count` sequential requests, (command, calls, ms) per
    request, most time first, and the ms summed the old way; the commands that scripts send
    are counted in their script's time only (`measure.script_shares`, from a few more
    requests before)."""

    async def calibrate() -> None:
        for i in range(CALIBRATION):
            await request(count + i)
        await deps.store.settle()

    shares = await script_shares(url, calibrate)
    await deps.store.settle()
    await rds.config_resetstat()
    for i in range(count):
        await request(i)
    await deps.store.settle()
    raw = {k: v for k, v in (await command_stats(rds)).items() if k not in _OWN}
    stats = top_level(raw, shares)
    per = [(name, calls / count, usec / 1000 / count) for name, (calls, usec) in stats.items()]
    per.sort(key=lambda row: -row[2])
    # Also as the benches summed it before 2026-11-27, scripts' own commands counted twice,
    # so that older figures compare.
    twice = sum(usec for _, usec in raw.values()) / 1000 / count
    return sum(row[2] for row in per), per, twice


async def source_found(
    deps: Deps, queries: list[CorpusQuery], asked_from: list[str], stored: list[str]
) -> str:
    """How often the memory a query's words came from is in its default search's top 10
    (and the mean reciprocal rank), over the queries whose memory is loaded and in scope."""
    hits = n = 0
    rr = 0.0
    for q, wf in zip(queries, asked_from, strict=True):
        if not 0 <= q.source < len(stored):
            continue
        src_wf = corpus_workflow[q.source]
        if src_wf is not None and src_wf != wf:
            continue  # asked from another workflow: not in scope
        n += 1
        reply = await run(deps, "search", SearchRequest(query=q.text, workflow_id=wf, limit=10))
        found = [r.id for r in reply.results]
        if stored[q.source] in found:
            hits += 1
            rr += 1 / (found.index(stored[q.source]) + 1)
    return f"source memory in the top 10 (hybrid): {hits / n:.3f}, MRR@10 {rr / n:.3f} (n={n})"


corpus_workflow: list[str | None] = []


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000", help="namespace sizes, ascending")
    p.add_argument("--requests", type=int, default=200, help="requests timed per operation")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--quality", type=int, default=1000, help="queries scored for quality")
    p.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    p.add_argument("--read-share-max", default=None, help="MEMBUS_TEXT_READ_SHARE_MAX")
    p.add_argument("--ops", default="", help="only the operations whose name holds this")
    p.add_argument("--json", default=None, help="also write the table here (bench/plot_cost.py)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    stack = EmbeddedStack.temporary()
    stack.start_servers()
    env = {"MEMBUS_EMBEDDER": args.embedder, "MEMBUS_REDIS_URL": stack.redis_url}
    if args.read_share_max is not None:
        env["MEMBUS_TEXT_READ_SHARE_MAX"] = args.read_share_max
    settings = load_settings(env)
    client = redis_client(settings.redis_url)
    rds = aioredis.Redis.from_url(stack.redis_url)
    nc = await nats.connect(stack.nats_url)
    embedder = make_embedder(settings, client)
    deps = make_deps(settings, client, embedder, nc.publish, nc.max_payload)
    corpus = make_corpus(sizes[-1], args.seed)
    corpus_workflow.extend(m.workflow_id for m in corpus)
    # Each operation runs `requests` timed requests after CALIBRATION more (`redis_ms`).
    total = args.requests + CALIBRATION
    queries = make_queries(total, args.seed, corpus)
    # Every query asks from a workflow, as an agent inside a workflow does.
    asked_from = [q.workflow_id or WORKFLOWS[i % len(WORKFLOWS)] for i, q in enumerate(queries)]
    vectors = [np.asarray(v, np.float32) for v in await embedder.embed([q.text for q in queries])]
    # New memories for the adds, others at each size (a repeat would only bump a mention).
    extra = make_corpus(sizes[-1] + total * len(sizes), args.seed + 1)[-total * len(sizes) :]
    added = [0]  # where the adds of this size start in `extra`

    def search(
        mode: SearchMode | None, as_of: datetime | None = None
    ) -> Callable[[int], Awaitable[object]]:
        def one(i: int) -> Awaitable[object]:
            body = SearchRequest(
                query=queries[i].text, workflow_id=asked_from[i], limit=10, mode=mode, as_of=as_of
            )
            return run(deps, "search", body)

        return one

    async def add_then_describe(i: int) -> None:
        m = extra[added[0] + i]
        await run(deps, "add", AddRequest(workflow_id=asked_from[i], **m.add_kwargs()))
        await run(deps, "describe", DescribeRequest(workflow_id=asked_from[i]))

    async def raw_knn(i: int) -> None:
        space = await deps.store.indexes.get(NS)
        q = VectorQuery(vectors[i].tolist(), VECTOR_FIELD, return_fields=["id"], num_results=10)
        await space.index.query(q)

    rows: dict[str, dict[int, tuple[float, list[tuple[str, float, float]], float]]] = {}
    loaded = 0
    stored: list[str] = []
    quality: dict[int, str] = {}
    try:
        for size in sizes:
            secs = await load(deps, corpus[loaded:size], stored)
            print(f"loaded {size:,} memories ({(size - loaded) / secs:,.0f}/s)", flush=True)
            loaded = size
            added[0] = sizes.index(size) * total
            ids = [r.id for r in (await run(deps, "list", ListRequest(limit=200))).memories]
            # v3 `as_of`: every memory loaded is valid now, so it reads what a current read does.
            now = datetime.now(UTC)
            ops: dict[str, Callable[[int], Awaitable[object]]] = {
                "search, default (hybrid), from a workflow": search(None),
                "search, vector": search("vector"),
                "search, text": search("text"),
                "raw KNN, unfiltered (redisvl, same index)": raw_knn,
                "add, then describe of its workflow": add_then_describe,
                "describe of a workflow, no write between": lambda i: run(
                    deps, "describe", DescribeRequest(workflow_id=asked_from[i])
                ),
                "get 10 ids": lambda i, ids=ids: run(  # type: ignore[misc]
                    deps, "get", GetRequest(ids=ids[(i * 10) % 190 : (i * 10) % 190 + 10])
                ),
                "list 20, from a workflow": lambda i: run(
                    deps, "list", ListRequest(workflow_id=asked_from[i], limit=20)
                ),
                "search, default, as_of now": search(None, now),
                "list 20, from a workflow, as_of now": lambda i, now=now: run(  # type: ignore[misc]
                    deps, "list", ListRequest(workflow_id=asked_from[i], limit=20, as_of=now)
                ),
                "recall, one turn": lambda i, sid=f"s{size}": run(  # type: ignore[misc]
                    deps,
                    "recall",
                    RecallRequest(
                        message=queries[i].text, session_id=sid, workflow_id=asked_from[i]
                    ),
                ),
            }
            for name, request in ops.items():
                if args.ops not in name:
                    continue
                rows.setdefault(name, {})[size] = await redis_ms(
                    rds, stack.redis_url, deps, args.requests, request
                )
                ms, _, twice = rows[name][size]
                print(f"  {name}: {ms:.2f} ms ({twice:.2f} counted twice)", flush=True)
            # Queries of the loaded memories, asked from their own workflow (or any).
            probes = make_queries(args.quality, args.seed + size, corpus[:size])
            probe_wfs = [
                q.workflow_id or WORKFLOWS[i % len(WORKFLOWS)] for i, q in enumerate(probes)
            ]
            quality[size] = await source_found(deps, probes, probe_wfs, stored)
            print(f"  {quality[size]}", flush=True)
    finally:
        await nc.close()
        await embedder.close()
        await client.aclose()
        await rds.aclose()
        stack.stop()

    print(f"\nRedis ms per request (commandstats), {args.requests} requests each, {args.embedder}")
    print("| per request, in Redis | " + " | ".join(f"{s:,}" for s in sizes) + " |")
    print("| --- |" + " --- |" * len(sizes))
    for name, by_size in rows.items():
        cells = [f"{by_size[s][0]:.2f} ms" if s in by_size else "-" for s in sizes]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for size in sizes:
        print(f"quality at {size:,}: {quality[size]}")
    if args.json:
        table = {name: {str(s): by_size[s][0] for s in by_size} for name, by_size in rows.items()}
        with open(args.json, "w") as out:  # noqa: ASYNC230 - once, after the measurements
            json.dump({"sizes": sizes, "ms": table}, out, indent=1)
    print(f"\nWhere it goes at {sizes[-1]:,} (command: calls, ms per request):")
    for name, by_size in rows.items():
        top = ", ".join(f"{c} {n:.1f}x {ms:.2f}" for c, n, ms in by_size[sizes[-1]][1][:4])
        print(f"  {name}: {top}")


if __name__ == "__main__":
    asyncio.run(main())
