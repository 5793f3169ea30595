"""LoCoMo through the bus with the query signals (issue 38, parts 2-3) on and off.

The memories are those of `bench/locomo.py` (each session observation, the speaker as a tag),
stored per conversation as that bench stores them ("plain"), as an agent importing a past
conversation would ("dated": the session's date as `valid_from`, the speaker in
`related_people` as well), and, with `--stores anon`, as an extractor's memories whose person
is only in `related_people` ("anon": dated, the speaker's name taken out of the content and
no speaker tag). Each configuration is a set of `MEMBUS_*` variables for fresh
handlers over the same Redis; every question of categories 1-4 is asked in both stores.
Printed per configuration and store: recall@10, MRR@10, both per category, search p50/p99.

A weight tuned here is reported cross-validated by conversation: for each conversation, the
weight with the best recall@10 + MRR@10 on the other four, scored on it; the five held-out
figures pooled (question-weighted).

Client-side stages, measured without handler changes (each costs whole extra searches):
  prf        pseudo-relevance feedback: the question searched in vector mode, the top 3
             memories' most frequent words (not stopwords, not in the question, at most 6)
             appended to the question, and that searched in the default mode.
  neighbours the results' session neighbours: memories of the same session whose turns are
             next to a top-3 result's, moved up behind it when the question asks about an
             event's context (why / how did ... feel / after / before).

    python bench/locomo_signals.py
    python bench/locomo_signals.py --configs base,names:0.05,times:0.1 --stores dated
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locomo import DATA, load, tag_of
from roundtrips import InProcess

from bus import MemoryBus
from contracts.messages import SearchRequest
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.logs import configure_logging
from handlers.ops.query_signals import time_window
from handlers.ops.terms import STOPWORDS
from handlers.settings import load_settings

BATCH = 32
SETTLE_S = 20.0
CONFIGS = [
    "default",
    "base",
    *(f"names:{w}" for w in (0.02, 0.05, 0.1, 0.2)),
    *(f"times:{w}" for w in (0.05, 0.1, 0.2, 0.3, 0.5)),
    "names:0.05+times:0.2",
    "prf",
    "neighbours",
]
CONTEXT_RE = re.compile(r"\b(why|how did \w+ feel|after|before|what happened|during)\b", re.I)


@dataclass
class Fact:
    content: str
    speaker: str
    dia: list[str]
    session: int
    date: datetime | None


@dataclass
class Conversation:
    name: str
    facts: list[Fact]
    questions: list[tuple[str, set[str], int]]  # question, evidence, category


def session_date(raw: str | None) -> datetime | None:
    if not raw:
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(raw.strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def read(path: Path) -> Conversation:
    """`locomo.load`'s facts and questions, with each fact's session and its date, and each
    question's category."""
    conv = json.loads(path.read_text())
    c = conv.get("conversation", conv)
    facts: list[Fact] = []
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
    base_facts, base_questions = load(path)
    assert len(base_facts) == len(facts) and len(base_questions) == len(questions)
    return Conversation(path.stem, facts, questions)


def unnamed(content: str, speaker: str) -> str:
    """The observation without its speaker's name ("Caroline's" -> "their", "Caroline" ->
    "they"), as an extractor writes a memory whose person is in `related_people`."""
    content = re.sub(rf"\b{re.escape(speaker)}['’]s\b", "their", content)
    return re.sub(rf"\b{re.escape(speaker)}\b", "they", content)


async def ingest(bus: MemoryBus, facts: list[Fact], store: str) -> None:
    """plain: as bench/locomo.py; dated: with the session's date and the speaker in
    `related_people`; anon: the speaker in `related_people` only, not in the content nor
    as a tag (dated too)."""
    mem = bus.agent(agent_id="locomo")
    plain = store == "plain"
    anon = store == "anon"
    for i in range(0, len(facts), BATCH):
        await asyncio.gather(
            *(
                mem.add(
                    "fact",
                    unnamed(f.content, f.speaker) if anon else f.content,
                    tags=[] if anon else [tag_of(f.speaker)],
                    metadata={"dia": f.dia, "session": f.session},
                    dedup="none",
                    related_people=() if plain else [f.speaker],
                    valid_from=None if plain else f.date,
                )
                for f in facts[i : i + BATCH]
            )
        )


def expansion(question: str, contents: list[str], most: int = 6) -> list[str]:
    asked = set(re.findall(r"\w+", question.lower()))
    words = Counter(
        w
        for text in contents
        for w in set(re.findall(r"[a-z]{3,}", text.lower()))
        if w not in STOPWORDS and w not in asked
    )
    return [w for w, n in words.most_common(most) if n >= 2] or [
        w for w, _ in words.most_common(min(3, most))
    ]


def turn(dia: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"D(\d+):(\d+)", dia)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class Outcome:
    ranks: dict[tuple[str, str], list[int | None]] = field(default_factory=dict)
    cats: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    latency: list[float] = field(default_factory=list)


async def ask(bus: MemoryBus, conv: Conversation, stage: str, out: Outcome, store: str) -> None:
    mem = bus.agent(agent_id="asker")
    ranks: list[int | None] = []
    for question, evidence, _ in conv.questions:
        t0 = time.perf_counter()
        if stage == "prf":
            first = await mem.search(question, limit=3, mode="vector")
            extra = expansion(question, [h.content for h in first.results])
            reply = await mem.search(" ".join([question, *extra]), limit=10)
        elif stage == "neighbours":
            reply = await mem.search(question, limit=10)
        else:
            reply = await mem.search(question, limit=10)
        out.latency.append((time.perf_counter() - t0) * 1000)
        hits = [set(h.metadata.get("dia", [])) for h in reply.results]
        if stage == "neighbours" and CONTEXT_RE.search(question):
            hits = await with_neighbours(mem, question, reply.results)
        rank = next((i for i, dia in enumerate(hits, 1) if evidence & dia), None)
        ranks.append(rank)
    out.ranks[(store, conv.name)] = ranks
    out.cats[(store, conv.name)] = [c for _, _, c in conv.questions]


async def with_neighbours(mem: object, question: str, results: list) -> list[set[str]]:  # type: ignore[type-arg]
    """The results with, behind each of the top 3, the memories of its session within two
    turns of its own that a deeper search found (limit 30): the event's context."""
    deeper = await mem.search(question, limit=30)  # type: ignore[attr-defined]
    pool = [set(h.metadata.get("dia", [])) for h in deeper.results]
    shown = [set(h.metadata.get("dia", [])) for h in results]
    out: list[set[str]] = []
    for i, dia in enumerate(shown):
        if dia not in out:
            out.append(dia)
        if i >= 3:
            continue
        mine = [t for t in map(turn, dia) if t]
        for other in pool:
            theirs = [t for t in map(turn, other) if t]
            near = any(a[0] == b[0] and abs(a[1] - b[1]) <= 2 for a in mine for b in theirs)
            if near and other not in out:
                out.append(other)
    return out[:10]


def figures(ranks: list[int | None]) -> tuple[float, float]:
    n = len(ranks) or 1
    return (
        sum(1 for r in ranks if r is not None and r <= 10) / n,
        sum(1.0 / r for r in ranks if r is not None and r <= 10) / n,
    )


def report(name: str, out: Outcome, stores: list[str]) -> None:
    lat = sorted(out.latency)
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    for store in stores:
        ranks = [r for (s, _), v in out.ranks.items() if s == store for r in v]
        cats = [c for (s, _), v in out.cats.items() if s == store for c in v]
        r10, mrr = figures(ranks)
        per = " ".join(
            "c{}:{:.3f}/{:.3f}".format(
                c, *figures([r for r, k in zip(ranks, cats, strict=True) if k == c])
            )
            for c in (1, 2, 3, 4)
        )
        print(f"{name:<22}{store:<7}{r10:>7.3f}{mrr:>8.3f}  {per}  p50 {p50:.2f} p99 {p99:.2f}")


def cross_validated(
    family: str, runs: dict[str, Outcome], store: str, convs: list[str]
) -> tuple[float, float, list[str]]:
    """Each conversation scored with the weight of `family` (configs named family:weight, and
    base as weight 0) best on the other four."""
    members = {
        k: v for k, v in runs.items() if k == "base" or ("+" not in k and k.split(":")[0] == family)
    }
    pooled: list[int | None] = []
    chosen = []
    for held in convs:
        best, best_name = -1.0, "base"
        for name, out in members.items():
            train = [r for c in convs if c != held for r in out.ranks[(store, c)]]
            score = sum(figures(train))
            if score > best:
                best, best_name = score, name
        chosen.append(best_name)
        pooled += members[best_name].ranks[(store, held)]
    r10, mrr = figures(pooled)
    return r10, mrr, chosen


def env_of(config: str) -> tuple[dict[str, str], str]:
    """`MEMBUS_*` variables and the client-side stage of a configuration name: the stages it
    names are on, every other one off ("base": all off); "default": the handler's
    defaults."""
    if config == "default":
        return {}, ""
    env = {"MEMBUS_RANK_NAMES": "0", "MEMBUS_RANK_TIMES": "0"}
    stage = ""
    for part in config.split("+"):
        key, _, value = part.partition(":")
        if key == "names":
            env["MEMBUS_RANK_NAMES"] = value
        elif key == "times":
            env["MEMBUS_RANK_TIMES"] = value
        elif key in ("prf", "neighbours"):
            stage = key
        elif key not in ("base", "default"):
            raise SystemExit(f"unknown configuration part {part!r}")
    return env, stage


async def run(embedder: str, files: list[Path], configs: list[str], stores: list[str]) -> None:
    convs = [read(p) for p in files]
    stack = EmbeddedStack.temporary()
    try:
        stack.start_servers()
        runs: dict[str, Outcome] = {}
        ingested = False
        print(f"{'config':<22}{'store':<7}{'R@10':>7}{'MRR@10':>8}  per category R@10/MRR@10")
        for config in configs:
            env, stage = env_of(config)
            procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": embedder, **env})
            await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
            if not ingested:
                for conv in convs:
                    for store in stores:
                        ns = f"locomo_{store}_{conv.name.replace('-', '_')}"
                        async with await MemoryBus.connect(
                            stack.nats_url, namespace=ns, timeout=60
                        ) as bus:
                            await ingest(bus, conv.facts, store)
                # A namespace outgrowing the shared pool moves to an index of its own in the
                # background: asked before that settles, the first configuration scored lower.
                await asyncio.sleep(SETTLE_S)
                ingested = True
            out = Outcome()
            for conv in convs:
                for store in stores:
                    ns = f"locomo_{store}_{conv.name.replace('-', '_')}"
                    async with await MemoryBus.connect(
                        stack.nats_url, namespace=ns, timeout=60
                    ) as bus:
                        await ask(bus, conv, stage, out, store)
            runs[config] = out
            report(config, out, stores)
            for proc in procs:
                stack.stop_handler(proc)
        names = [c.name for c in convs]
        families = sorted({c.split(":")[0] for c in runs if ":" in c and "+" not in c})
        for family in families:
            for store in stores:
                r10, mrr, chosen = cross_validated(family, runs, store, names)
                print(f"CV {family:<19}{store:<7}{r10:>7.3f}{mrr:>8.3f}  chosen {chosen}")
    finally:
        stack.stop()


def items_2000(files: list[Path], n: int = 2000) -> tuple[list[tuple[str, str]], list[str]]:
    """Target (b)'s namespace (bench/targets.py): the observations, then the conversations'
    own turns, up to `n`; and the questions of categories 1-4."""
    observations: list[tuple[str, str]] = []
    turns: list[tuple[str, str]] = []
    questions: list[str] = []
    for path in files:
        conv = read(path)
        observations += [(f.content, f.speaker) for f in conv.facts]
        questions += [q for q, _, _ in conv.questions]
        c = json.loads(path.read_text())
        c = c.get("conversation", c)
        for key in sorted(
            (k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])
        ):
            turns += [(t["text"], t["speaker"]) for t in c[key] if t.get("text")]
    return (observations + turns)[:n], questions


async def latency(embedder: str, files: list[Path], configs: list[str], rounds: int) -> None:
    """Search time over 2,000 memories (target (b)'s namespace, bench/targets.py) per
    configuration, paired: each question asked under every configuration in turn (the order
    rotating), through `dispatch()` in this process (one model, one Redis; the settings
    swapped per request), so that the machine's load falls on all of them alike."""
    items, questions = items_2000(files)
    stack = EmbeddedStack.temporary()
    here: InProcess | None = None
    try:
        stack.start_servers()
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": embedder})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=180)
        async with await MemoryBus.connect(stack.nats_url, namespace="locomo2k", timeout=60) as bus:
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
        await asyncio.sleep(SETTLE_S)
        configure_logging("warning")  # not a line per request
        here = InProcess(stack, embedder)
        deps = {
            c: dataclasses.replace(here.deps, settings=load_settings({
                "MEMBUS_EMBEDDER": embedder, "MEMBUS_REDIS_URL": stack.redis_url, **env_of(c)[0]
            }))
            for c in configs
        }  # fmt: skip
        for q in questions[:50]:  # warm the model and the connections
            await here.ask("locomo2k", "search", SearchRequest(query=q, limit=10))
        lat: dict[str, list[float]] = {c: [] for c in configs}
        for r in range(rounds):
            for i, q in enumerate(questions):
                k = (i + r) % len(configs)
                for config in configs[k:] + configs[:k]:
                    here.deps = deps[config]
                    t0 = time.perf_counter()
                    await here.ask("locomo2k", "search", SearchRequest(query=q, limit=10))
                    lat[config].append((time.perf_counter() - t0) * 1000)
                    await here.settle()
        now = int(time.time() * 1000)
        timed = [time_window(q, now) is not None for q in questions] * rounds
        for config, samples in lat.items():
            some = [x for x, t in zip(samples, timed, strict=True) if t]
            print(
                f"{config:<24} p50 {statistics.median(samples):.2f} ms over {len(samples)};"
                f" the {len(some)} naming a time: {statistics.median(some):.2f} ms"
            )
    finally:
        if here is not None:
            await here.close()
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma-separated; each default (the handler's), base (every stage off),"
        " names:W, times:W, prf, neighbours, or parts joined by + (the others off)",
    )
    parser.add_argument("--stores", default="plain,dated")
    parser.add_argument(
        "--latency",
        type=int,
        default=0,
        help="instead: this many rounds of search p50 at 2,000 memories per configuration",
    )
    args = parser.parse_args()
    files = sorted(args.data.glob("conv-*.json"))
    if not files:
        raise SystemExit(f"no conv-*.json under {args.data}")
    if args.latency:
        asyncio.run(latency(args.embedder, files, args.configs.split(","), args.latency))
        return
    asyncio.run(run(args.embedder, files, args.configs.split(","), args.stores.split(",")))


if __name__ == "__main__":
    main()
