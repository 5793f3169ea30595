"""LoCoMo retrieval benchmark through the bus.

Loads the conversations in ../shared/data/locomo/ (each session observation becomes a
memory: the fact as content, the speaker as a tag, one namespace per conversation), asks every
question of categories 1-4 through `search`, and prints recall@1/5/10 and MRR@10 per search
mode and embedder, the ingest rate and search latency p50/p99. A question is a hit at k when
one of the top k memories points at one of its evidence turns.

    python bench/locomo.py                      # minilm and hash, every mode
    python bench/locomo.py --embedders minilm --alpha 0.7
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bus import MemoryBus
from deploy.embedded import EmbeddedStack, wait_for_handlers

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
# (mode, fusion, diversify)
MODES: list[tuple[str, str | None, float | None]] = [
    ("vector", None, None),
    ("text", None, None),
    ("hybrid", "linear", None),
    ("hybrid", "rrf", None),
    ("hybrid", "linear", 0.7),
]
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


async def run(embedder: str, files: list[Path], alpha: str | None) -> None:
    stack = EmbeddedStack.temporary()
    try:
        stack.start_servers()
        env = {"MEMBUS_EMBEDDER": embedder}
        if alpha is not None:
            env["MEMBUS_HYBRID_ALPHA"] = alpha
        procs = stack.start_handlers(1, env)
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        results: dict[tuple[str, str | None, float | None], list[int | None]] = {
            m: [] for m in MODES
        }
        latency: dict[tuple[str, str | None, float | None], list[float]] = {m: [] for m in MODES}
        n_facts = 0
        ingest_s = 0.0
        for path in files:
            facts, questions = load(path)
            ns = f"locomo_{path.stem.replace('-', '_')}"
            async with await MemoryBus.connect(stack.nats_url, namespace=ns, timeout=60) as bus:
                ingest_s += await ingest(bus, facts)
                n_facts += len(facts)
                for key in MODES:
                    ranks, lat = await evaluate(bus, questions, *key)
                    results[key] += ranks
                    latency[key] += lat
        n_q = len(next(iter(results.values())))
        print(f"\nembedder {embedder}: {n_facts} memories from {len(files)} conversations,")
        print(f"  ingest {n_facts / ingest_s:,.0f} memories/s; {n_q} questions (categories 1-4)")
        print("  (query embeddings are cached in Redis after the first mode, as in service)")
        print(f"{'mode':<24}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'MRR@10':>8}{'p50 ms':>9}{'p99 ms':>9}")
        for (mode, fusion, diversify), ranks in results.items():
            r1, r5, r10, mrr = summary(ranks)
            name = mode if fusion is None else f"{mode} ({fusion})"
            if diversify is not None:
                name += f" mmr {diversify}"
            lat = sorted(latency[(mode, fusion, diversify)])
            p50 = statistics.median(lat)
            p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
            print(f"{name:<24}{r1:>7.3f}{r5:>7.3f}{r10:>7.3f}{mrr:>8.3f}{p50:>9.2f}{p99:>9.2f}")
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="minilm,hash")
    parser.add_argument("--alpha", default=None, help="MEMBUS_HYBRID_ALPHA for the handlers")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    files = sorted(args.data.glob("conv-*.json"))
    if not files:
        raise SystemExit(f"no conv-*.json under {args.data}")
    for embedder in args.embedders.split(","):
        asyncio.run(run(embedder, files, args.alpha))


if __name__ == "__main__":
    main()
