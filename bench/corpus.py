"""A synthetic but realistic memory corpus for the benches, fully determined by a seed.

Memories are a sentence or a few (8-60 words, median about 20: a clipped lognormal), written
from templates by type ("The user prefers ...", "Decided to ...", facts about projects, people
and numbers) whose slots are filled from a Zipfian vocabulary of 4,000 words (s = 1.05, with a
Zipf-Mandelbrot offset q = 20 that flattens the head, as for content words): some 700 real
English forms at the head (base words and their inflections) and generated pronounceable
words behind them, so BM25 and hash embeddings see a long tail as in real text.
Each memory has a type (the service's default user_pref, knowledge, context, decision), 0-3
tags (Zipf over 50), a workflow (Zipf over 20, 30% none: general), an agent, sometimes an
explicit importance, a TTL of hours to weeks on about 20% (never short enough to expire during
a bench), and related people when the text names someone.

Queries (3-10 words) are mostly words of a memory of the corpus (so matches exist), plus some
vocabulary words, with the workflow of that memory (or a random one, or none).

    .venv/bin/python bench/corpus.py [--n 10000] [--seed 7] [--samples 8]

prints summary statistics and sample texts, and checks that a seed gives the same corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from bus import MemoryBus
    from bus.client import AgentMemory


def _words(text: str) -> list[str]:
    """Whitespace-separated words (keeps the long word lists below readable)."""
    return text.split()


ZIPF_S = 1.05
# Zipf-Mandelbrot offset: slot words are content words, whose head is far flatter than that of
# all words ("the" is ~5% of English, the commonest content word under 1%); s rules the tail.
ZIPF_Q = 20.0
VOCAB_SIZE = 4000
# The vocabulary is the same for every corpus seed: seeds vary the draws, not the language.
_VOCAB_SEED = 20_240_611
LENGTH_MEDIAN, LENGTH_SIGMA, MIN_WORDS, MAX_WORDS = 20.0, 0.45, 8, 60

TYPES = ("user_pref", "knowledge", "context", "decision")
TYPE_WEIGHTS = (0.20, 0.35, 0.25, 0.20)

_NOUNS = _words("""
answer api account agent alert archive audit backup balance benchmark branch budget bug build
cache calendar call chart checkout client cluster code column commit config container contract
cost customer dashboard data database deadline default deploy design diagram disk document
domain draft email endpoint engineer environment error estimate event export feature feedback
field file filter flag form format function gateway graph guide handler header image incident
index input instance integration invoice issue job key label language latency layer library
limit link list load lock log login manager memory message meeting metric migration model
module network node note notebook order outage owner package page partner password patch
payment permission pipeline plan platform policy pool port price process product profile
project prompt provider query queue quota rate record region release replica report request
result review risk role roadmap route rule run sample schedule schema screen script search
secret server service session setting shard signal snapshot source spec sprint stack step
storage stream summary support table task team template test thread ticket timeout token tool
trace traffic trigger update upload usage user vendor version video volume warning webhook
window workflow worker workspace
""")
_VERBS = _words("""
add allow approve archive ask assign block book build cancel change check clean close commit
compare confirm connect copy create debug delay delete deploy disable drop enable escalate
export fail fetch finish fix follow handle import improve install keep launch limit load
merge migrate monitor move notify open pause plan prefer publish push read reduce refresh
reject release remind remove rename replace report request reset restart restore retry
review rollback rotate run save scale schedule search send ship skip split start stop store
summarize switch sync test track train trigger update upgrade upload use validate verify
wait watch write
""")
_ADJECTIVES = _words("""
active annual async automatic available basic blue broken careful cheap clean clear critical
daily dark detailed direct early empty exact external fast final formal free full green
hidden high important internal large late legacy light local long low main manual minor
monthly new nightly old online open optional other personal previous primary private public
quick quiet raw ready real recent red remote safe secure shared short simple slow small
stable strict temporary verbose weekly wrong
""")
_ADVERBS = _words("""
always never often rarely usually quickly slowly manually automatically daily weekly
first later soon again instead already only still carefully
""")
_STOP = frozenset(
    _words("""a an the to of and or for in on at by with from as is are was were be been it its
    this that these those they them their he she his her we our you your i my me not no
    but if then than so very about after before when while into over under up down out
    also every each per any all some more most less""")
)

_FIRST = _words("""
Alice Bob Carol David Emma Farid Grace Hiro Ines James Kenji Laura Maya Nina Omar Priya
Quentin Rosa Sam Tara Uma Victor Wei Xavier Yuki Zoe Aaron Bianca Chen Dmitri Elena Felix
Gabriel Hana Ivan Julia Kofi Lena Marco Nadia Oscar Paula Rahul Sofia Tomas Ulla Vera
Will Yara Zane Amir Beatriz Carlos Daria Eitan Fatima Goran Helga Isaac Jonas
""")
_LAST = _words("""
Chen Smith Garcia Nguyen Patel Kim Muller Rossi Silva Tanaka Novak Cohen Okafor Larsen
Dubois Kowalski Haddad Ivanova Moreau Santos Fischer Jensen Ali Brown Park Costa Weber
Sato Horvat Nilsson Reyes Singh Yilmaz Murphy Lopez Wagner Bauer Khan Adams Ito
""")
_PROJECTS = _words("""
Atlas Helios Falcon Orion Nimbus Quartz Beacon Cobalt Juniper Lumen Meridian Nova Pylon
Redwood Sierra Tundra Vega Willow Zephyr Apollo Basalt Cedar Delta Ember Fjord Granite
Harbor Iris Kestrel Lotus Magnet Neptune Onyx Pebble Raven Saturn Tidal Umbra Vertex Yukon
""")
TAGS = _words("""
python infra db ui security billing ml docs urgent q3 api auth perf ops frontend backend
testing release oncall customer design research data cost compliance mobile search cache
deploy incident migration onboarding legal hiring roadmap meeting bug feature refactor
monitoring network storage email slack calendar travel finance health preferences personal
""")
WORKFLOWS = [
    f"wf-{name}"
    for name in _words("""onboarding checkout support-triage release-train data-pipeline
    incident-review hiring q3-planning docs-refresh billing-migration search-tuning
    mobile-app security-audit cost-review customer-sync research infra-upgrade
    weekly-report travel-booking design-system""")
]
AGENTS = _words("""planner coder reviewer researcher support scheduler ops-bot writer analyst
tester assistant triage""")
_WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday")
_MONTHS = _words("""January February March April May June July August September October November
December""")
_TTLS = (2 * 3600, 6 * 3600, 12 * 3600, 86_400, 3 * 86_400, 7 * 86_400, 30 * 86_400)

# Templates by type. {w}: 1+ vocabulary words (the slack of the target length goes there);
# {P}/{Q}: people, {proj}: a project, {num} {port} {pct} {money} {ver} {date} {day} {time}.
_TEMPLATES: dict[str, tuple[str, ...]] = {
    "user_pref": (
        "The user prefers {w} over {w} when working on {w}.",
        "{P} prefers {w} answers with {w} and no {w}.",
        "The user wants {w} for {proj} and dislikes {w}.",
        "Always use {w} when talking to {P}; they find {w} confusing.",
        "User likes short {w} summaries before {w} reviews.",
        "The user asked to be reminded about {w} every {day}.",
        "{P} wants replies in {w} format with {w} examples.",
        "The user prefers meetings after {time} and {w} updates by email.",
        "User dislikes {w} notifications about {w} on {proj}.",
    ),
    "knowledge": (
        "The {w} service for {proj} runs on port {port} and depends on {w}.",
        "{proj} uses {w} for {w}; the limit is {num} {w} per {w}.",
        "According to {P}, the {w} was moved to {w} in version {ver}.",
        "The {w} API returns {w} after {num} seconds of {w}.",
        "{P} owns the {w} of {proj} and reviews {w} changes.",
        "Fact: {w} costs {money} per month on {proj}.",
        "The {w} table has {num} rows and an index on {w}.",
        "{proj} reached {pct} {w} coverage after the {w} work.",
        "It is known that {w} breaks when {w} exceeds {num}.",
    ),
    "context": (
        "Currently working on {w} for {proj} with {P}.",
        "The last {w} call returned {num} {w} results for {w}.",
        "This step looked at {w} logs from {date} and found {w}.",
        "Waiting for {P} to review the {w} change before {w}.",
        "Session note: {w} is blocked on {w}; retry after {time}.",
        "Drafting the {w} for {proj}, {pct} done, next is {w}.",
        "The {w} run on {date} took {num} minutes and {w}.",
    ),
    "decision": (
        "Decided to use {w} instead of {w} for {proj} because {w}.",
        "We decided to move {w} to {w} by {date}.",
        "{P} and {Q} agreed to drop {w} support in version {ver}.",
        "Chose {w} for the {w} pipeline; revisit on {date}.",
        "Rejected {w} for {proj}: too much {w} and {w}.",
        "Team decision: {w} changes need review from {P} before {w}.",
        "Decided to cap {w} at {num} per {w} until {date}.",
    ),
}
# Further sentences, appended while a memory is still well short of its target length.
_DETAILS = (
    "It also affects {w} and {w}.",
    "See the notes on {w} from {date}.",
    "{P} mentioned {w} as a follow-up.",
    "This matters for {w} in {proj}.",
    "The {w} should stay under {num} {w}.",
    "Related: {w}, {w} and {w}.",
    "Next step is to check {w} with {P}.",
    "Budget is {money} for {w}.",
    "Owner of the {w} is {P}.",
)
_SLOT_RE = re.compile(r"\{(\w+)\}")
_TOKEN_RE = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True, slots=True)
class CorpusMemory:
    type: str
    content: str
    tags: tuple[str, ...]
    workflow_id: str | None  # None: added outside any workflow (general)
    agent_id: str
    importance: float | None = None  # None: the type's default
    ttl_s: int | None = None  # None: the type's default (permanent, context 7 days)
    related_people: tuple[str, ...] = ()

    def add_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `AgentMemory.add` (workflow and agent are the handle's)."""
        return {
            "type": self.type,
            "content": self.content,
            "tags": list(self.tags),
            "importance": self.importance,
            "ttl_s": self.ttl_s,
            "related_people": list(self.related_people),
        }


@dataclass(frozen=True, slots=True)
class CorpusQuery:
    text: str
    workflow_id: str | None
    source: int = -1  # index of the memory its words came from; -1: vocabulary only


def _zipf_p(n: int, s: float, q: float = 0.0) -> np.ndarray:
    p = 1.0 / (np.arange(1, n + 1, dtype=np.float64) + q) ** s
    return p / p.sum()


def _inflect(nouns: list[str], verbs: list[str]) -> list[str]:
    def y_stem(w: str) -> str | None:  # query -> quer(ies), retry -> retr(ied)
        return w[:-1] if w.endswith("y") and w[-2] not in "aeiou" else None

    def s(w: str) -> str:
        if stem := y_stem(w):
            return stem + "ies"
        return w + "es" if w.endswith(("s", "x", "ch", "sh")) else w + "s"

    def ed(w: str) -> str:
        if stem := y_stem(w):
            return stem + "ied"
        return w + "d" if w.endswith("e") else w + "ed"

    def ing(w: str) -> str:
        return w[:-1] + "ing" if w.endswith("e") and not w.endswith("ee") else w + "ing"

    return [s(n) for n in nouns] + [f(v) for v in verbs for f in (s, ed, ing)]


def _pseudo_words(rng: random.Random, exclude: set[str], n: int) -> list[str]:
    """`n` distinct pronounceable non-words (onset + vowel + coda syllables)."""
    onsets = _words("b br c ch d dr f fl g gr h j k l m n p pl pr r s sh sk sl st t th tr v w z")
    vowels = _words("a e i o u a e i o ai ea ee oo ou")
    codas = _words("n r l s t m nd st rk ng x ck")
    out: list[str] = []
    seen = set(exclude)
    while len(out) < n:
        syllables = []
        for i in range(rng.choices((2, 3), (0.65, 0.35))[0]):
            onset = "" if i == 0 and rng.random() < 0.2 else rng.choice(onsets)
            coda = rng.choice(codas) if rng.random() < 0.45 else ""
            syllables.append(onset + rng.choice(vowels) + coda)
        word = "".join(syllables)
        if 4 <= len(word) <= 11 and word not in seen:
            seen.add(word)
            out.append(word)
    return out


def build_vocabulary(size: int = VOCAB_SIZE) -> list[str]:
    """Words by Zipf rank: real base words, then their inflections, then generated words."""
    rng = random.Random(_VOCAB_SEED)
    base = list(dict.fromkeys(_NOUNS + _VERBS + _ADJECTIVES + _ADVERBS))
    rng.shuffle(base)
    known = set(base)
    inflected = [w for w in dict.fromkeys(_inflect(_NOUNS, _VERBS)) if w not in known]
    rng.shuffle(inflected)
    real = base + inflected
    return real + _pseudo_words(rng, set(real), max(0, size - len(real)))


VOCAB = build_vocabulary()
_VOCAB_P = _zipf_p(len(VOCAB), ZIPF_S, ZIPF_Q)


def _cum(p: np.ndarray) -> list[float]:
    return np.cumsum(p).tolist()


class _ZipfPool:
    """Zipf word draws, made by numpy in chunks (one call per word would be slow at 100k)."""

    def __init__(self, rng: np.random.Generator, chunk: int = 1 << 16) -> None:
        self._rng, self._chunk = rng, chunk
        self._buf: list[int] = []
        self._i = 0

    def take(self, k: int) -> list[str]:
        if self._i + k > len(self._buf):
            self._buf = (
                self._buf[self._i :]
                + self._rng.choice(len(VOCAB), size=self._chunk, p=_VOCAB_P).tolist()
            )
            self._i = 0
        out = [VOCAB[j] for j in self._buf[self._i : self._i + k]]
        self._i += k
        return out


class _Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = _ZipfPool(np.random.default_rng(seed))
        people_rng = random.Random(_VOCAB_SEED + 1)
        names = {f"{people_rng.choice(_FIRST)} {people_rng.choice(_LAST)}" for _ in range(400)}
        self.people = sorted(names)
        people_rng.shuffle(self.people)  # rank order for the Zipf draw, fixed for all seeds
        # Cumulative weights: `choices` would otherwise sum the weights on every call.
        self.people_w = _cum(_zipf_p(len(self.people), 1.0))
        self.project_w = _cum(_zipf_p(len(_PROJECTS), 0.9))
        self.tag_w = _cum(_zipf_p(len(TAGS), 1.0))
        self.workflow_w = _cum(_zipf_p(len(WORKFLOWS), 1.0))
        self.agent_w = _cum(_zipf_p(len(AGENTS), 0.8))

    def person(self) -> str:
        return self.rng.choices(self.people, cum_weights=self.people_w)[0]

    def entity(self, slot: str, mentioned: list[str]) -> str:
        rng = self.rng
        if slot in ("P", "Q"):
            name = self.person()
            mentioned.append(name)
            return name
        if slot == "proj":
            return rng.choices(_PROJECTS, cum_weights=self.project_w)[0]
        if slot == "num":
            return str(int(10 ** rng.uniform(0.3, 4.5)))
        if slot == "port":
            return str(rng.choice((80, 443, 5432, 6379, 8080, 9090)) + rng.randrange(0, 3))
        if slot == "pct":
            return f"{rng.randrange(5, 100)}%"
        if slot == "money":
            return f"${int(10 ** rng.uniform(1, 5)):,}"
        if slot == "ver":
            return f"{rng.randrange(0, 6)}.{rng.randrange(0, 20)}.{rng.randrange(0, 10)}"
        if slot == "date":
            if rng.random() < 0.5:
                return f"{rng.choice(_MONTHS)} {rng.randrange(1, 29)}"
            return f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        if slot == "day":
            return rng.choice(_WEEKDAYS)
        if slot == "time":
            return f"{rng.randrange(8, 19)}:{rng.choice(('00', '15', '30', '45'))}"
        raise KeyError(slot)

    def text(self, type_: str) -> tuple[str, list[str]]:
        rng = self.rng
        target = round(math.exp(rng.gauss(math.log(LENGTH_MEDIAN), LENGTH_SIGMA)))
        target = min(MAX_WORDS, max(MIN_WORDS, target))
        mentioned: list[str] = []

        def fill(template: str) -> str:  # entities now; {w} stays for later
            return _SLOT_RE.sub(
                lambda m: "{w}" if m[1] == "w" else self.entity(m[1], mentioned), template
            )

        sentences = [fill(rng.choice(_TEMPLATES[type_]))]
        min_len = len(sentences[0].split())
        # Add detail sentences while far below the target (at most 3): longer memories read
        # as several statements rather than one sentence with long noun piles.
        while min_len < target - 8 and len(sentences) < 4:
            sentences.append(fill(rng.choice(_DETAILS)))
            min_len += len(sentences[-1].split())
        text = " ".join(sentences)
        slots = text.count("{w}")
        extra = [0] * slots
        for _ in range(max(0, target - min_len)):
            extra[rng.randrange(slots)] += 1
        parts = text.split("{w}")
        out = [parts[0]]
        for i in range(slots):
            out.append(" ".join(self.words.take(1 + extra[i])))
            out.append(parts[i + 1])
        content = "".join(out)
        return content[0].upper() + content[1:], mentioned

    def memory(self) -> CorpusMemory:
        rng = self.rng
        type_ = rng.choices(TYPES, TYPE_WEIGHTS)[0]
        content, mentioned = self.text(type_)
        k = rng.choices((0, 1, 2, 3), (0.3, 0.35, 0.25, 0.1))[0]
        tags: list[str] = []
        while len(tags) < k:
            tag = rng.choices(TAGS, cum_weights=self.tag_w)[0]
            if tag not in tags:
                tags.append(tag)
        workflow = (
            None if rng.random() < 0.3 else rng.choices(WORKFLOWS, cum_weights=self.workflow_w)[0]
        )
        importance = round(rng.uniform(0.1, 1.0), 2) if rng.random() < 0.35 else None
        ttl = rng.choice(_TTLS) if rng.random() < 0.2 else None
        people = list(dict.fromkeys(p for p in mentioned if rng.random() < 0.8))
        if rng.random() < 0.1:  # someone involved but not named in the text
            people.append(self.person())
        return CorpusMemory(
            type=type_,
            content=content,
            tags=tuple(tags),
            workflow_id=workflow,
            agent_id=rng.choices(AGENTS, cum_weights=self.agent_w)[0],
            importance=importance,
            ttl_s=ttl,
            related_people=tuple(dict.fromkeys(people)),
        )


def make_corpus(n: int, seed: int) -> list[CorpusMemory]:
    """`n` memories; the same `(n, seed)` always gives the same list, and a longer corpus of
    the same seed starts with the shorter one."""
    gen = _Generator(seed)
    return [gen.memory() for _ in range(n)]


def make_queries(
    n: int, seed: int, corpus: Sequence[CorpusMemory] | None = None
) -> list[CorpusQuery]:
    """`n` queries of 3-10 words. 90% take most of their words from one memory of `corpus`
    (by default `make_corpus(2000, seed)`: pass the corpus actually loaded); the rest are
    vocabulary words only (may match little). The workflow is the memory's own, or for a
    general memory a random workflow half the time, else none."""
    if corpus is None:
        corpus = make_corpus(2000, seed)
    gen = _Generator(seed ^ 0x5EED)  # own streams: a query set does not shift the corpus
    rng = gen.rng
    out: list[CorpusQuery] = []
    for _ in range(n):
        k = min(10, max(3, round(rng.triangular(3, 10, 5))))
        if not corpus or rng.random() < 0.1:
            wf = (
                None
                if rng.random() < 0.3
                else rng.choices(WORKFLOWS, cum_weights=gen.workflow_w)[0]
            )
            out.append(CorpusQuery(" ".join(gen.words.take(k)), wf))
            continue
        src = rng.randrange(len(corpus))
        mem = corpus[src]
        tokens = [t.lower() for t in _TOKEN_RE.findall(mem.content)]
        if rng.random() < 0.7:  # most queries are keywords; some keep the function words
            tokens = [t for t in tokens if t not in _STOP] or tokens
        own = min(len(tokens), max(1, round(k * rng.uniform(0.6, 1.0))))
        picks = sorted(rng.sample(range(len(tokens)), own))
        words = [tokens[i] for i in picks] + gen.words.take(k - own)
        wf = mem.workflow_id
        if wf is None and rng.random() < 0.5:
            wf = rng.choices(WORKFLOWS, cum_weights=gen.workflow_w)[0]
        out.append(CorpusQuery(" ".join(words), wf, src))
    return out


def fingerprint(items: Sequence[Any]) -> str:
    """A short digest of a corpus or query list (to compare two runs)."""
    return hashlib.blake2b(repr(list(items)).encode(), digest_size=8).hexdigest()


def _percentiles(values: Sequence[float], ps: Sequence[int]) -> list[float]:
    arr = np.asarray(values, dtype=np.float64)
    return [float(x) for x in np.percentile(arr, ps)] if len(arr) else [0.0] * len(ps)


def summarize(corpus: Sequence[CorpusMemory], queries: Sequence[CorpusQuery] = ()) -> str:
    """Length percentiles, vocabulary use and the mix of types, tags, workflows, TTLs."""
    ps = (5, 25, 50, 75, 95, 100)
    lengths = [len(m.content.split()) for m in corpus]
    counts: Counter[str] = Counter()
    for m in corpus:
        counts.update(t.lower() for t in _TOKEN_RE.findall(m.content))
    n = max(1, len(corpus))
    types = Counter(m.type for m in corpus)
    tags = Counter(t for m in corpus for t in m.tags)
    n_tags = Counter(len(m.tags) for m in corpus)
    wfs = Counter(m.workflow_id for m in corpus)
    dup = len(corpus) - len({(m.type, m.content) for m in corpus})
    lines = [
        f"corpus: {len(corpus)} memories, vocabulary {len(VOCAB)} words (Zipf s={ZIPF_S}"
        f" q={ZIPF_Q:g}),"
        f" {len(counts)} distinct tokens used, {sum(counts.values())} tokens",
        "  words/memory p5 p25 p50 p75 p95 max: "
        + " ".join(f"{x:.0f}" for x in _percentiles(lengths, ps))
        + f" (mean {np.mean(lengths) if lengths else 0:.1f})",
        "  types: " + ", ".join(f"{t} {types[t] / n:.0%}" for t in TYPES),
        "  tags per memory: " + ", ".join(f"{k}: {n_tags[k] / n:.0%}" for k in range(4)),
        "  top tags: " + ", ".join(f"{t} {c}" for t, c in tags.most_common(8)),
        f"  workflows: {len(wfs) - (None in wfs)} used, general (none) {wfs[None] / n:.0%};"
        " top: " + ", ".join(f"{w} {c}" for w, c in wfs.most_common(4) if w),
        f"  explicit importance {sum(m.importance is not None for m in corpus) / n:.0%},"
        f" ttl_s set {sum(m.ttl_s is not None for m in corpus) / n:.0%},"
        f" related people {sum(bool(m.related_people) for m in corpus) / n:.0%},"
        f" exact duplicates {dup}",
        "  top tokens: " + " ".join(w for w, _ in counts.most_common(15)),
    ]
    if queries:
        qlen = [len(q.text.split()) for q in queries]
        lines.append(
            f"queries: {len(queries)}, words p5 p50 p95: "
            + " ".join(f"{x:.0f}" for x in _percentiles(qlen, (5, 50, 95)))
            + f"; from a memory {sum(q.source >= 0 for q in queries) / len(queries):.0%},"
            f" with a workflow {sum(q.workflow_id is not None for q in queries) / len(queries):.0%}"
        )
    return "\n".join(lines)


class Agents:
    """SDK handles by (workflow, agent), made once: what a corpus memory is added through."""

    def __init__(self, bus: MemoryBus) -> None:
        self._bus = bus
        self._handles: dict[tuple[str | None, str | None], AgentMemory] = {}

    def get(self, workflow_id: str | None, agent_id: str | None = None) -> AgentMemory:
        key = (workflow_id, agent_id)
        if key not in self._handles:
            self._handles[key] = self._bus.agent(workflow_id=workflow_id, agent_id=agent_id)
        return self._handles[key]

    async def add(self, m: CorpusMemory) -> Any:
        return await self.get(m.workflow_id, m.agent_id).add(**m.add_kwargs())

    async def search(self, q: CorpusQuery, **kwargs: Any) -> Any:
        return await self.get(q.workflow_id).search(q.text, **kwargs)


async def load(agents: Agents, memories: Sequence[CorpusMemory], batch: int = 64) -> float:
    """Add `memories` through the bus, `batch` concurrent adds at a time; the seconds taken."""
    t0 = time.perf_counter()
    for i in range(0, len(memories), batch):
        await asyncio.gather(*(agents.add(m) for m in memories[i : i + batch]))
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description="corpus statistics (see the module docstring)")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--samples", type=int, default=8)
    args = p.parse_args()
    t0 = time.perf_counter()
    corpus = make_corpus(args.n, args.seed)
    secs = time.perf_counter() - t0
    queries = make_queries(args.queries, args.seed, corpus)
    print(summarize(corpus, queries))
    print(f"  generated in {secs:.2f} s ({args.n / max(secs, 1e-9):,.0f} memories/s)")
    same = fingerprint(make_corpus(args.n, args.seed)) == fingerprint(corpus)
    same_q = fingerprint(make_queries(args.queries, args.seed, corpus)) == fingerprint(queries)
    other = fingerprint(make_corpus(args.n, args.seed + 1)) != fingerprint(corpus)
    prefix = fingerprint(make_corpus(min(100, args.n), args.seed)) == fingerprint(corpus[:100])
    print(
        f"determinism: same seed same corpus {same}, same queries {same_q}, other seed"
        f" differs {other}, shorter corpus is a prefix {prefix}; corpus {fingerprint(corpus)}"
    )
    rng = random.Random(args.seed)
    for m in rng.sample(corpus, min(args.samples, len(corpus))):
        extra = f" ttl={m.ttl_s}" if m.ttl_s else ""
        extra += f" people={list(m.related_people)}" if m.related_people else ""
        print(f"  [{m.type} {m.workflow_id or 'general'} {list(m.tags)}{extra}] {m.content}")
    for q in rng.sample(queries, min(args.samples, len(queries))):
        print(f"  query [{q.workflow_id or 'general'}] {q.text}")


if __name__ == "__main__":
    main()
