"""Bench: where the handler's milliseconds go in a default search (issue 36), by pyinstrument.

Runs `dispatch()` in this process (decode, the operation, reply encode: the handler's whole
request path but NATS) for sequential default (hybrid) searches, each asked once, and
prints: wall and CPU ms of this process per search (CPU counts every thread: the minilm
model runs in one of its own), then pyinstrument's view of the event loop's thread: the
time the loop waited for replies (Redis, the model's thread) and the Python time by area
(decode, embed, query building in redisvl, redis-py, reading replies in the store, ranking,
reply encode, ...) and by function (own time), and the call tree (saved with `--out`).

- hash: `--memories` of the seeded corpus of bench/corpus.py (asked from a workflow);
- minilm: 2,000 LoCoMo items as bench/targets.py loads them (questions of categories 1-4).

    .venv/bin/python bench/profile_search.py [--embedder hash|minilm] [--memories 20000]
        [--searches 300] [--out bench/results/profile_search_hash.txt]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus import WORKFLOWS, make_corpus, make_queries
from locomo import DATA, tag_of
from measure import percentile
from pyinstrument import Profiler
from pyinstrument.frame import Frame
from roundtrips import InProcess
from store_cost import load as load_memories
from targets import locomo_items

from contracts.messages import AddRequest, SearchRequest
from deploy.embedded import EmbeddedStack
from handlers.logs import configure_logging

NS = "profile"
ROOT = Path(__file__).resolve().parent.parent
WARMUP = 30

# Where a frame's own time is counted, by the first pattern its file path holds.
AREAS = [
    ("handlers/dispatch", "dispatch: decode, reply encode"),
    ("handlers/fit", "dispatch: decode, reply encode"),
    ("msgspec", "dispatch: decode, reply encode"),
    ("handlers/embed", "embedding (Python side)"),
    ("onnxruntime", "embedding (Python side)"),
    ("tokenizers", "embedding (Python side)"),
    ("redisvl", "redisvl: query building, index"),
    ("handlers/store/filters", "filters: query text building"),
    ("handlers/store", "store: commands, reading replies"),
    ("handlers/ops/search", "search op: candidates, fusion, ranking"),
    ("handlers/ops/ranking", "search op: candidates, fusion, ranking"),
    ("handlers/ops", "other ops code (scoping, replies, terms)"),
    ("redis/", "redis-py: send, parse"),
    ("hiredis", "redis-py: send, parse"),
    ("selectors", "idle: the loop waits for replies (epoll)"),
    ("asyncio", "asyncio: event loop, streams, tasks"),
    ("structlog", "logging"),
    ("opentelemetry", "tracing"),
    ("numpy", "numpy"),
]


def area(frame: Frame, parent: str) -> str:
    """The area of a frame's own time; a built-in (a syscall, a C parser) is its caller's."""
    path = (frame.file_path or "").replace("\\", "/")
    if frame.is_synthetic or not path or path.startswith("<"):
        return parent
    for pattern, name in AREAS:
        if pattern in path:
            return name
    return f"other ({frame.file_path_short})"


def walk(
    frame: Frame, parent: str, by_area: dict[str, float], by_function: dict[str, float]
) -> None:
    mine = area(frame, parent)
    # A frame's own time includes its synthetic children's ([self]): counted here, once.
    if not frame.is_synthetic and (own := frame.total_self_time):
        by_area[mine] += own
        by_function[f"{frame.function} ({frame.file_path_short}:{frame.line_no})"] += own
    for child in frame.children:
        if not child.is_synthetic_leaf:
            walk(child, mine, by_area, by_function)


async def profiled(
    app: InProcess, n: int, call: Callable[[int], Awaitable[object]], out: Path | None
) -> str:
    for i in range(n, n + WARMUP):
        await call(i)
    await app.settle()
    # Unprofiled first: wall and CPU per search.
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(n // 2):
        await call(i)
    await app.settle()
    half = n // 2
    wall = (time.perf_counter() - t0) * 1000 / half
    cpu = (time.process_time() - cpu0) * 1000 / half
    # The whole thread, every task (a gathered query runs in a task of its own), idle too.
    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start()
    for i in range(half, n):
        await call(i)
    await app.settle()
    profiler.stop()
    session = profiler.last_session
    assert session is not None
    root = session.root_frame()
    by_area: dict[str, float] = defaultdict(float)
    by_function: dict[str, float] = defaultdict(float)
    if root is not None:
        walk(root, "other", by_area, by_function)
    count = n - half
    lines = [
        f"unprofiled, {half} searches: {wall:.2f} ms wall, {cpu:.2f} ms CPU of this process"
        " (every thread) per search",
        f"profiled, {count} searches ({session.duration * 1000 / count:.2f} ms wall each):"
        " ms per search by area (own time in the event loop's thread, every task; a"
        " built-in's time is its caller's area; the profiler slows calls down, so compare"
        " shares)",
    ]
    total = sum(by_area.values()) or 1.0
    for name, secs in sorted(by_area.items(), key=lambda kv: -kv[1])[:16]:
        lines.append(f"  {secs * 1000 / count:7.3f}  {secs / total:4.0%}  {name}")
    lines.append("top functions by own time (ms per search):")
    for name, secs in sorted(by_function.items(), key=lambda kv: -kv[1])[:25]:
        lines.append(f"  {secs * 1000 / count:7.3f}  {name}")
    if out is not None:
        text = profiler.output_text(unicode=False, color=False, show_all=False)
        text = text.replace(f"{ROOT}/", "")  # paths as in the repository
        out.write_text("\n".join(lines) + "\n\n" + text)  # noqa: ASYNC240 - after timing
    return "\n".join(lines)


def model_alone(app: InProcess, texts: list[str]) -> str:
    """The query model's own time per query, called directly (no batcher, no cache)."""
    model = getattr(app.embedder, "inner", app.embedder)
    encode = getattr(model, "encode_queries", None) or getattr(model, "encode", None)
    if encode is None:
        return "(the model cannot be called directly here)"
    samples = []
    for text in texts:
        t0 = time.perf_counter()
        encode([text])
        samples.append((time.perf_counter() - t0) * 1000)
    p50 = percentile(samples, 50)
    return f"the query model alone (encode_queries, one question): p50 {p50:.2f} ms"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    p.add_argument("--memories", type=int, default=20_000, help="hash: corpus memories loaded")
    p.add_argument("--searches", type=int, default=300, help="half timed, half profiled")
    p.add_argument("--locomo", type=int, default=2000, help="minilm: LoCoMo items loaded")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=None, help="also save the call tree here")
    args = p.parse_args()
    configure_logging("warning")
    stack = EmbeddedStack.temporary()
    stack.start_servers()
    try:
        app = InProcess(stack, args.embedder)
        try:
            n = args.searches
            if args.embedder == "hash":
                corpus = make_corpus(args.memories, args.seed)
                secs = await load_memories(app.deps, corpus, [], ns=NS)
                print(f"loaded {len(corpus):,} memories ({len(corpus) / secs:,.0f}/s)")
                queries = make_queries(n + WARMUP, args.seed + 1, corpus)

                def call(i: int) -> Awaitable[Any]:
                    q = queries[i]
                    wf = q.workflow_id or WORKFLOWS[i % len(WORKFLOWS)]
                    return app.ask(NS, "search", SearchRequest(query=q.text, workflow_id=wf))

            else:
                items, questions, others = locomo_items(args.data, args.locomo)
                t0 = time.perf_counter()
                for i in range(0, len(items), 32):
                    await asyncio.gather(
                        *(
                            app.ask(
                                NS,
                                "add",
                                AddRequest(
                                    type="fact", content=text, tags=[tag_of(s)], dedup="none"
                                ),
                            )
                            for text, s in items[i : i + 32]
                        )
                    )
                print(f"loaded {len(items):,} LoCoMo items in {time.perf_counter() - t0:.1f} s")
                asked = questions[:n] + others[:WARMUP]
                n = min(n, len(questions))

                def call(i: int) -> Awaitable[Any]:
                    return app.ask(NS, "search", SearchRequest(query=asked[i]))

                print(model_alone(app, others[WARMUP : WARMUP + 100]))

            print(await profiled(app, n, call, args.out))
        finally:
            await app.close()
    finally:
        stack.stop()


if __name__ == "__main__":
    asyncio.run(main())
