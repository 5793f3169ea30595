"""Bench: `recall`, the pre-turn hook. Prints figures; not a test.

latency: loads 10k synthetic memories (bench_bus's generator) through the bus, plays sessions
of consecutive turns, and prints recall p50/p95 through the bus and in the handler, beside the
parts in-process (the whole operation, its search, its embedding), per embedder.

quality: LoCoMo's five conversations in ../shared/data/locomo/ (our dev half of the ten):
each conversation's observations become memories (as bench/locomo.py), and its questions of
categories 1-4 are played, in order, as the turns of one session. Prints the share of turns
whose evidence is among the memories recalled that turn, and among those injected within the
window (still in the prompt), the memories and tokens injected per turn, and what each dedup
filter cut, beside a run with both filters off.

    .venv/bin/python bench/recall.py [--embedders minilm,hash] [--only latency|quality]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio as aioredis
from bench_bus import (
    WORKFLOWS,
    bus_phase,
    make_memories,
    make_queries,
    noop_publish,
    pct,
    timed,
)
from locomo import DATA, load, tag_of

from bus import MemoryBus
from contracts.messages import RecallRequest, SearchRequest
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.ops.budget import estimate_tokens
from handlers.ops.recall import recall as recall_op
from handlers.ops.search import ranked_candidates
from handlers.service import make_deps, make_embedder
from handlers.settings import load_settings

NS = "recallbench"


async def latency(embedder: str, args: argparse.Namespace) -> None:
    stack = EmbeddedStack.temporary()
    log_dir = stack.log_dir = stack.data_dir / "logs"
    try:
        stack.start_servers()
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": embedder})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        rng = random.Random(args.seed)
        bus = await MemoryBus.connect(stack.nats_url, namespace=NS, timeout=60)
        agents = [bus.agent(workflow_id=wf, agent_id="loader") for wf in WORKFLOWS]
        memories = make_memories(rng, args.memories)
        t0 = time.perf_counter()
        for i in range(0, len(memories), 64):
            batch = memories[i : i + 64]
            await asyncio.gather(*(agents[w].add(*tc, tags=tg) for w, tc, tg in batch))
        ingest = time.perf_counter() - t0
        turns = args.sessions * args.turns
        queries = make_queries(rng, turns)

        def session(prefix: str, i: int) -> tuple[str, str, str]:
            w, text = queries[i]
            return f"{prefix}-{i // args.turns}", WORKFLOWS[w], text

        async def over_bus(i: int) -> Any:
            sid, wf, text = session("bus", i)
            return await bus.agent(workflow_id=wf, session_id=sid).recall(text)

        b, h = await bus_phase(log_dir, "recall", turns, over_bus)
        settings = load_settings({"MEMBUS_EMBEDDER": embedder, "MEMBUS_REDIS_URL": stack.redis_url})
        client = aioredis.Redis.from_url(stack.redis_url)
        inner = make_embedder(settings, client)
        deps = make_deps(settings, client, inner, noop_publish, 1024 * 1024)

        async def op(i: int) -> Any:
            sid, wf, text = session("op", i)
            req = RecallRequest(message=text, session_id=sid, workflow_id=wf)
            return await recall_op(NS, req, deps)

        async def search(i: int) -> Any:
            _, wf, text = session("op", i)
            req = SearchRequest(query=text, workflow_id=wf, limit=20)
            return await ranked_candidates(NS, req, deps, deps.clock())

        async def embed(i: int) -> Any:
            return await inner.embed([session("op", i)[2]])

        rows = [
            ("recall through the bus", b),
            ("recall, handler's own time", h),
            ("recall op in-process", await timed(turns, op)),
            ("  its search (path 2, ranked)", await timed(turns, search)),
            ("  its embedding (cached)", await timed(turns, embed)),
        ]
        rate = len(memories) / ingest
        print(f"\nembedder {embedder}: {args.memories} memories (ingest {rate:,.0f}/s),")
        print(f"  {args.sessions} sessions x {args.turns} turns, limit 20, defaults otherwise")
        print(f"{'':34}{'p50 ms':>9}{'p95 ms':>9}")
        for name, samples in rows:
            q = statistics.quantiles(samples, n=100, method="inclusive")
            print(f"{name:34}{q[49]:>9.2f}{q[94]:>9.2f}")
        _ = pct
        await inner.close()
        await client.aclose()
        await bus.close()
    finally:
        stack.stop()


async def quality(embedder: str, files: list[Path]) -> None:
    stack = EmbeddedStack.temporary()
    try:
        stack.start_servers()
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": embedder})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        # LoCoMo's facts are all ingested at once, so every one would be "recent" (path 1);
        # in a live session only the last hours' are. recent_s=0 keeps path 1 honest here.
        variants = {
            "default filters": {"recent_s": 0},
            "both dedup filters off": {"recent_s": 0, "reinject_after": 1, "dedup_threshold": 1.0},
        }
        stats: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
        for path in files:
            facts, questions = load(path)
            ns = f"recall_{path.stem.replace('-', '_')}"
            async with await MemoryBus.connect(stack.nats_url, namespace=ns, timeout=60) as bus:
                loader = bus.agent(agent_id="locomo")
                for i in range(0, len(facts), 32):
                    await asyncio.gather(
                        *(
                            loader.add(
                                "fact",
                                f.content,
                                tags=[tag_of(f.speaker)],
                                metadata={"dia": f.dia},
                                dedup="none",
                            )
                            for f in facts[i : i + 32]
                        )
                    )
                for name, options in variants.items():
                    mem = bus.agent(session_id=f"{path.stem}-{name.split()[0]}")
                    window: list[set[str]] = []
                    for question, evidence, _ in questions:
                        reply = await mem.recall(question, **options)  # type: ignore[arg-type]
                        dia = {d for r in reply.results for d in r.metadata.get("dia", [])}
                        window = [*window[-9:], dia]  # the default window: 10 turns
                        s = stats[name]
                        s.setdefault("turn", []).append(float(bool(evidence & dia)))
                        in_window = set().union(*window)
                        s.setdefault("window", []).append(float(bool(evidence & in_window)))
                        s.setdefault("memories", []).append(len(reply.results))
                        s.setdefault("tokens", []).append(estimate_tokens(reply.block))
                        s.setdefault("recalled", []).append(reply.left_out_recalled)
                        s.setdefault("similar", []).append(reply.left_out_similar)
        n = len(next(iter(stats.values()))["turn"])
        print(f"\nembedder {embedder}: {len(files)} conversations, {n} turns (questions 1-4)")
        head = "evidence: turn  in window  memories/turn  tokens/turn  cut: recalled  similar"
        print(f"{'':24}{head}")
        for name, s in stats.items():
            m = {k: statistics.mean(v) for k, v in s.items()}
            print(
                f"{name:24}{m['turn']:>14.3f}{m['window']:>11.3f}{m['memories']:>15.1f}"
                f"{m['tokens']:>13.0f}{m['recalled']:>15.2f}{m['similar']:>9.2f}"
            )
    finally:
        stack.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--embedders", default="minilm,hash")
    p.add_argument("--only", choices=["latency", "quality"], default=None)
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--turns", type=int, default=25)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data", type=Path, default=DATA)
    args = p.parse_args()
    files = sorted(args.data.glob("conv-*.json"))
    for embedder in args.embedders.split(","):
        if args.only in (None, "latency"):
            asyncio.run(latency(embedder, args))
        if args.only in (None, "quality"):
            asyncio.run(quality(embedder, files))


if __name__ == "__main__":
    main()
