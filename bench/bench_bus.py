"""Bench: latency of the memory bus, beside the same Redis work done directly, with the CPU
each process spends per operation.

Starts the embedded stack (NATS, Redis Stack, N handlers, MEMBUS_EMBEDDER=--embedder), bulk-loads
a seeded corpus (bench/corpus.py: 8-60 word memories of four types, tags, workflows, TTLs,
people) through the bus SDK (batches of concurrent adds; memories/s), then times sequential
`add`, `search` (limit 10, scope both, the query's workflow) and `describe` through the bus,
and beside them from this process (no NATS, no handler): the same redisvl KNN query (same
filter, same K) with the query vector embedded before timing, embedding + KNN, Store.aggregate,
and each operation function in-process. For every timed phase it also reads the CPU time of
the handlers, Redis, nats-server and this process from /proc (bench/capacity.py) and prints CPU
ms per operation by process. Prints figures; not a test. Run from the project root:

    .venv/bin/python bench/bench_bus.py [--memories 10000] [--queries 1000] [--handlers 1]
        [--embedder hash|minilm] [--adds 1000] [--describes 300] [--batch 64] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import redis
import redis.asyncio as aioredis
from capacity import CpuCost, CpuMeter, print_costs
from corpus import (
    WORKFLOWS,
    Agents,
    CorpusMemory,
    CorpusQuery,
    load,
    make_corpus,
    summarize,
)
from corpus import make_queries as corpus_queries
from measure import percentile, usable_cores
from redis.utils import HIREDIS_AVAILABLE
from redisvl.query import VectorQuery
from redisvl.query.filter import FilterExpression
from redisvl.version import __version__ as redisvl_version

from bus import MemoryBus
from contracts.messages import AddRequest, DescribeRequest, SearchRequest
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.ops import reads, writes
from handlers.ops import search as search_ops
from handlers.ops.clock import now_ms
from handlers.ops.ranking import overfetch
from handlers.ops.scoping import read_scope
from handlers.service import make_deps, make_embedder
from handlers.settings import load_settings
from handlers.store.filters import read_filter
from handlers.store.record import CANDIDATE_FIELDS

NS = "bench"
LIMIT = 10
WARMUP = 30

# --- kept for bench/recall.py, which imports these shapes; they draw from corpus.py now ---
Memory = tuple[int, tuple[str, str], list[str]]  # workflow index, (type, content), tags
_last_corpus: list[CorpusMemory] = []


def _workflow_index(workflow_id: str | None, rng: random.Random) -> int:
    # The old shape has no "no workflow": a general memory goes through a random workflow's
    # agent (user_pref and knowledge are stored general by their type anyway).
    return WORKFLOWS.index(workflow_id) if workflow_id else rng.randrange(len(WORKFLOWS))


def make_memories(rng: random.Random, n: int) -> list[Memory]:
    """`n` corpus memories in the old tuple shape (bench/recall.py)."""
    memories = make_corpus(n, rng.randrange(2**31))
    _last_corpus[:] = memories
    return [
        (_workflow_index(m.workflow_id, rng), (m.type, m.content), list(m.tags)) for m in memories
    ]


def make_queries(rng: random.Random, n: int) -> list[tuple[int, str]]:
    """`n` corpus queries over the memories `make_memories` made last (old tuple shape)."""
    queries = corpus_queries(n, rng.randrange(2**31), _last_corpus or None)
    return [(_workflow_index(q.workflow_id, rng), q.text) for q in queries]


# --- timing helpers (also used by bench/recall.py) ---
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
    return percentile(samples, 50), percentile(samples, 99)


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


class Phases:
    """Timed phases with the CPU each process spent in them. Warm-up calls use the indices
    after the timed ones (`n .. n+WARMUP-1`), so no timed add repeats a warm-up add (which
    would take the duplicate path) and no timed query is one whose embedding is cached."""

    def __init__(self, meter: CpuMeter, log_dir: Path) -> None:
        self.meter, self.log_dir = meter, log_dir
        self.costs: list[tuple[str, CpuCost]] = []

    async def direct(self, name: str, n: int, call: Call) -> list[float]:
        for i in range(n, n + min(WARMUP, n)):
            await call(i)
        before = self.meter.snapshot()
        samples = await timed(n, call, warmup=False)
        self.costs.append((name, self.meter.since(before, n)))
        return samples

    async def bus(self, name: str, op: str, n: int, call: Call) -> tuple[list[float], list[float]]:
        for i in range(n, n + min(WARMUP, n)):
            await call(i)
        marks = log_marks(self.log_dir)
        before = self.meter.snapshot()
        samples = await timed(n, call, warmup=False)
        self.costs.append((name, self.meter.since(before, n)))
        return samples, handler_ms(self.log_dir, marks, op)


def scope_filter(workflow_id: str | None) -> FilterExpression:
    # As the handler's search: expiry is checked on the candidates, not in the filter.
    return read_filter(None, read_scope("both", workflow_id))


def knn_query(vec: np.ndarray, workflow_id: str | None, policy: str) -> VectorQuery:
    """The query Store.knn builds: same filter, fields, hybrid policy, K = overfetch(limit)."""
    return VectorQuery(
        vector=vec.astype(np.float32).tobytes(),
        vector_field_name="embedding",
        return_fields=list(CANDIDATE_FIELDS),
        filter_expression=scope_filter(workflow_id),
        num_results=overfetch(LIMIT),
        hybrid_policy=policy,
    )


def _torch_encoder() -> Any:
    """sentence-transformers on torch with the weights the service runs, if installed."""
    try:
        from sentence_transformers import SentenceTransformer

        from handlers.embed import onnx_export
    except ImportError:
        print("(c) skipped: sentence-transformers (torch) is not installed")
        return None
    return SentenceTransformer(str(onnx_export.default_model_dir()), device="cpu")


async def _encoded(model: Any, text: str) -> Any:
    return model.encode([text])


def add_request(m: CorpusMemory) -> AddRequest:
    return AddRequest(
        type=m.type,
        content=m.content,
        tags=list(m.tags),
        importance=m.importance,
        ttl_s=m.ttl_s,
        related_people=list(m.related_people),
        workflow_id=m.workflow_id,
        agent_id=m.agent_id,
    )


async def bench(
    args: argparse.Namespace, stack: EmbeddedStack, log_dir: Path
) -> tuple[list[Row], list[tuple[str, CpuCost]]]:
    # One corpus: the bulk load, then the timed bus adds, then the in-process adds (each with
    # WARMUP more), all distinct memories of the same distribution.
    extra = args.adds + WARMUP
    corpus = make_corpus(args.memories + 2 * extra, args.seed)
    memories = corpus[: args.memories]
    bus_adds = corpus[args.memories : args.memories + extra]
    op_adds = corpus[args.memories + extra :]
    queries: list[CorpusQuery] = corpus_queries(args.queries + WARMUP, args.seed, memories)
    print(summarize(memories, queries))

    meter = CpuMeter(stack)
    phases = Phases(meter, log_dir)
    bus = await MemoryBus.connect(stack.nats_url, namespace=NS, timeout=60.0)
    agents = Agents(bus)
    client = aioredis.Redis.from_url(stack.redis_url)
    settings = load_settings(
        {"MEMBUS_EMBEDDER": args.embedder, "MEMBUS_REDIS_URL": stack.redis_url}
    )
    embedder = make_embedder(settings, client)  # as the handler's (minilm: cached in Redis)
    raw = getattr(embedder, "inner", embedder)  # the model itself, for embedding costs
    deps = make_deps(settings, client, embedder, noop_publish, max_payload=1024 * 1024)
    store = deps.store
    try:
        before = meter.snapshot()
        await load(agents, memories, args.batch)
        ingest = meter.since(before, len(memories))
        phases.costs.append((f"ingest ({args.batch} concurrent)", ingest))
        print(f"\ningest: {len(memories)} memories through the bus in {ingest.wall_s:.2f} s,")
        print(
            f"  batches of {args.batch} concurrent adds, embedder {args.embedder} ->"
            f" {len(memories) / ingest.wall_s:,.0f} memories/s"
        )
        index = (await store.indexes.get(NS)).index

        n = args.adds
        b, h = await phases.bus("add (bus)", "add", n, lambda i: agents.add(bus_adds[i]))
        rows: list[Row] = [("add", "handler log (ms)", b, h)]
        op = await phases.direct(
            "add in-process op", n, lambda i: writes.add(NS, add_request(op_adds[i]), deps)
        )
        rows.append(("add", "in-process op (no publish)", b, op))

        scopes = sorted({q.workflow_id or "" for q in queries})
        policies = {
            wf or None: await store.queries.hybrid_policy(NS, scope_filter(wf or None))
            for wf in scopes
        }
        # (a): query vectors embedded and queries built BEFORE timing
        texts = [q.text for q in queries]
        vecs = [v for i in range(0, len(texts), 64) for v in await raw.embed(texts[i : i + 64])]
        prebuilt = [
            knn_query(v, q.workflow_id, policies[q.workflow_id])
            for v, q in zip(vecs, queries, strict=True)
        ]

        async def embed_knn(i: int) -> Any:
            q = queries[i]
            [vec] = await raw.embed([q.text])
            query = knn_query(vec, q.workflow_id, policies[q.workflow_id])
            return await index.search(query.query, query_params=query.params)

        def op_search(i: int) -> Awaitable[Any]:
            q = queries[i]
            req = SearchRequest(query=q.text, workflow_id=q.workflow_id, limit=LIMIT, mode="vector")
            return search_ops.search(NS, req, deps)

        # The redisvl query beside it is a vector KNN, so the bus rows use vector mode; the
        # default hybrid mode (KNN and BM25 side by side) gets a row of its own below.
        def bus_search(i: int) -> Awaitable[Any]:
            return agents.search(queries[i], limit=LIMIT, mode="vector")

        def bus_hybrid(i: int) -> Awaitable[Any]:
            return agents.search(queries[i], limit=LIMIT, mode="hybrid")

        n = args.queries
        b, h = await phases.bus("search vector (bus)", "search", n, bus_search)
        hits = [len((await bus_search(i)).results) for i in range(min(100, n))]
        rows.append(("search", "handler log (ms)", b, h))
        knn = await phases.direct(
            "(a) redisvl KNN only",
            n,
            lambda i: index.search(prebuilt[i].query, query_params=prebuilt[i].params),
        )
        rows.append(("search", "(a) redisvl KNN only", b, knn))
        ek = await phases.direct("(b) embed + filter + KNN", n, embed_knn)
        rows.append(("search", "(b) embed + filter + KNN", b, ek))
        op = await phases.direct("search in-process op", n, op_search)
        rows.append(("search", "in-process op (+rank, bump)", b, op))
        if args.embedder == "minilm" and (torch := _torch_encoder()) is not None:
            # The bar an agent would otherwise pay before any search: encoding the query
            # with sentence-transformers on torch (the same weights, CPU), in this process.
            enc = await phases.direct(
                "(c) torch encode only", n, lambda i: _encoded(torch, queries[i].text)
            )
            rows.append(("search", "(c) torch encode of the query", b, enc))
        b, h = await phases.bus("search hybrid (bus)", "search", n, bus_hybrid)
        rows.append(("hybrid", "handler log (ms)", b, h))
        rows.append(("hybrid", "(a) redisvl KNN only", b, knn))
        print(
            f"search: mean {statistics.mean(hits):.1f} results (limit {LIMIT}) over"
            f" {len(hits)} vector queries; direct K={overfetch(LIMIT)}"
        )
        if raw is not embedder:
            print(
                "  (embeddings are cached in Redis, as in the handler: the vector bus row embeds"
                " each query, the in-process op and the hybrid row then find it cached; (b)"
                " embeds with the model itself)"
            )

        workflows: list[str | None] = [None, *WORKFLOWS]  # general only, then each workflow
        d, nw = args.describes, len(workflows)
        read_scopes = [read_scope("both", workflows[i % nw]) for i in range(d + WARMUP)]
        reqs = [DescribeRequest(workflow_id=s.workflow_id) for s in read_scopes]
        b, h = await phases.bus(
            "describe (bus)", "describe", d, lambda i: agents.get(workflows[i % nw]).describe()
        )
        agg = await phases.direct(
            "Store.aggregate",
            d,
            lambda i: store.queries.aggregate(NS, read_filter(now_ms(), read_scopes[i])),
        )
        rows.append(("describe", "handler log (ms)", b, h))
        rows.append(("describe", "Store.aggregate", b, agg))
        op = await phases.direct(
            "describe in-process op", d, lambda i: reads.describe(NS, reqs[i], deps)
        )
        rows.append(("describe", "in-process op", b, op))
        return rows, phases.costs
    finally:
        await embedder.close()
        await bus.close()
        await client.aclose()


def print_table(rows: Sequence[Row]) -> None:
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


def print_overhead(rows: Sequence[Row]) -> None:
    """What the bus adds over the direct redisvl query (and over the handler's own time)."""
    by = {(op, variant): (b, d) for op, variant, b, d in rows}
    print("\nbus overhead vs the direct redisvl KNN query (p50 ms; the KNN's own p50 = 1x):")
    for op in ("search", "hybrid"):
        if (op, "(a) redisvl KNN only") not in by:
            continue
        b, knn = by[(op, "(a) redisvl KNN only")]
        _, h = by[(op, "handler log (ms)")]
        bp, kp, hp = pct(b)[0], pct(knn)[0], pct(h)[0]
        label = "search (vector)" if op == "search" else "search (hybrid)"
        print(
            f"  {label:<16} bus {bp:6.2f} = KNN {kp:5.2f} + handler's other work {hp - kp:5.2f}"
            f" + NATS/SDK/queueing {bp - hp:5.2f}  -> {bp / kp:4.1f}x the direct query"
        )


async def main(args: argparse.Namespace) -> None:
    stack = EmbeddedStack.temporary()
    log_dir = stack.log_dir = stack.data_dir / "logs"  # handler JSON logs: per-request "ms"
    cores = usable_cores()
    print(f"machine: {cores} usable cores ({os.cpu_count()} total), {platform.machine()}, ", end="")
    print(f"{platform.system()} {platform.release()}; python {platform.python_version()}")
    print(f"redis-py {redis.__version__} (hiredis: {HIREDIS_AVAILABLE}), redisvl {redisvl_version}")
    print(
        f"handlers: {args.handlers} process(es), embedder {args.embedder}; memories"
        f" {args.memories}, queries {args.queries}, adds {args.adds}, describes"
        f" {args.describes}, seed {args.seed}"
    )
    try:
        stack.start_servers()
        procs = stack.start_handlers(args.handlers, env={"MEMBUS_EMBEDDER": args.embedder})
        await wait_for_handlers(stack.nats_url, args.handlers, procs, timeout=180)
        rows, costs = await bench(args, stack, log_dir)
        print_table(rows)
        print_overhead(rows)
        print_costs(costs, cores)
    finally:
        stack.stop()


OPTIONS = dict(
    memories=10_000, queries=1000, handlers=1, adds=1000, describes=300, batch=64, seed=7
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="memory-bus latency bench (see the module docstring)")
    for name, default in OPTIONS.items():
        p.add_argument(f"--{name}", type=int, default=default, help=f"default {default}")
    p.add_argument("--embedder", choices=("hash", "minilm"), default="hash")
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
