"""LoCoMo retrieval benchmark through the bus.

Loads the conversations in ../shared/data/locomo/ (each session observation becomes a
memory, one namespace per conversation; `--store`: plain, the fact as content and the speaker
as a tag; dated, also the session's date as `valid_from` and the speaker in
`related_people`, as an agent importing a past conversation would store it; anon, as an
extractor's memories, the speaker only in `related_people`), asks every question of
categories 1-4 through `search`, and prints recall@1/5/10 and MRR@10 per search mode and
embedder, the ingest rate and search latency p50/p99. A question is a hit at k when one of
the top k memories points at one of its evidence turns. Beside each mode: the Redis time its
`FT.SEARCH` calls took (INFO commandstats, reset before the mode), per search and per call.

    python bench/locomo.py                      # minilm and hash, every mode, plain store
    python bench/locomo.py --embedders minilm --alpha 0.7
    python bench/locomo.py --embedders hash --modes text   # modes: vector,text,linear,rrf,mmr
    python bench/locomo.py --cv --embedders minilm,e5      # stages on and off, cross-validated
    python bench/locomo.py --cv --stages times,names,e5 --store dated --latency 2

`--cv` (see "Cross-validated stages" below; dated store unless `--store` says otherwise):
each stage's weight tuned on four conversations and scored on the fifth, in turn, then
confirmed through the bus, with search and add p50. Stages: e5 (second opinion), alpha
(hybrid fusion), times and names (query signals). `--latency N`: then the defaults and each
stage switched, timed at 2,000 memories, paired, N rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import redis.asyncio as aioredis
from measure import command_stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bus import MemoryBus
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.ops.ranking import fuse_linear
from handlers.settings import load_settings

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
DEFAULTS = load_settings({})  # the handler's defaults, as a stage's offline order needs them


def tag_of(speaker: str) -> str:
    return re.sub(r"[^a-z0-9_:.-]", "_", speaker.lower())[:64] or "speaker"


Question = tuple[str, set[str], int]  # (question, evidence turns, category)


class Fact(NamedTuple):
    """A session observation: what it says, who said it, the turns it cites, its session
    and that session's date."""

    content: str
    speaker: str
    dia: list[str]
    session: int
    date: datetime | None


def session_date(raw: str | None) -> datetime | None:
    """LoCoMo's "1:56 pm on 8 May, 2023" as a UTC time (None if absent or unreadable)."""
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime((raw or "").strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def load(path: Path) -> tuple[list[Fact], list[Question]]:
    """The observations, and (question, evidence, category) for categories 1-4."""
    conv = json.loads(path.read_text())
    c = conv.get("conversation", conv)
    facts = []
    for key, value in c.items():
        if not key.endswith("_observation"):
            continue
        n = int(key.split("_")[1])
        date = session_date(c.get(f"session_{n}_date_time"))
        for speaker, items in value.items():
            for fact, ids in items:
                ids = [ids] if isinstance(ids, str) else list(ids)
                facts.append(Fact(fact, speaker, ids, n, date))
    qa = conv.get("qa") or c.get("qa") or []
    questions = [
        (q["question"], set(q.get("evidence") or []), int(q["category"]))
        for q in qa
        if q.get("category") in (1, 2, 3, 4)
    ]
    return facts, questions


# How the observations are stored. plain: the speaker as a tag (the reference setup);
# dated: as an agent importing a past conversation would, also the session's date as
# `valid_from` and the speaker in `related_people`; anon: as an extractor's memories whose
# person is only in `related_people` (dated, the speaker's name out of the content, no tag).
STORES = ("plain", "dated", "anon")


def unnamed(content: str, speaker: str) -> str:
    """The observation without its speaker's name ("Caroline's" -> "their", "Caroline" ->
    "they")."""
    content = re.sub(rf"\b{re.escape(speaker)}['’]s\b", "their", content)
    return re.sub(rf"\b{re.escape(speaker)}\b", "they", content)


async def ingest(bus: MemoryBus, facts: list[Fact], store: str = "plain") -> float:
    mem = bus.agent(agent_id="locomo")
    plain, anon = store == "plain", store == "anon"
    t0 = time.perf_counter()
    for i in range(0, len(facts), BATCH):
        await asyncio.gather(
            *(
                # Every observation is its own item (no dedup), as in the reference setup.
                mem.add(
                    "fact",
                    unnamed(f.content, f.speaker) if anon else f.content,
                    tags=[] if anon else [tag_of(f.speaker)],
                    metadata={"dia": f.dia},
                    dedup="none",
                    related_people=() if plain else [f.speaker],
                    valid_from=None if plain else f.date,
                )
                for f in facts[i : i + BATCH]
            )
        )
    return time.perf_counter() - t0


async def evaluate(
    bus: MemoryBus,
    questions: list[Question],
    mode: str,
    fusion: str | None,
    diversify: float | None,
) -> tuple[list[int | None], list[float]]:
    """Rank (1-based) of the first relevant memory in the top 10 per question, and latencies."""
    mem = bus.agent(agent_id="asker")
    ranks: list[int | None] = []
    lat: list[float] = []
    for question, evidence, _ in questions:
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


async def run(
    embedder: str, files: list[Path], alpha: str | None, modes: list[Mode], store: str
) -> None:
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
                ingest_s += await ingest(bus, facts, store)
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
        print(
            f"\nembedder {embedder}, store {store}: {n_facts} memories from {len(files)}"
            " conversations,"
        )
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


# -- Cross-validated stages (--cv) ---------------------------------------------------------
#
# Each question's first-stage candidates (the default search's best DEPTH, with their
# signals) are collected through the bus once. A stage's weight is then tuned offline on four
# conversations and scored on the fifth, in turn, so no weight is fitted to what it is scored
# on (the "CV mean" rows: the honest figures). Then the stage runs through the bus with the
# weight fitted on all five (what a default would be; that row is the optimistic one), beside
# the first stage alone, each with its search and add latency p50. Handlers are restarted
# before each timed pass, so no query vector is cached in the process: each search embeds
# its query, as a new question does.

DEPTH = 30
ADDS = 100  # sequential adds timed per row


@dataclass
class Asked:
    """One question and its first stage's candidates, best first, with their signals."""

    conv: str
    question: str
    evidence: set[str]
    category: int
    answerable: bool  # some observation points at one of its evidence turns
    scores: list[float] = field(default_factory=list)
    similarity: list[float] = field(default_factory=list)
    text: list[float] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    dias: list[list[str]] = field(default_factory=list)
    # Each stage's own signal per candidate, computed offline by its `prepare`.
    signals: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Stage:
    """A stage: the handler settings that turn it on, the setting whose weight is tuned and
    the weights tried, how its signal is computed for the collected candidates, and their
    order (indices, best first) under a weight."""

    env: dict[str, str]
    weight_var: str
    weights: list[float]
    prepare: Callable[[list[Asked]], None]
    # None: the stage is tuned through the bus, a pass per weight (one that brings in
    # candidates the first stage did not find cannot be tuned on those).
    order: Callable[[Asked, float], list[int]] | None
    # First-stage embedders it is no stage for (a second opinion from the same model).
    not_with: tuple[str, ...] = ()
    # The settings that turn it off where the handler's default has it on.
    off_env: dict[str, str] = field(default_factory=dict)


def _e5_prepare(asked: list[Asked]) -> None:
    from handlers.embed.e5 import E5Model

    model = E5Model()
    texts = list(dict.fromkeys(t for a in asked for t in a.contents))
    passages = dict(zip(texts, model.passages(texts), strict=True))
    for a in asked:
        q = model.queries([a.question])[0]
        a.signals["e5"] = [float(passages[t] @ q) for t in a.contents]


def _e5_order(a: Asked, weight: float) -> list[int]:
    from handlers.ops.rerank import fused_order

    return fused_order(a.scores, a.signals["e5"], weight)


def _alpha_order(a: Asked, alpha: float) -> list[int]:
    # The collected score with its fusion of cosine and BM25 redone at `alpha`: what else it
    # holds (the query signals' boost; importance and recency, alike here) stays.
    w = DEFAULTS.weights.similarity
    was = DEFAULTS.hybrid_alpha
    fused = [
        s + w * (fuse_linear(c, t, alpha) - fuse_linear(c, t, was))
        for s, c, t in zip(a.scores, a.similarity, a.text, strict=True)
    ]
    return sorted(range(len(fused)), key=lambda i: (-fused[i], i))


STAGES: dict[str, Stage] = {
    # The second opinion (handlers/ops/rerank.py).
    "e5": Stage(
        {"MEMBUS_RERANK": "e5"},
        "MEMBUS_RERANK_WEIGHT",
        [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0],
        _e5_prepare,
        _e5_order,
        not_with=("e5",),
    ),
    # The first stage's own weight: cosine against BM25 in linear fusion (default 0.8).
    "alpha": Stage(
        {},
        "MEMBUS_HYBRID_ALPHA",
        [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0],
        lambda asked: None,
        _alpha_order,
    ),
    # The query signals (handlers/ops/query_signals.py), tuned through the bus: a boost
    # can bring in candidates the default's top 30 does not hold. Times: how well a
    # memory's time fits a time the question names (on by default, 0.2); names: a person
    # the question names whom the memory holds but its content does not name (off).
    "times": Stage(
        {},
        "MEMBUS_RANK_TIMES",
        [0.0, 0.05, 0.1, 0.2, 0.3, 0.5],
        lambda asked: None,
        None,
        off_env={"MEMBUS_RANK_TIMES": "0"},
    ),
    "names": Stage(
        {}, "MEMBUS_RANK_NAMES", [0.0, 0.02, 0.05, 0.1, 0.2, 0.3], lambda asked: None, None
    ),
}


def cv_folds(groups: list[str]) -> list[tuple[list[str], str]]:
    """(train, test) per group: each group scored once, by what the others tuned."""
    names = sorted(set(groups))
    return [([g for g in names if g != test], test) for test in names]


def first_hit(dias: list[list[str]], evidence: set[str], k: int = 10) -> int | None:
    return next((i for i, d in enumerate(dias[:k], 1) if evidence & set(d)), None)


def recall_mrr(ranks: list[int | None]) -> tuple[float, float]:
    n = len(ranks) or 1
    return sum(r is not None for r in ranks) / n, sum(1.0 / r for r in ranks if r) / n


def stage_ranks(stage: Stage, asked: list[Asked], weight: float) -> list[int | None]:
    assert stage.order is not None
    out = []
    for a in asked:
        order = stage.order(a, weight) if len(a.dias) > 1 else list(range(len(a.dias)))
        out.append(first_hit([a.dias[i] for i in order], a.evidence))
    return out


def best_weight(weights: list[float], ranks: Callable[[float], list[int | None]]) -> float:
    """The weight whose ranks have the best recall@10 + MRR@10 (the first of equals)."""
    quality = {w: sum(recall_mrr(ranks(w))) for w in weights}
    best = max(quality.values())
    return next(w for w in weights if quality[w] == best)


def tune(stage: Stage, asked: list[Asked]) -> float:
    """The stage's best weight on `asked`, from the collected candidates."""
    return best_weight(stage.weights, lambda w: stage_ranks(stage, asked, w))


async def collect(
    bus: MemoryBus, conv: str, questions: list[Question], pointed: set[str]
) -> list[Asked]:
    mem = bus.agent(agent_id="asker")
    out = []
    for question, evidence, category in questions:
        reply = await mem.search(question, limit=DEPTH)
        a = Asked(conv, question, evidence, category, bool(evidence & pointed))
        for hit in reply.results:
            a.scores.append(hit.score)
            a.similarity.append(hit.similarity)
            a.text.append(hit.text_score)
            a.contents.append(hit.content)
            a.dias.append(list(hit.metadata.get("dia", [])))
        out.append(a)
    return out


class Handlers:
    """The one handler process of the run, restarted with other settings over the same data."""

    def __init__(self, stack: EmbeddedStack) -> None:
        self.stack = stack
        self.procs: list[Any] = []

    async def restart(self, env: dict[str, str]) -> None:
        self.stop()
        self.procs = self.stack.start_handlers(1, env)
        await wait_for_handlers(self.stack.nats_url, 1, self.procs, timeout=180)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()
        self.procs = []


async def timed_pass(
    handlers: Handlers, env: dict[str, str], convs: dict[str, list[Question]]
) -> tuple[dict[str, list[int | None]], list[float]]:
    """Handlers restarted with `env`, then every question searched at limit 10: the ranks
    per conversation, and the latencies."""
    await handlers.restart(env)
    ranks: dict[str, list[int | None]] = {}
    lat: list[float] = []
    for conv, questions in convs.items():
        url = handlers.stack.nats_url
        async with await MemoryBus.connect(url, namespace=conv, timeout=60) as bus:
            ranks[conv], t = await evaluate(bus, questions, "hybrid", None, None)
            lat += t
    return ranks, lat


def switched(name: str, fitted: float = 0.0) -> tuple[str, dict[str, str]]:
    """A stage switched from the handler's default, for `latency`: off where it is on by
    default, else on at its fitted weight (or, fitted off or not fitted, its largest: what a
    stage costs does not depend on its weight)."""
    stage = STAGES[name]
    if stage.off_env:
        return f"{name} off", stage.off_env
    w = fitted or max(stage.weights)
    return f"{name} {w:g}", {**stage.env, stage.weight_var: str(w)}


def flat(ranks: dict[str, list[int | None]], convs: list[str]) -> list[int | None]:
    return [r for c in convs for r in ranks[c]]


async def add_p50(handlers: Handlers, facts: list[str], tag: str) -> float:
    """p50 ms of sequential adds of texts no cache has seen, to a scratch namespace."""
    mem_ns = f"locomo_adds_{tag}"
    lat = []
    async with await MemoryBus.connect(handlers.stack.nats_url, namespace=mem_ns) as bus:
        mem = bus.agent(agent_id="adder")
        for fact in facts:
            t0 = time.perf_counter()
            await mem.add("fact", f"{fact} [{tag}]", dedup="none")
            lat.append((time.perf_counter() - t0) * 1000)
    return statistics.median(lat)


def table_row(
    name: str,
    asked: list[Asked],
    ranks: list[int | None],
    p50: float | None = None,
    add: float | None = None,
) -> str:
    r10, mrr = recall_mrr(ranks)
    ar10, amrr = recall_mrr([r for r, a in zip(ranks, asked, strict=True) if a.answerable])
    cats = []
    for c in (1, 2, 3, 4):
        rc = [r for r, a in zip(ranks, asked, strict=True) if a.category == c]
        cats.append("{:.2f}/{:.2f}".format(*recall_mrr(rc)))
    ms = "".join(f"{x:>9.1f}" if x is not None else f"{'-':>9}" for x in (p50, add))
    return f"{name:<34}{r10:>7.3f}{mrr:>8.3f}{ar10:>8.3f}{amrr:>8.3f}{ms}  " + " ".join(cats)


HEADER = (
    f"{'':<34}{'R@10':>7}{'MRR@10':>8}{'ansR@10':>8}{'ansMRR':>8}{'srch p50':>9}{'add p50':>9}"
    "  per category 1-4 (R@10/MRR@10)"
)


async def run_cv(
    embedder: str,
    files: list[Path],
    stages: list[str],
    store: str,
    save: Path | None = None,
    by_bus: bool = False,
) -> dict[str, dict[str, str]]:
    """The cross-validated rows; returns the configurations to time at 2,000 memories
    (`latency`): the defaults, and each stage switched from its default at its weight
    fitted on all five."""
    stack = EmbeddedStack.temporary()
    handlers = Handlers(stack)
    timed: dict[str, dict[str, str]] = {"defaults": {}}
    try:
        stack.start_servers()
        base = {"MEMBUS_EMBEDDER": embedder}
        await handlers.restart(base)
        asked: list[Asked] = []
        convs: dict[str, list[Question]] = {}
        n_facts = 0
        ingest_s = 0.0
        texts: list[str] = []
        for path in files:
            facts, questions = load(path)
            ns = f"locomo_{path.stem.replace('-', '_')}"
            convs[ns] = questions
            texts += [f.content for f in facts]
            pointed = {d for f in facts for d in f.dia}
            async with await MemoryBus.connect(stack.nats_url, namespace=ns, timeout=60) as bus:
                ingest_s += await ingest(bus, facts, store)
                n_facts += len(facts)
                asked += await collect(bus, ns, questions, pointed)
        print(
            f"\nembedder {embedder}, store {store}: {n_facts} memories, {len(asked)} questions,"
            f" cross-validated by conversation; ingest {n_facts / ingest_s:,.0f} memories/s"
        )
        print("  ans*: over the questions some observation points at (the ceiling of the others)")
        print("  srch/add p50: ms through the bus (search at limit 10; adds one at a time)")
        print(HEADER)
        adds = texts[:ADDS]
        by_conv_ranks, lat = await timed_pass(handlers, base, convs)
        add = await add_p50(handlers, adds, "base")
        first = flat(by_conv_ranks, list(convs))
        print(table_row("defaults (bus)", asked, first, statistics.median(lat), add))
        off = [first_hit(a.dias, a.evidence) for a in asked]
        print(table_row(f"defaults (collected top {DEPTH})", asked, off))
        by_conv = {c: [a for a in asked if a.conv == c] for c in convs}
        for name in stages:
            if embedder not in STAGES[name].not_with and not by_bus:
                STAGES[name].prepare(asked)
        if save is not None:
            # The candidates and their signals, to study a stage offline before building it.
            path = save.with_name(f"{save.stem}-{embedder}-{store}{save.suffix}")
            path.write_bytes(msgspec.json.encode(asked))
            print(f"  candidates saved to {path}")
        for name in stages:
            stage = STAGES[name]
            if embedder in stage.not_with:
                continue
            on_bus = by_bus or stage.order is None
            how = "a pass through the bus per weight" if on_bus else "offline, top 30"
            print(f"{name} ({stage.weight_var} tuned over {stage.weights}, {how}):")
            off_ranks = by_conv_ranks
            if stage.off_env:
                # On by default: its "off" is a pass of its own.
                off_ranks, lat = await timed_pass(handlers, {**base, **stage.off_env}, convs)
                await handlers.restart({**base, **stage.off_env})
                add = await add_p50(handlers, adds, f"{name}_off")
                row = f"  {name} off (bus)"
                print(
                    table_row(row, asked, flat(off_ranks, list(convs)), statistics.median(lat), add)
                )
            passes: dict[float, tuple[dict[str, list[int | None]], list[float]]] = {}
            if on_bus:
                env = {**base, **stage.env}
                await timed_pass(handlers, env, convs)  # untimed: see below
                for w in stage.weights:
                    passes[w] = await timed_pass(handlers, {**env, stage.weight_var: str(w)}, convs)

            def ranks_of(
                w: float,
                test: list[str],
                stage: Stage = stage,
                passes: dict[float, tuple[dict[str, list[int | None]], list[float]]] = passes,
            ) -> list[int | None]:
                if passes:
                    return flat(passes[w][0], test)
                return stage_ranks(stage, [a for c in test for a in by_conv[c]], w)

            fold_ranks: list[int | None] = []
            fold_asked: list[Asked] = []
            for train, test in cv_folds(list(convs)):
                w = best_weight(stage.weights, partial(ranks_of, test=train))
                ranks = ranks_of(w, [test])
                fold_ranks += ranks
                fold_asked += by_conv[test]
                print(table_row(f"  fold {test[7:]}: off", by_conv[test], off_ranks[test]))
                print(table_row(f"  fold {test[7:]}: on, weight {w:g}", by_conv[test], ranks))
            print(table_row(f"  {name}: CV mean (honest)", fold_asked, fold_ranks))
            w_all = best_weight(stage.weights, partial(ranks_of, test=list(convs)))
            env = {**base, **stage.env, stage.weight_var: str(w_all)}
            timed.update([switched(name, w_all)])
            if w_all in passes:
                ranks_all, lat = passes[w_all]
            else:
                # A pass untimed first: it computes whatever the stage stores beside memories
                # written before it was on (e5: the contents' vectors, cached).
                await timed_pass(handlers, env, convs)
                ranks_all, lat = await timed_pass(handlers, env, convs)
            await handlers.restart(env)
            add = await add_p50(handlers, adds, name)
            row = f"  {name} {w_all:g} (bus; fit on all five)"
            print(table_row(row, asked, flat(ranks_all, list(convs)), statistics.median(lat), add))
    finally:
        handlers.stop()
        stack.stop()
    return timed


# -- Search time at 2,000 memories (--latency) ---------------------------------------------
#
# Target (b)'s namespace (bench/targets.py: the observations, then the conversations' own
# turns), asked every question under each configuration in turn, the order rotating,
# through `dispatch()` in this process (one first-stage model, one Redis; each
# configuration's `Deps` built from its settings): the machine's load, shared and noisy,
# falls on all of them alike. A stage's cost depends on it being on, not on its weight.

LATENCY_NS = "locomo2k"


async def latency(
    embedder: str, data: Path, configs: dict[str, dict[str, str]], rounds: int
) -> None:
    # Imported here: targets and roundtrips import this module.
    from roundtrips import InProcess, noop_publish
    from targets import locomo_items

    from contracts.messages import SearchRequest
    from handlers.logs import configure_logging
    from handlers.ops.query_signals import time_window
    from handlers.service import make_deps

    items, questions, _ = locomo_items(data, 2000)
    stack = EmbeddedStack.temporary()
    here: InProcess | None = None
    try:
        stack.start_servers()
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": embedder})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        url = stack.nats_url
        async with await MemoryBus.connect(url, namespace=LATENCY_NS, timeout=60) as bus:
            mem = bus.agent(agent_id="locomo")
            for i in range(0, len(items), BATCH):
                await asyncio.gather(
                    *(
                        mem.add("fact", t, tags=[tag_of(s)], dedup="none")
                        for t, s in items[i : i + BATCH]
                    )
                )
        for proc in procs:
            stack.stop_handler(proc)
        # A namespace outgrowing the shared pool moves to an index of its own in the
        # background: let that settle first.
        await asyncio.sleep(20)
        configure_logging("warning")  # not a line per request
        here = InProcess(stack, embedder)
        deps = {}
        for name, env in configs.items():
            settings = load_settings(
                {"MEMBUS_EMBEDDER": embedder, "MEMBUS_REDIS_URL": stack.redis_url, **env}
            )
            deps[name] = make_deps(settings, here.client, here.embedder, noop_publish, 1 << 20)
            if deps[name].reranker is not None:
                # As a handler with the stage on computes them at write time.
                await deps[name].reranker.warm([t for t, _ in items])  # type: ignore[union-attr]
        for name in configs:  # warm the models and the connections
            here.deps = deps[name]
            for q in questions[:20]:
                await here.ask(LATENCY_NS, "search", SearchRequest(query=q, limit=10))
        lat: dict[str, list[float]] = {c: [] for c in configs}
        names = list(configs)
        # Each search embeds its query, as a question not asked before does: the models
        # keep query vectors in this process only, and forget them here.
        models: list[Any] = [here.embedder, *(d.reranker for d in deps.values() if d.reranker)]
        models = [m for m in models if hasattr(m, "forget")]  # no cache, nothing to forget
        for r in range(rounds):
            for i, q in enumerate(questions):
                k = (i + r) % len(names)
                for name in names[k:] + names[:k]:
                    here.deps = deps[name]
                    for model in models:
                        model.forget([q])
                    t0 = time.perf_counter()
                    await here.ask(LATENCY_NS, "search", SearchRequest(query=q, limit=10))
                    lat[name].append((time.perf_counter() - t0) * 1000)
                    await here.settle()
        now = int(time.time() * 1000)
        naming = [time_window(q, now) is not None for q in questions] * rounds
        print(f"\nsearch p50 at {len(items):,} memories ({embedder}), paired, {rounds} rounds:")
        for name, samples in lat.items():
            some = [x for x, t in zip(samples, naming, strict=True) if t]
            print(
                f"  {name:<20} p50 {statistics.median(samples):6.2f} ms over {len(samples)};"
                f" the {len(some)} naming a time: {statistics.median(some):.2f} ms"
            )
    finally:
        if here is not None:
            await here.close()
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="minilm,hash")
    parser.add_argument("--alpha", default=None, help="MEMBUS_HYBRID_ALPHA for the handlers")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--modes", default=",".join(MODES), help=", ".join(MODES))
    parser.add_argument(
        "--store",
        choices=STORES,
        default=None,
        help="how observations are stored (default: dated with --cv, plain without)",
    )
    parser.add_argument(
        "--cv", action="store_true", help="each stage on and off, cross-validated by conversation"
    )
    parser.add_argument("--stages", default=",".join(STAGES), help=", ".join(STAGES))
    parser.add_argument(
        "--save", type=Path, default=None, help="--cv: write the candidates to this .json"
    )
    parser.add_argument(
        "--tune",
        choices=["offline", "bus"],
        default="offline",
        help="--cv: tune each weight on the collected top 30 (offline), or with a pass"
        " through the bus per weight (exact, slower)",
    )
    parser.add_argument(
        "--latency",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="this many paired rounds of search p50 at 2,000 memories, the defaults against"
        " each stage switched (with --cv, after it, at its fitted weight)",
    )
    args = parser.parse_args()
    stages = [s for s in args.stages.split(",") if s]
    if unknown := set(stages) - set(STAGES):
        raise SystemExit(f"unknown stages {sorted(unknown)}; known: {', '.join(STAGES)}")
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}; known: {', '.join(MODES)}")
    modes = [MODES[m] for m in args.modes.split(",")]
    files = sorted(args.data.glob("conv-*.json"))
    if not files:
        raise SystemExit(f"no conv-*.json under {args.data}")
    for embedder in args.embedders.split(","):
        if args.cv:
            store = args.store or "dated"
            by_bus = args.tune == "bus"
            timed = asyncio.run(run_cv(embedder, files, stages, store, args.save, by_bus))
            if args.latency:
                asyncio.run(latency(embedder, args.data, timed, args.latency))
        elif args.latency:
            timed = dict([("defaults", {}), *(switched(name) for name in stages)])
            asyncio.run(latency(embedder, args.data, timed, args.latency))
        else:
            asyncio.run(run(embedder, files, args.alpha, modes, args.store or "plain"))


if __name__ == "__main__":
    main()
