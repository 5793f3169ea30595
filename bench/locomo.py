"""LoCoMo retrieval benchmark through the bus.

Loads the conversations in ../shared/data/locomo/ (each session observation becomes a
memory: the fact as content, the speaker as a tag, one namespace per conversation), asks every
question of categories 1-4 through `search`, and prints recall@1/5/10 and MRR@10 per search
mode and embedder, the ingest rate and search latency p50/p99. A question is a hit at k when
one of the top k memories points at one of its evidence turns. Beside each mode: the Redis
time its `FT.SEARCH` calls took (INFO commandstats, reset before the mode), per search and per
call.

    python bench/locomo.py                      # minilm and hash, every mode
    python bench/locomo.py --embedders minilm --alpha 0.7
    python bench/locomo.py --embedders hash --modes text   # modes: vector,text,linear,rrf,mmr
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis
from measure import command_stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bus import MemoryBus
from deploy.embedded import EmbeddedStack, wait_for_handlers

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
Mode = tuple[str, str | None, float | None]  # (mode, fusion, diversify)
MODES: dict[str, Mode] = {
    "vector": ("vector", None, None),
    "text": ("text", None, None),
    "linear": ("hybrid", "linear", None),  # the default
    "rrf": ("hybrid", "rrf", None),
    "mmr": ("hybrid", "linear", 0.7),
}
BATCH = 32


def tag_of(speaker: str) -> str:
    return re.sub(r"[^a-z0-9_:.-]", "_", speaker.lower())[:64] or "speaker"


def load(path: Path) -> tuple[list[tuple[str, str, list[str]]], list[tuple[str, set[str]]]]:
    """(fact, speaker, dia_ids) per observation, and (question, evidence) for categories 1-4."""
    conv = json.loads(path.read_text())
    c = conv.get("conversation", conv)
    facts = []
    for key, value in c.items():
        if not key.endswith("_observation"):
            continue
        for speaker, items in value.items():
            for fact, ids in items:
                ids = [ids] if isinstance(ids, str) else list(ids)
                facts.append((fact, speaker, ids))
    qa = conv.get("qa") or c.get("qa") or []
    questions = [
        (q["question"], set(q.get("evidence") or []))
        for q in qa
        if q.get("category") in (1, 2, 3, 4)
    ]
    return facts, questions


async def ingest(bus: MemoryBus, facts: list[tuple[str, str, list[str]]]) -> float:
    mem = bus.agent(agent_id="locomo")
    t0 = time.perf_counter()
    for i in range(0, len(facts), BATCH):
        await asyncio.gather(
            *(
                # Every observation is its own item (no dedup), as in the reference setup.
                mem.add("fact", f, tags=[tag_of(s)], metadata={"dia": ids}, dedup="none")
                for f, s, ids in facts[i : i + BATCH]
            )
        )
    return time.perf_counter() - t0


async def evaluate(
    bus: MemoryBus,
    questions: list[tuple[str, set[str]]],
    mode: str,
    fusion: str | None,
    diversify: float | None,
) -> tuple[list[int | None], list[float]]:
    """Rank (1-based) of the first relevant memory in the top 10 per question, and latencies."""
    mem = bus.agent(agent_id="asker")
    ranks: list[int | None] = []
    lat: list[float] = []
    for question, evidence in questions:
        t0 = time.perf_counter()
        reply = await mem.search(
            question,
            limit=10,
            mode=mode,  # type: ignore[arg-type]
            fusion=fusion,  # type: ignore[arg-type]
            diversify=diversify,
        )
        lat.append((time.perf_counter() - t0) * 1000)
        rank = None
        for i, hit in enumerate(reply.results, 1):
            if evidence & set(hit.metadata.get("dia", [])):
                rank = i
                break
        ranks.append(rank)
    return ranks, lat


def summary(ranks: list[int | None]) -> tuple[float, float, float, float]:
    n = len(ranks)
    r = [x for x in ranks if x is not None]
    return (
        sum(1 for x in r if x <= 1) / n,
        sum(1 for x in r if x <= 5) / n,
        sum(1 for x in r if x <= 10) / n,
        sum(1.0 / x for x in r) / n,
    )


async def search_usec(rds: aioredis.Redis) -> tuple[int, int]:
    """FT.SEARCH calls and the microseconds Redis spent in them since the last reset."""
    return (await command_stats(rds)).get("FT.SEARCH", (0, 0))


async def run(embedder: str, files: list[Path], alpha: str | None, modes: list[Mode]) -> None:
    stack = EmbeddedStack.temporary()
    rds: aioredis.Redis | None = None
    try:
        stack.start_servers()
        env = {"MEMBUS_EMBEDDER": embedder}
        if alpha is not None:
            env["MEMBUS_HYBRID_ALPHA"] = alpha
        procs = stack.start_handlers(1, env)
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        rds = aioredis.Redis.from_url(stack.redis_url)
        results: dict[Mode, list[int | None]] = {m: [] for m in modes}
        latency: dict[Mode, list[float]] = {m: [] for m in modes}
        redis_time: dict[Mode, list[int]] = {m: [0, 0] for m in modes}  # calls, usec
        n_facts = 0
        ingest_s = 0.0
        for path in files:
            facts, questions = load(path)
            ns = f"locomo_{path.stem.replace('-', '_')}"
            async with await MemoryBus.connect(stack.nats_url, namespace=ns, timeout=60) as bus:
                ingest_s += await ingest(bus, facts)
                n_facts += len(facts)
                for key in modes:
                    await rds.config_resetstat()
                    ranks, lat = await evaluate(bus, questions, *key)
                    calls, usec = await search_usec(rds)
                    results[key] += ranks
                    latency[key] += lat
                    redis_time[key][0] += calls
                    redis_time[key][1] += usec
        n_q = len(next(iter(results.values())))
        print(f"\nembedder {embedder}: {n_facts} memories from {len(files)} conversations,")
        print(f"  ingest {n_facts / ingest_s:,.0f} memories/s; {n_q} questions (categories 1-4)")
        print("  (query embeddings are cached in Redis after the first mode, as in service)")
        print(
            f"{'mode':<24}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'MRR@10':>8}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'FT.SEARCH us/search':>21}{'us/call':>9}"
        )
        for (mode, fusion, diversify), ranks in results.items():
            r1, r5, r10, mrr = summary(ranks)
            name = mode if fusion is None else f"{mode} ({fusion})"
            if diversify is not None:
                name += f" mmr {diversify}"
            lat = sorted(latency[(mode, fusion, diversify)])
            p50 = statistics.median(lat)
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
            calls, usec = redis_time[(mode, fusion, diversify)]
            per_call = usec / calls if calls else 0.0
            print(
                f"{name:<24}{r1:>7.3f}{r5:>7.3f}{r10:>7.3f}{mrr:>8.3f}{p50:>9.2f}{p99:>9.2f}"
                f"{usec / len(ranks):>21.0f}{per_call:>9.0f}"
            )
    finally:
        if rds is not None:
            await rds.aclose()
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="minilm,hash")
    parser.add_argument("--alpha", default=None, help="MEMBUS_HYBRID_ALPHA for the handlers")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--modes", default=",".join(MODES), help=", ".join(MODES))
    args = parser.parse_args()
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    modes = [MODES[m] for m in args.modes.split(",")]
    files = sorted(args.data.glob("conv-*.json"))
    if not files:
        raise SystemExit(f"no conv-*.json under {args.data}")
    for embedder in args.embedders.split(","):
        asyncio.run(run(embedder, files, args.alpha, modes))


if __name__ == "__main__":
    main()
