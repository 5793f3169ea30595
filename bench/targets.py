"""Bench: issue 36's three targets, each as p50 ratios measured in the same run, repeated.

(a) vector search through the bus (NATS request, one handler, hash embedder) against a raw
    unfiltered KNN on the same index from redis-py (`FT.SEARCH ... *=>[KNN 10 ...]`, the
    query vector made before timing), at each `--sizes` of the seeded corpus of
    bench/corpus.py, queries asked with their own workflow (bench_bus.py's). Target <= 6x.
(b) default search (hybrid, all-MiniLM-L6-v2 handler) over 2,000 LoCoMo items through the
    bus, against a bare sentence-transformers (torch) encode of the same question in this
    process (bench_bus.py's encoder) on one thread, as the handler runs its model
    (MEMBUS_MINILM_THREADS=1); also on torch's own thread count (the cores), which is
    faster on an idle machine and many times slower on a busy one (its threads wait for
    each other). Each question is asked once (its embedding not cached yet), a disjoint
    share of them per run. Target <= 0.35x.
(c) Redis main-thread CPU (/proc/<pid>/task/<pid>/stat utime + stime) per default search at
    the largest size, asked from a workflow (store_cost.py's queries), and per add followed
    by a describe; requests in this process through `dispatch()`, with what they leave
    running after the reply. Target <= 3 ms per search.

Bus and reference requests alternate in blocks, so that load from elsewhere on the machine
falls on both; each target runs `--runs` times (other queries each time) and prints the
median and range. Memories are loaded in this process by the add operation itself
(store_cost.py's `load`), the fastest way in.

LoCoMo: the five conversations in ../shared/data/locomo/ hold 1,210 observations (what
bench/locomo.py stores); the 790 after them are the conversations' own turns (the text each
speaker said, in order), so that one namespace holds 2,000. Questions: categories 1-4.

    .venv/bin/python bench/targets.py [--targets a,b,c] [--sizes 20000,100000] [--runs 3]
        [--queries 300] [--json bench/results/targets.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import redis.asyncio as aioredis
from bench_bus import _torch_encoder
from corpus import WORKFLOWS, Agents, CorpusQuery, make_corpus, make_queries
from locomo import DATA, tag_of
from locomo import load as locomo_load
from measure import percentile, proc_cpu_ms
from roundtrips import InProcess
from store_cost import load as load_memories

from bus import MemoryBus
from contracts.messages import AddRequest, DescribeRequest, SearchRequest
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.logs import configure_logging

NS = "targets"
LOCOMO_NS = "locomo2k"
LIMIT = 10
BLOCK = 25  # requests of one kind before the other kind's
WARMUP = 30

Call = Callable[[int], Awaitable[object]]


@dataclass
class Ratio:
    """One run of a target: the bus's and the reference's p50 (ms), and their ratio."""

    bus_ms: float
    ref_ms: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.bus_ms / self.ref_ms


@dataclass
class Target:
    name: str
    bus: str  # what the bus figure is
    ref: str  # what the reference is
    goal: str
    runs: list[Ratio] = field(default_factory=list)


async def alternate(n: int, *calls: Call) -> list[list[float]]:
    """ms of each `call(i)` for i < n, in turns of BLOCK requests of each."""
    out: list[list[float]] = [[] for _ in calls]
    for start in range(0, n, BLOCK):
        for call, samples in zip(calls, out, strict=True):
            for i in range(start, min(n, start + BLOCK)):
                t0 = time.perf_counter_ns()
                await call(i)
                samples.append((time.perf_counter_ns() - t0) / 1e6)
    return out


async def wait_indexed(rds: aioredis.Redis, index: str) -> None:
    """Until RediSearch has indexed every document of `index` (after a promotion's rebuild)."""
    for _ in range(600):
        info = await rds.ft(index).info()
        if (
            str(info.get("indexing", "0")) in ("0", "0.0")
            and float(info.get("percent_indexed", 1)) >= 1
        ):
            return
        await asyncio.sleep(0.5)


async def own_index(rds: aioredis.Redis, ns: str) -> tuple[str, str]:
    """The name of the index holding `ns` (the largest whose name has it) and its vector
    field, read from Redis, not from the store's code (which issue 36 rebuilds)."""
    best: tuple[int, str, str] | None = None
    for raw in await rds.execute_command("FT._LIST"):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        if ns not in name:
            continue
        info = await rds.ft(name).info()
        vector = next(
            (_text(a[1]) for a in info["attributes"] if b"VECTOR" in [_b(x) for x in a]), None
        )
        if vector is not None and (best is None or int(info["num_docs"]) > best[0]):
            best = (int(info["num_docs"]), name, vector)
    if best is None:
        raise SystemExit(f"no vector index holds namespace {ns!r}")
    return best[1], best[2]


def _b(x: object) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


def _text(x: object) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def p50(samples: list[float]) -> float:
    return percentile(samples, 50)


# --------------------------------------------------------------------------- (a) and (c)


async def targets_hash(args: argparse.Namespace, out: dict[str, Target]) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    stack = EmbeddedStack.temporary()
    stack.start_servers()
    try:
        procs = stack.start_handlers(1, env={"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        app = await InProcess(stack, "hash").with_nats()
        rds = aioredis.Redis.from_url(stack.redis_url)
        bus = await MemoryBus.connect(stack.nats_url, namespace=NS, timeout=60.0)
        agents = Agents(bus)
        per_run = args.queries + WARMUP
        corpus = make_corpus(sizes[-1], args.seed)
        # New memories for (c)'s adds (a repeat would only count a mention).
        extra = make_corpus(sizes[-1] + per_run * args.runs, args.seed + 1)[sizes[-1] :]
        loaded = 0
        stored: list[str] = []
        try:
            for size in sizes:
                secs = await load_memories(app.deps, corpus[loaded:size], stored, ns=NS)
                await app.settle()
                print(f"loaded {size:,} memories ({(size - loaded) / secs:,.0f}/s)", flush=True)
                loaded = size
                index, vector_field = await own_index(rds, NS)
                await wait_indexed(rds, index)
                queries = make_queries(per_run * args.runs, args.seed + size, corpus[:size])
                if "a" in args.targets:
                    await target_a(args, out, size, queries, agents, app, rds, index, vector_field)
                if "c" in args.targets and size == sizes[-1]:
                    await target_c(args, out, size, queries, extra, app, stack)
        finally:
            await bus.close()
            await rds.aclose()
            await app.close()
    finally:
        stack.stop()


async def target_a(
    args: argparse.Namespace,
    out: dict[str, Target],
    size: int,
    queries: list[CorpusQuery],
    agents: Agents,
    app: InProcess,
    rds: aioredis.Redis,
    index: str,
    vector_field: str,
) -> None:
    target = out.setdefault(
        f"a{size}",
        Target(
            f"(a) vector search, {size:,} memories",
            "bus p50, mode vector, hash, the query's workflow",
            "raw unfiltered KNN 10 (redis-py FT.SEARCH)",
            "<= 6x",
        ),
    )
    vectors = [
        np.asarray(v, np.float32).tobytes()
        for v in await app.embedder.embed([q.text for q in queries])
    ]
    knn = f"*=>[KNN {LIMIT} @{vector_field} $vec AS dist]"
    per_run = args.queries + WARMUP
    for run in range(args.runs):
        mine = queries[run * per_run : (run + 1) * per_run]
        vecs = vectors[run * per_run : (run + 1) * per_run]

        def bus_search(i: int, mine: list[CorpusQuery] = mine) -> Awaitable[object]:
            return agents.search(mine[i], limit=LIMIT, mode="vector")

        def raw_knn(i: int, vecs: list[bytes] = vecs) -> Awaitable[object]:
            return rds.execute_command(
                "FT.SEARCH", index, knn, "PARAMS", 2, "vec", vecs[i], "SORTBY", "dist",
                "RETURN", 1, "dist", "LIMIT", 0, LIMIT, "DIALECT", 2,
            )  # fmt: skip

        for i in range(args.queries, per_run):  # warm-up: the run's other queries
            await bus_search(i)
            await raw_knn(i)
        bus_ms, ref_ms = await alternate(args.queries, bus_search, raw_knn)
        target.runs.append(Ratio(p50(bus_ms), p50(ref_ms), {"bus_p99": percentile(bus_ms, 99)}))
        print(f"  {target.name}, run {run + 1}: {_line(target.runs[-1])}", flush=True)


async def target_c(
    args: argparse.Namespace,
    out: dict[str, Target],
    size: int,
    queries: list[CorpusQuery],
    extra: list[Any],
    app: InProcess,
    stack: EmbeddedStack,
) -> None:
    pid = stack.servers["redis"].pid
    search = out.setdefault(
        "c_search",
        Target(
            f"(c) Redis main-thread CPU per default search, {size:,}",
            "ms of Redis main thread per search (hybrid, from a workflow)",
            "the target, 3 ms",
            "<= 3 ms",
        ),
    )
    pair = out.setdefault(
        "c_add_describe",
        Target(
            f"(c) Redis main-thread CPU per add + describe, {size:,}",
            "ms of Redis main thread per add then describe of its workflow",
            "(met before: 2.7 ms)",
            "",
        ),
    )
    per_run = args.queries + WARMUP
    # Redis's own work while idle (cron, RediSearch's fork GC), per second, for reference.
    before, t0 = proc_cpu_ms(pid, pid), time.perf_counter()
    await asyncio.sleep(3.0)
    idle = (proc_cpu_ms(pid, pid) - before) / (time.perf_counter() - t0)
    for run in range(args.runs):
        mine = queries[run * per_run : (run + 1) * per_run]
        adds = extra[run * per_run : (run + 1) * per_run]

        def asked(i: int, mine: list[CorpusQuery] = mine) -> str:
            return mine[i].workflow_id or WORKFLOWS[i % len(WORKFLOWS)]

        async def one_search(i: int, mine: list[CorpusQuery] = mine) -> None:
            req = SearchRequest(query=mine[i].text, workflow_id=asked(i), limit=LIMIT)
            await app.ask(NS, "search", req)

        async def add_describe(i: int, adds: list[Any] = adds) -> None:
            m = adds[i]
            req = AddRequest(workflow_id=asked(i), agent_id=m.agent_id, **m.add_kwargs())
            await app.ask(NS, "add", req)
            await app.ask(NS, "describe", DescribeRequest(workflow_id=asked(i)))

        for target, call in ((search, one_search), (pair, add_describe)):
            # Warm-up: the run's other requests, and the searches themselves once (their
            # words' index forms are then known, as a handler long in service knows them).
            warm = range(per_run) if call is one_search else range(args.queries, per_run)
            for i in warm:
                await call(i)
            await app.settle()
            cpu0, all0, t0 = proc_cpu_ms(pid, pid), proc_cpu_ms(pid), time.perf_counter()
            for i in range(args.queries):
                await call(i)
            await app.settle()
            secs = time.perf_counter() - t0
            main_ms = (proc_cpu_ms(pid, pid) - cpu0) / args.queries
            all_ms = (proc_cpu_ms(pid) - all0) / args.queries
            idle_ms = idle * secs / args.queries
            target.runs.append(
                Ratio(
                    main_ms,
                    3.0,
                    {"all_threads_ms": all_ms, "idle_share_ms": idle_ms, "wall_ms": secs * 1000},
                )
            )
            print(
                f"  {target.name}, run {run + 1}: main thread {main_ms:.2f} ms (all threads"
                f" {all_ms:.2f}, of which idle work {idle_ms:.2f}), wall"
                f" {secs * 1000 / args.queries:.2f} ms",
                flush=True,
            )


# --------------------------------------------------------------------------- (b)


def locomo_items(data: Path, n: int) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(text, speaker) of `n` LoCoMo items (observations first, then turns), the questions of
    categories 1-4, and those of category 5 (for warm-up)."""
    files = sorted(data.glob("conv-*.json"))
    if not files:
        raise SystemExit(f"no conv-*.json under {data}")
    observations: list[tuple[str, str]] = []
    turns: list[tuple[str, str]] = []
    questions: list[str] = []
    others: list[str] = []
    for path in files:
        facts, asked = locomo_load(path)
        observations += [(f.content, f.speaker) for f in facts]
        questions += [q for q, _, _ in asked]
        conv = json.loads(path.read_text())
        c = conv.get("conversation", conv)
        sessions = sorted(
            (k for k in c if k.startswith("session_") and k.split("_")[1].isdigit()
             and k.count("_") == 1),
            key=lambda k: int(k.split("_")[1]),
        )  # fmt: skip
        for key in sessions:
            turns += [(t["text"], t["speaker"]) for t in c[key] if t.get("text")]
        qa = conv.get("qa") or c.get("qa") or []
        others += [q["question"] for q in qa if q.get("category") == 5]
    items = (observations + turns)[:n]
    if len(items) < n:
        raise SystemExit(f"LoCoMo under {data} has {len(items)} items, fewer than {n}")
    return items, questions, others


async def target_b(args: argparse.Namespace, out: dict[str, Target]) -> None:
    import torch as torch_threads

    torch = _torch_encoder()
    if torch is None:
        raise SystemExit("(b) needs sentence-transformers (torch) in the venv")
    items, questions, others = locomo_items(args.data, args.locomo)
    target = out.setdefault(
        "b",
        Target(
            f"(b) default minilm search, {len(items):,} LoCoMo items",
            "bus p50, mode hybrid (default), question not asked before",
            "torch encode of the question (sentence-transformers, 1 thread as the handler's model)",
            "<= 0.35x",
        ),
    )
    stack = EmbeddedStack.temporary()
    stack.start_servers()
    try:
        procs = stack.start_handlers(1, env={"MEMBUS_EMBEDDER": "minilm"})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=300)
        async with await MemoryBus.connect(stack.nats_url, namespace=LOCOMO_NS, timeout=60) as bus:
            mem = bus.agent(agent_id="locomo")
            t0 = time.perf_counter()
            for i in range(0, len(items), 32):
                await asyncio.gather(
                    *(
                        mem.add("fact", text, tags=[tag_of(s)], dedup="none")
                        for text, s in items[i : i + 32]
                    )
                )
            secs = time.perf_counter() - t0
            print(f"loaded {len(items):,} LoCoMo items ({len(items) / secs:,.0f}/s)", flush=True)
            asker = bus.agent(agent_id="asker")
            for q in others[:WARMUP]:
                await asker.search(q, limit=LIMIT)
                torch.encode([q])
            share = len(questions) // args.runs
            for run in range(args.runs):
                mine = questions[run * share : (run + 1) * share]

                def bus_search(i: int, mine: list[str] = mine) -> Awaitable[object]:
                    return asker.search(mine[i], limit=LIMIT)

                async def encode(i: int, mine: list[str] = mine) -> None:
                    torch.encode([mine[i]])

                async def encode_1(i: int, mine: list[str] = mine) -> None:
                    threads = torch_threads.get_num_threads()
                    torch_threads.set_num_threads(1)
                    try:
                        torch.encode([mine[i]])
                    finally:
                        torch_threads.set_num_threads(threads)

                bus_ms, ref_ms, both_ms = await alternate(len(mine), bus_search, encode_1, encode)
                # The same questions again: their embeddings are cached now (in Redis).
                again = [0.0] * len(mine)
                for i in range(len(mine)):
                    t0 = time.perf_counter()
                    await bus_search(i)
                    again[i] = (time.perf_counter() - t0) * 1000
                target.runs.append(
                    Ratio(
                        p50(bus_ms),
                        p50(ref_ms),
                        {
                            "bus_p99": percentile(bus_ms, 99),
                            "bus_cached_p50": p50(again),
                            "torch_default_threads_p50": p50(both_ms),
                            "ratio_to_default_threads": p50(bus_ms) / p50(both_ms),
                        },
                    )
                )
                print(
                    f"  {target.name}, run {run + 1} ({len(mine)} questions):"
                    f" {_line(target.runs[-1])}; torch on its {torch_threads.get_num_threads()}"
                    f" threads {p50(both_ms):.2f} ms ({p50(bus_ms) / p50(both_ms):.2f}x);"
                    f" asked again (cached embedding)"
                    f" {p50(again):.2f} ms",
                    flush=True,
                )
    finally:
        stack.stop()


# --------------------------------------------------------------------------- summary


def _line(r: Ratio) -> str:
    return f"bus {r.bus_ms:.2f} ms, reference {r.ref_ms:.2f} ms, ratio {r.ratio:.2f}x"


def _spread(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def summary(out: dict[str, Target]) -> str:
    lines = [
        "| target | measured (p50) | reference (p50) | ratio | goal |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in out.values():
        bus = [r.bus_ms for r in t.runs]
        ref = [r.ref_ms for r in t.runs]
        if t.name.startswith("(c)"):
            lines.append(f"| {t.name} | {_spread(bus, '.2f')} ms | | | {t.goal} |")
            continue
        ratios = [r.ratio for r in t.runs]
        lines.append(
            f"| {t.name} | {_spread(bus, '.2f')} ms | {_spread(ref, '.2f')} ms |"
            f" {_spread(ratios, '.2f')}x | {t.goal} |"
        )
        if all("torch_default_threads_p50" in r.extra for r in t.runs):
            other = [r.extra["torch_default_threads_p50"] for r in t.runs]
            ratios = [r.extra["ratio_to_default_threads"] for r in t.runs]
            cached = [r.extra["bus_cached_p50"] for r in t.runs]
            lines.append(
                f"| {t.name}, against torch on its own thread count | |"
                f" {_spread(other, '.2f')} ms |"
                f" {_spread(ratios, '.2f')}x | |"
            )
            lines.append(
                f"| {t.name}, asked again (embedding cached) | {_spread(cached, '.2f')} ms | | | |"
            )
    return "\n".join(lines)


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="a,b,c", help="which of a, b, c")
    p.add_argument("--sizes", default="20000,100000", help="(a) sizes, ascending; (c) the last")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--queries", type=int, default=300, help="(a), (c): requests timed per run")
    p.add_argument("--locomo", type=int, default=2000, help="(b) LoCoMo items loaded")
    p.add_argument("--data", type=Path, default=DATA, help="(b) the LoCoMo directory")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", default=None, help="also write every run's figures here")
    args = p.parse_args()
    args.targets = set(args.targets.split(","))
    configure_logging("warning")
    out: dict[str, Target] = {}
    started, load_before = datetime.now(UTC), os.getloadavg()
    if args.targets & {"a", "c"}:
        await targets_hash(args, out)
    if "b" in args.targets:
        await target_b(args, out)
    table = summary(out)
    print(f"\nissue 36 targets, {args.runs} runs each: median (min-max)\n{table}")
    if args.json:
        doc = {
            "commit": git_head(),
            "started": started.isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, python {platform.python_version()}",
            # Other work on the machine: 1-minute load averages at the start and the end.
            "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "args": {
                k: sorted(v) if isinstance(v, set) else str(v)
                for k, v in vars(args).items()
                if k not in ("json", "data")
            },
            "targets": {
                key: {
                    "name": t.name,
                    "measured": t.bus,
                    "reference": t.ref,
                    "goal": t.goal,
                    "runs": [
                        {"measured_ms": r.bus_ms, "reference_ms": r.ref_ms, "ratio": r.ratio}
                        | r.extra
                        for r in t.runs
                    ],
                }
                for key, t in out.items()
            },
            "summary": table,
        }
        with open(args.json, "w") as fh:  # noqa: ASYNC230 - once, at the end
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
