"""Bench: latency and throughput of the memory bus, beside the same Redis work done directly.

Starts the embedded stack (NATS, Redis Stack, N handlers, MEMBUS_EMBEDDER=hash), bulk-loads
synthetic memories through the bus SDK (concurrently; memories/s), then times sequential `add`,
`search` (limit 10, scope both, with a workflow_id) and `describe` through the bus, and beside
them from this process (no NATS, no handler): the same redisvl KNN query (same filter, same K)
with the query vector embedded before timing, embedding + KNN, Store.aggregate, and each
operation function in-process. Prints figures; not a test. Run from the project root:

    .venv/bin/python bench/bench_bus.py [--memories 10000] [--queries 1000] [--handlers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import redis
import redis.asyncio as aioredis
from redis.utils import HIREDIS_AVAILABLE
from redisvl.query import VectorQuery
from redisvl.query.filter import FilterExpression
from redisvl.version import __version__ as redisvl_version

from bus import MemoryBus
from contracts.messages import AddRequest, DescribeRequest, SearchRequest
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers import ops as operations
from handlers.embed import HashEmbedder
from handlers.ops.clock import now_ms
from handlers.ops.ranking import overfetch
from handlers.ops.scoping import read_scope
from handlers.service import make_deps
from handlers.settings import load_settings
from handlers.store.filters import read_filter
from handlers.store.record import CANDIDATE_FIELDS

NS = "bench"
LIMIT = 10
WARMUP = 30
TYPES = ("user_pref", "knowledge", "context", "decision")
WORKFLOWS = [f"wf_{i}" for i in range(6)]
TAGS = ["python", "infra", "db", "ui", "security", "billing", "ml", "docs", "urgent", "q3"]
PREFIXES = {
    "user_pref": ["The user prefers", "User dislikes", "Always answer with", "The user wants"],
    "knowledge": ["Fact:", "The docs say", "It is known that", "The API reference notes"],
    "context": ["Currently working on", "The last tool call returned", "This step looked at"],
    "decision": ["We decided to", "Team decision:", "Chose", "Rejected the option of"],
}
_WORDS = """
answer code example concise verbose python rust typescript golang database postgres redis mysql
sqlite index query latency throughput cache queue stream event message broker nats kafka deploy
kubernetes docker container cluster node replica shard backup restore schema migration table column
row vector embedding search ranking score memory agent workflow task plan step tool call result
error retry timeout budget cost invoice customer account user login password token session security
audit policy permission role team review merge branch release version changelog test unit
integration benchmark profile trace log metric alert dashboard incident outage fix patch bug
feature request design document spec api endpoint client server request reply json yaml config
setting default option flag environment staging production region latency network bandwidth storage
disk memory cpu thread async model prompt context window summary note meeting deadline monday
friday quarter roadmap
"""
VOCAB = _WORDS.split()
WEIGHTS = [1.0 / (rank + 1) ** 0.8 for rank in range(len(VOCAB))]  # Zipf-ish word frequencies

Memory = tuple[int, tuple[str, str], list[str]]  # workflow index, (type, content), tags


def make_memories(rng: random.Random, n: int) -> list[Memory]:
    out: list[Memory] = []
    for _ in range(n):
        type_ = rng.choice(TYPES)
        words = " ".join(rng.choices(VOCAB, WEIGHTS, k=rng.randint(6, 24)))
        tags = rng.sample(TAGS, rng.randint(1, 3)) if rng.random() < 0.4 else []
        content = f"{rng.choice(PREFIXES[type_])} {words}."
        out.append((rng.randrange(len(WORKFLOWS)), (type_, content), tags))
    return out


def make_queries(rng: random.Random, n: int) -> list[tuple[int, str]]:
    return [
        (rng.randrange(len(WORKFLOWS)), " ".join(rng.choices(VOCAB, WEIGHTS, k=rng.randint(3, 8))))
        for _ in range(n)
    ]


Call = Callable[[int], Awaitable[Any]]
Row = tuple[str, str, list[float], list[float]]  # operation, direct variant, bus ms, direct ms


async def timed(n: int, call: Call, warmup: bool = True) -> list[float]:
    """Milliseconds of `n` sequential calls (after a few untimed ones)."""
    for i in range(min(WARMUP, n) if warmup else 0):
        await call(i)
    out: list[float] = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        await call(i)
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def pct(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


def log_marks(log_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in log_dir.glob("handler-*.log")}


def handler_ms(log_dir: Path, marks: dict[Path, int], op: str) -> list[float]:
    """The handlers' own `ms` (JSON `request.done` lines) for `op` since `marks`."""
    out: list[float] = []
    for path in log_dir.glob("handler-*.log"):
        with path.open("rb") as fh:
            fh.seek(marks.get(path, 0))
            for line in fh:
                rec = json.loads(line) if line.startswith(b"{") else {}
                if rec.get("event") == "request.done" and rec.get("op") == op:
                    out.append(float(rec["ms"]))
    return out


async def bus_phase(log_dir: Path, op: str, n: int, call: Call) -> tuple[list[float], list[float]]:
    """Bus latencies, and the handler-side latencies of the same requests."""
    await timed(min(WARMUP, n), call, warmup=False)
    marks = log_marks(log_dir)
    return await timed(n, call, warmup=False), handler_ms(log_dir, marks, op)


async def noop_publish(subject: str, data: bytes) -> None:
    return None


def scope_filter(workflow: int) -> FilterExpression:
    # As the handler's search: expiry is checked on the candidates, not in the filter.
    return read_filter(None, read_scope("both", WORKFLOWS[workflow]))


def knn_query(vec: np.ndarray, workflow: int, policy: str) -> VectorQuery:
    """The query Store.knn builds: same filter, fields, hybrid policy, K = overfetch(limit)."""
    return VectorQuery(
        vector=vec.astype(np.float32).tobytes(),
        vector_field_name="embedding",
        return_fields=list(CANDIDATE_FIELDS),
        filter_expression=scope_filter(workflow),
        num_results=overfetch(LIMIT),
        hybrid_policy=policy,
    )


async def bench(args: argparse.Namespace, stack: EmbeddedStack, log_dir: Path) -> list[Row]:
    rng = random.Random(args.seed)
    memories, queries = make_memories(rng, args.memories), make_queries(rng, args.queries)
    adds = make_memories(rng, args.adds)
    bus = await MemoryBus.connect(stack.nats_url, namespace=NS, timeout=30.0)
    client = aioredis.Redis.from_url(stack.redis_url)
    agents = [bus.agent(workflow_id=wf, agent_id=f"agent_{i}") for i, wf in enumerate(WORKFLOWS)]
    embedder = HashEmbedder(384)
    settings = load_settings({"MEMBUS_EMBEDDER": "hash"})
    deps = make_deps(settings, client, embedder, noop_publish, max_payload=1024 * 1024)
    store = deps.store
    try:
        t0 = time.perf_counter_ns()
        for i in range(0, len(memories), args.batch):
            batch = memories[i : i + args.batch]
            await asyncio.gather(*(agents[w].add(*tc, tags=tg) for w, tc, tg in batch))
        secs = (time.perf_counter_ns() - t0) / 1e9
        print(f"\ningest: {len(memories)} memories through the bus in {secs:.2f} s, batches of")
        print(f"  {args.batch} concurrent adds -> {len(memories) / secs:,.0f} memories/s")
        index = (await store.indexes.get(NS)).index

        def bus_add(i: int) -> Awaitable[Any]:
            return agents[adds[i][0]].add(*adds[i][1], tags=adds[i][2])

        def op_add(i: int) -> Awaitable[Any]:
            w, (t, c), tg = adds[i]
            req = AddRequest(type=t, content=c, tags=tg, workflow_id=WORKFLOWS[w], agent_id="x")
            return operations.add(NS, req, deps)

        n = len(adds)
        b, h = await bus_phase(log_dir, "add", n, bus_add)
        rows: list[Row] = [("add", "handler log (ms)", b, h)]
        rows.append(("add", "in-process op (no publish)", b, await timed(n, op_add)))

        policies = [await store.hybrid_policy(NS, scope_filter(w)) for w in range(len(WORKFLOWS))]
        # (a): query vectors embedded and queries built BEFORE timing
        prebuilt = [knn_query(embedder.embed_one(q), w, policies[w]) for w, q in queries]

        async def embed_knn(i: int) -> Any:
            w, text = queries[i]
            [vec] = await embedder.embed([text])
            query = knn_query(vec, w, policies[w])
            return await index.search(query.query, query_params=query.params)

        def op_search(i: int) -> Awaitable[Any]:
            w, text = queries[i]
            req = SearchRequest(query=text, workflow_id=WORKFLOWS[w], limit=LIMIT, mode="vector")
            return operations.search(NS, req, deps)

        # The redisvl query beside it is a vector KNN, so the bus rows use vector mode; the
        # default hybrid mode (KNN and BM25 side by side) gets a row of its own below.
        def bus_search(i: int) -> Awaitable[Any]:
            return agents[queries[i][0]].search(queries[i][1], limit=LIMIT, mode="vector")

        def bus_hybrid(i: int) -> Awaitable[Any]:
            return agents[queries[i][0]].search(queries[i][1], limit=LIMIT, mode="hybrid")

        hits = [len((await bus_search(i)).results) for i in range(min(50, len(queries)))]
        k = overfetch(LIMIT)
        print(f"search: mean {statistics.mean(hits):.1f} results (limit {LIMIT}); direct K={k}")
        n = len(queries)
        b, h = await bus_phase(log_dir, "search", n, bus_search)
        rows.append(("search", "handler log (ms)", b, h))
        knn = await timed(
            n, lambda i: index.search(prebuilt[i].query, query_params=prebuilt[i].params)
        )
        rows.append(("search", "(a) redisvl KNN only", b, knn))
        rows.append(("search", "(b) embed + filter + KNN", b, await timed(n, embed_knn)))
        rows.append(("search", "in-process op (+rank, bump)", b, await timed(n, op_search)))
        b, h = await bus_phase(log_dir, "search", n, bus_hybrid)
        rows.append(("hybrid", "handler log (ms)", b, h))
        rows.append(("hybrid", "(a) redisvl KNN only", b, knn))

        scopes = [read_scope("both", WORKFLOWS[i % len(WORKFLOWS)]) for i in range(args.describes)]
        reqs = [DescribeRequest(workflow_id=scope.workflow_id) for scope in scopes]
        d, nw = len(scopes), len(WORKFLOWS)
        b, h = await bus_phase(log_dir, "describe", d, lambda i: agents[i % nw].describe())
        agg = await timed(d, lambda i: store.aggregate(NS, read_filter(now_ms(), scopes[i])))
        rows.append(("describe", "handler log (ms)", b, h))
        rows.append(("describe", "Store.aggregate", b, agg))
        op = await timed(d, lambda i: operations.describe(NS, reqs[i], deps))
        rows.append(("describe", "in-process op", b, op))
        return rows
    finally:
        await bus.close()
        await client.aclose()


def print_table(rows: list[Row]) -> None:
    print("\nms, sequential requests. 'direct' = from this process, no NATS, no handler; (a)")
    print("excludes embedding (query vectors embedded before timing), (b) includes it.")
    print("'handler log' = the handler's own time for the same requests (request.done ms).\n")
    print(
        f"{'operation':<9} {'direct variant':<28} {'bus p50':>8} {'bus p99':>8} "
        f"{'dir p50':>8} {'dir p99':>8} {'ratio p50':>9}  n bus/dir"
    )
    for op, variant, bus_s, dir_s in rows:
        (bp50, bp99), (dp50, dp99) = pct(bus_s), pct(dir_s)
        print(
            f"{op:<9} {variant:<28} {bp50:8.3f} {bp99:8.3f} {dp50:8.3f} {dp99:8.3f} "
            f"{bp50 / dp50:9.2f}  {len(bus_s)}/{len(dir_s)}"
        )


async def main(args: argparse.Namespace) -> None:
    stack = EmbeddedStack.temporary()
    log_dir = stack.log_dir = stack.data_dir / "logs"  # handler JSON logs: per-request "ms"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {cpus} usable cores ({os.cpu_count()} total), {platform.machine()}, ", end="")
    print(f"{platform.system()} {platform.release()}; python {platform.python_version()}")
    print(f"redis-py {redis.__version__} (hiredis: {HIREDIS_AVAILABLE}), redisvl {redisvl_version}")
    print(
        f"handlers: {args.handlers} process(es), embedder hash/384; memories {args.memories}, "
        f"queries {args.queries}, adds {args.adds}, describes {args.describes}, seed {args.seed}"
    )
    try:
        stack.start_servers()
        procs = stack.start_handlers(args.handlers, env={"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(stack.nats_url, args.handlers, procs)
        print_table(await bench(args, stack, log_dir))
    finally:
        stack.stop()


OPTIONS = dict(
    memories=10_000, queries=1000, handlers=1, adds=1000, describes=300, batch=64, seed=7
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="memory-bus latency bench (see the module docstring)")
    for name, default in OPTIONS.items():
        p.add_argument(f"--{name}", type=int, default=default, help=f"default {default}")
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
