"""Soak bench: a bounded mixed workload against the embedded stack for a long time.

Starts its own embedded stack in a temporary directory (NATS, Redis Stack with persistence on,
so AOF as in production; N handlers), then `--concurrency` agents in `--workflows` workflows,
each sending one request at a time, draw operations from a fixed mix:

    40% add       8-60 word texts, mixed types, tags, importance, metadata; 20% with a short
                  TTL (30-120 s, so memories expire during the soak), 15% with 10-60 min
    30% search    short queries, some with a types or tags filter, scope or mode
    15% recall    a user turn, in a session the agent renews every 20 turns (if the SDK has it)
     5% describe
    10% delete    of the agent's own earlier adds (one id; several when over `--cap`)

so the live set stays around `--cap` memories. `--rate` paces the whole load (ops/s over all
agents); without it every agent sends its next request as soon as the last one is answered.

Every `--interval` seconds one row: ops, ops/s, errors by code (no reply within `--timeout`
is `timeout`), p50/p99/max latency of every request of the interval (failed ones too),
the RSS of each handler process and of Redis (/proc/<pid>/status VmRSS), and the live memory
count (describe of each workflow plus general; `tracked` is the agents' own estimate). At the
end: totals, error rate, p99 per interval, RSS first/last/max, and the slope of RSS, p99 and
ops/s over the last 3/4 of the run with a flat/growing verdict. Rows also go, as JSON lines,
to `--out`. Prints figures; asserts nothing. Run from the project root:

    .venv/bin/python bench/soak.py --minutes 20 [--handlers 2] [--embedder hash]
        [--concurrency 8] [--rate N|unthrottled] [--durable] [--interval 60] [--seed 7]

Ctrl-C stops the load, prints the summary of what ran and stops the stack. (The terminal's
SIGINT also reaches the servers and handlers, which share the process group: the last row
may then miss the live count.) Deleted memories keep their history in Redis for
MEMBUS_HISTORY_AFTER_DELETE_S (30 days) by design, so Redis grows with the number of deletes;
`--env MEMBUS_HISTORY_AFTER_DELETE_S=60` makes that bounded too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import signal
import subprocess
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from measure import keyspace, percentile, proc_cpu_ms, proc_rss_mib

from bus import MemoryBus
from bus.client import AgentMemory
from bus.errors import BusError
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.store.placement import index_name

NS = "soak"
OPS = ("add", "search", "recall", "describe", "delete")
OP_WEIGHTS = (40, 30, 15, 5, 10)
SESSION_TURNS = 20  # recall turns per session before the agent starts a new one
PRUNE_EVERY_S = 2.0

TYPE_WEIGHTS = {
    "context": 18,
    "observation": 15,
    "decision": 12,
    "knowledge": 12,
    "fact": 10,
    "todo": 8,
    "event": 8,
    "user_pref": 6,
    "goal": 4,
    "preference": 5,
    "identity": 2,
}
TYPE_NAMES = list(TYPE_WEIGHTS)
TAGS = [
    "infra", "db", "billing", "auth", "ui", "api", "ci", "release", "incident", "perf",
    "security", "docs", "mobile", "search", "data", "urgent", "q3", "customer", "oncall", "ml",
]  # fmt: skip
PREFIXES = {
    "context": ["Currently working on", "This step looked at", "The last tool call showed"],
    "observation": ["Noticed that", "The logs show that", "While debugging we saw that"],
    "decision": ["We decided that", "Team decision:", "After review we agreed that"],
    "knowledge": ["The runbook says", "It is known that", "The docs explain that"],
    "fact": ["Fact:", "For the record,", "Confirmed:"],
    "todo": ["TODO: check why", "Follow up on why", "Remember to verify that"],
    "event": ["On Tuesday", "During the last release", "Yesterday at noon"],
    "user_pref": ["The user prefers answers where", "The user dislikes it when", "The user wants"],
    "goal": ["The goal of this sprint is that", "We aim to make sure that"],
    "preference": ["Preferred setup:", "The team likes it when"],
    "identity": ["The user is an engineer who says", "The user, Dana, notes that"],
}
SUBJECTS = [
    "the staging deploy", "the nightly backup job", "the billing service", "the postgres primary",
    "the login page", "the search index", "the CI pipeline", "the customer from Acme",
    "the onboarding flow", "the API gateway", "the mobile client", "the data export",
    "the feature flag service", "the invoice generator", "the cache layer", "the redis cluster",
    "the kubernetes node pool", "the payment webhook", "the audit log", "the release branch",
]  # fmt: skip
VERBS = [
    "failed after", "slowed down during", "needs a review before", "was rolled back after",
    "depends on", "times out on", "should be migrated before", "broke because of",
    "was fixed by", "is blocked by", "started logging errors after", "must not run during",
    "got faster thanks to", "keeps retrying on", "was paged twice over",
]  # fmt: skip
OBJECTS = [
    "the schema migration on the orders table", "the friday release", "the new rate limiter",
    "a retry storm from the mobile app", "an expired TLS certificate", "the redis upgrade",
    "a missing index on customer_id", "the quarterly invoice run", "the SSO configuration",
    "a memory leak in the worker pool", "the move to a new region", "the vector search rollout",
    "a flaky integration test", "the logging pipeline", "the load test on staging",
    "a bad config value for the connection pool", "the cron job that cleans old sessions",
]  # fmt: skip
TAILS = [
    "according to the incident report", "said the on-call engineer", "see ticket {n}",
    "in region eu-west-{m}", "for the third time this week", "since version 2.{n}",
    "which cost about {n} dollars", "with {m} minutes of downtime", "in build {n}",
]  # fmt: skip
QUESTIONS = [
    "what do we know about {s}", "why {s} {v} {o}", "{o}", "status of {s}",
    "has anyone looked at {o}", "{s} {v}", "how did we fix {o}", "who owns {s}",
]  # fmt: skip
TURNS = [
    "Can you check whether {s} {v} {o}?", "Let's continue with {s}.",
    "What was decided about {o}?", "I think {s} {v} {o}, please look into it.",
    "Remind me what we know about {s} and {o}.", "Next step: {s}.",
]  # fmt: skip


# ----------------------------------------------------------------------------- workload


def _fill(rng: random.Random, pattern: str) -> str:
    return pattern.format(
        s=rng.choice(SUBJECTS),
        v=rng.choice(VERBS),
        o=rng.choice(OBJECTS),
        n=rng.randint(100, 9999),
        m=rng.randint(1, 9),
    )


def sentence(rng: random.Random) -> str:
    text = _fill(rng, "{s} {v} {o}")
    if rng.random() < 0.5:
        text += " " + _fill(rng, rng.choice(TAILS))
    return text


def make_text(rng: random.Random, type_: str) -> str:
    """8-60 words: a prefix of the type, then sentences, cut at the drawn length."""
    target = rng.randint(8, 60)
    parts = [rng.choice(PREFIXES[type_])]
    words = len(parts[0].split())
    while words < target:
        s = sentence(rng) + "."
        parts.append(s)
        words += len(s.split())
    text = " ".join(" ".join(parts).split()[:target]).rstrip(".")
    return text + "."


def add_kwargs(rng: random.Random, durable: bool) -> dict[str, Any]:
    type_ = rng.choices(TYPE_NAMES, list(TYPE_WEIGHTS.values()))[0]
    kw: dict[str, Any] = {"type": type_, "content": make_text(rng, type_)}
    if rng.random() < 0.6:
        kw["tags"] = rng.sample(TAGS, rng.randint(1, 3))
    r = rng.random()
    if r < 0.20:
        kw["ttl_s"] = rng.randint(30, 120)
    elif r < 0.35:
        kw["ttl_s"] = rng.randint(600, 3600)
    if rng.random() < 0.2:
        kw["importance"] = round(rng.uniform(0.1, 1.0), 2)
    if rng.random() < 0.1:
        kw["source"] = rng.choice(["user", "tool:grep", "agent", "docs"])
    if rng.random() < 0.1:
        kw["metadata"] = {"ticket": rng.randint(100, 9999), "step": rng.randint(1, 40)}
    if durable and rng.random() < 0.5:
        # Its id is not known to the writer (JetStream acknowledges it, the event names it),
        # so it is never deleted by the workload: a short TTL keeps the live set bounded.
        kw["ttl_s"] = rng.randint(30, 120)
        kw["durable"] = True  # taken out again by Worker.add
    return kw


def search_kwargs(rng: random.Random) -> dict[str, Any]:
    kw: dict[str, Any] = {"limit": rng.choice([5, 10, 10, 20])}
    r = rng.random()
    if r < 0.15:
        kw["types"] = rng.sample(TYPE_NAMES, 2)
    elif r < 0.30:
        kw["tags"] = [rng.choice(TAGS)]
    m = rng.random()
    if m < 0.1:
        kw["mode"] = "vector"
    elif m < 0.2:
        kw["mode"] = "text"
    if rng.random() < 0.2:
        kw["scope"] = rng.choice(["workflow", "general"])
    return kw


class Pacer:
    """Spaces request starts over all agents `1/rate` apart (no catch-up bursts)."""

    def __init__(self, rate: float) -> None:
        self.gap = 1.0 / rate
        self.next = time.monotonic()

    async def wait(self) -> None:
        now = time.monotonic()
        slot = max(self.next, now)
        self.next = slot + self.gap
        if slot > now:
            await asyncio.sleep(slot - now)


class Bucket:
    """What one interval saw."""

    def __init__(self) -> None:
        self.lat: dict[str, array[float]] = {op: array("d") for op in OPS}
        self.errors: Counter[str] = Counter()
        self.errors_by_op: Counter[str] = Counter()

    def record(self, op: str, ms: float, err: str | None) -> None:
        self.lat[op].append(ms)
        if err is not None:
            self.errors[err] += 1
            self.errors_by_op[f"{op}:{err}"] += 1


class Stats:
    def __init__(self) -> None:
        self.current = Bucket()
        self.total = Bucket()

    def record(self, op: str, ms: float, err: str | None) -> None:
        self.current.record(op, ms, err)
        self.total.record(op, ms, err)

    def swap(self) -> Bucket:
        done, self.current = self.current, Bucket()
        return done


class Owned:
    """Ids an agent added and may delete, with their expected expiry (epoch s or None)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, float | None]] = []

    def prune(self, now: float) -> None:
        self.items = [(i, e) for i, e in self.items if e is None or e > now]

    def take(self, rng: random.Random, n: int, now: float) -> list[str]:
        out: list[str] = []
        while self.items and len(out) < n:
            k = rng.randrange(len(self.items))
            self.items[k], self.items[-1] = self.items[-1], self.items[k]
            mid, exp = self.items.pop()
            if exp is None or exp > now + 1.0:  # about to expire: let it
                out.append(mid)
        return out


class Agent:
    def __init__(self, i: int, bus: MemoryBus, workflow: str, cfg: Config) -> None:
        self.i = i
        self.bus = bus
        self.workflow = workflow
        self.cfg = cfg
        self.rng = random.Random(cfg.seed * 1000 + i)
        self.owned = Owned()
        self.session = 0
        self.turns = 0
        self.mem = self._handle()

    def _handle(self) -> AgentMemory:
        return self.bus.agent(
            workflow_id=self.workflow,
            agent_id=f"agent-{self.i}",
            session_id=f"soak-{self.i}-{self.session}",
        )

    async def add(self, durable: bool) -> None:
        kw = add_kwargs(self.rng, durable)
        if kw.pop("durable", False):  # in the stream once accepted; a handler applies it
            await self.mem.durable.add(**kw)
            return
        rep = await self.mem.add(**kw)
        if rep.duplicate_of is None:
            exp = rep.expires_at.timestamp() if rep.expires_at else None
            self.owned.items.append((rep.id, exp))

    async def step(self, op: str, over_cap: bool) -> str:
        """Run one operation; returns the one it ran (a delete with nothing to delete adds)."""
        rng = self.rng
        if op == "add":
            await self.add(self.cfg.durable)
        elif op == "search":
            query = _fill(rng, rng.choice(QUESTIONS))
            await self.mem.search(query, **search_kwargs(rng))
        elif op == "recall":
            if self.turns >= SESSION_TURNS:
                self.session, self.turns = self.session + 1, 0
                self.mem = self._handle()
            self.turns += 1
            await self.mem.recall(_fill(rng, rng.choice(TURNS)))
        elif op == "describe":
            await self.mem.describe()
        else:
            ids = self.owned.take(rng, 6 if over_cap else 1, time.time())
            if not ids:
                await self.add(self.cfg.durable)
                return "add"
            await self.mem.delete(ids)
        return op

    async def run(self, stats: Stats, stop: asyncio.Event, deadline: float) -> None:
        cfg, rng = self.cfg, self.rng
        while not stop.is_set() and time.monotonic() < deadline:
            if cfg.pacer is not None:
                await cfg.pacer.wait()
                if stop.is_set() or time.monotonic() >= deadline:
                    break
            op = rng.choices(OPS, OP_WEIGHTS)[0]
            if op == "recall" and not cfg.recall:
                op = "search"
            if op == "delete" and not self.owned.items:
                op = "add"
            err: str | None = None
            t0 = time.perf_counter()
            try:
                op = await self.step(op, cfg.tracked >= cfg.cap)
            except BusError as exc:
                err = exc.code
            except Exception as exc:
                err = type(exc).__name__
            stats.record(op, (time.perf_counter() - t0) * 1000.0, err)


class Config:
    def __init__(self, args: argparse.Namespace, durable: bool, recall: bool) -> None:
        self.seed: int = args.seed
        self.cap: int = args.cap
        self.durable = durable
        self.recall = recall
        self.pacer = Pacer(args.rate) if args.rate > 0 else None
        self.tracked = 0  # live adds of all agents, as they estimate it


# ----------------------------------------------------------------------------- figures


def lat_summary(values: Sequence[float]) -> dict[str, float | int]:
    s = sorted(values)
    return {
        "n": len(s),
        "p50": percentile(s, 50),
        "p99": percentile(s, 99),
        "max": s[-1] if s else math.nan,
    }


def _cpu_s(pid: int) -> float | None:
    try:
        return proc_cpu_ms(pid) / 1000
    except (OSError, ValueError):
        return None


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def rnd(v: float | None, nd: int = 2) -> float | None:
    return None if v is None or math.isnan(v) else round(v, nd)


async def live_count(bus: MemoryBus, workflows: list[str]) -> int | None:
    """Live memories in the namespace: the general ones plus each workflow's own."""
    try:
        general = await bus.agent().describe(scope="general")
        total = general.general_count
        for wf in workflows:
            total += (await bus.agent(workflow_id=wf).describe(scope="workflow")).workflow_count
        return total
    except Exception:
        return None


async def redis_info(client: aioredis.Redis) -> tuple[float | None, int | None]:
    try:
        mem = await client.info("memory")
        return mem["used_memory"] / 2**20, int(await client.dbsize())
    except Exception:
        return None, None


INDEX_FIELDS = (
    "num_docs",
    "max_doc_id",
    "num_terms",
    "num_records",
    "inverted_sz_mb",
    "vector_index_sz_mb",
    "offset_vectors_sz_mb",
    "doc_table_size_mb",
    "sortable_values_size_mb",
    "key_table_size_mb",
    "total_index_memory_sz_mb",
    "bytes_collected",
    "total_cycles",
)


def _as_text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _numbers(reply: Any, out: dict[str, float]) -> None:
    """The `INDEX_FIELDS` of an FT.INFO reply (a map, or a flat key/value list; gc_stats
    nested)."""
    if isinstance(reply, dict):
        items = list(reply.items())
    elif isinstance(reply, list):
        items = list(zip(reply[::2], reply[1::2], strict=False))
    else:
        return
    for key, value in items:
        name = _as_text(key)
        if name == "gc_stats":
            _numbers(value, out)
        elif name in INDEX_FIELDS:
            with contextlib.suppress(ValueError):
                out[name] = float(_as_text(value))


async def index_info(client: aioredis.Redis) -> dict[str, float] | None:
    """Size figures of the namespace's RediSearch index (to explain Redis growth)."""
    try:
        reply = await client.execute_command("FT.INFO", index_name(NS))
    except Exception:
        return None
    out: dict[str, float] = {}
    _numbers(reply, out)
    return out


def fmt(v: float | None, width: int, nd: int = 1) -> str:
    return f"{'-':>{width}}" if v is None or math.isnan(v) else f"{v:{width}.{nd}f}"


def header(n_handlers: int) -> str:
    hs = "".join(f" {'h' + str(i + 1) + ' MiB':>8}" for i in range(n_handlers))
    return (
        f"{'min':>5} {'ops':>7} {'ops/s':>7} {'err':>5} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'max ms':>8}{hs} {'redis MiB':>9} {'live':>6} {'tracked':>7}  errors"
    )


def row_line(row: dict[str, Any]) -> str:
    hs = "".join(f" {fmt(v, 8)}" for v in row["handler_rss_mib"])
    errs = ",".join(f"{k}:{v}" for k, v in sorted(row["errors"].items())) or "-"
    live = "-" if row["live"] is None else str(row["live"])
    return (
        f"{row['minute']:5.2f} {row['ops']:7d} {row['ops_s']:7.1f} {row['error_count']:5d} "
        f"{fmt(row['p50_ms'], 7, 2)} {fmt(row['p99_ms'], 7, 2)} {fmt(row['max_ms'], 8, 1)}"
        f"{hs} {fmt(row['redis_rss_mib'], 9)} {live:>6} {row['tracked']:7d}  {errs}"
    )


def verdict(name: str, xs: list[float], ys: list[float | None], unit: str, tol: float) -> str:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and not math.isnan(y)]
    if len(pts) < 3:
        return f"  {name}: too few points for a fit"
    px, py = [p[0] for p in pts], [p[1] for p in pts]
    s = slope(px, py)
    change = s * (px[-1] - px[0])
    word = "flat" if abs(change) <= tol else ("GROWING" if change > 0 else "falling")
    window = px[-1] - px[0]
    per_day = f", {s * 1440:+.0f} {unit}/day if it went on" if unit == "MiB" and window >= 5 else ""
    return (
        f"  {name}: {s:+.3f} {unit}/min ({change:+.2f} {unit} over the fitted "
        f"{window:.1f} min{per_day}; tolerance {tol:.2f}) -> {word}"
    )


def summary(rows: list[dict[str, Any]], stats: Stats, n_handlers: int, interrupted: bool) -> dict:
    total = stats.total
    n_ops = sum(len(v) for v in total.lat.values())
    n_err = sum(total.errors.values())
    minutes = rows[-1]["minute"] if rows else 0.0
    print(f"\n== summary{' (interrupted)' if interrupted else ''} ==")
    rate = n_ops / (minutes * 60) if minutes else 0.0
    print(f"duration {minutes:.2f} min, {n_ops:,} ops ({rate:.1f} ops/s), errors {n_err:,}", end="")
    print(f" = {100.0 * n_err / n_ops if n_ops else 0.0:.3f}%  {dict(total.errors) or ''}")
    by_op: dict[str, Any] = {}
    print(f"  {'op':<9} {'n':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>9}  errors")
    for op in OPS:
        s = lat_summary(total.lat[op])
        errs = {k.split(":", 1)[1]: v for k, v in total.errors_by_op.items() if k.startswith(op)}
        by_op[op] = {**{k: rnd(float(v), 3) for k, v in s.items()}, "errors": errs}
        print(
            f"  {op:<9} {s['n']:8d} {fmt(s['p50'], 8, 2)} {fmt(s['p99'], 8, 2)} "
            f"{fmt(s['max'], 9, 1)}  {errs or '-'}"
        )
    p99s = [r["p99_ms"] for r in rows]
    print(f"p99 per interval (ms): {p99s}")
    for op in OPS:
        print(f"  {op + ' p99':<12} {[r['by_op'][op]['p99'] for r in rows]}")
    print(f"ops/s per interval: {[r['ops_s'] for r in rows]}")
    print(f"live per interval: {[r['live'] for r in rows]}")
    rss: dict[str, Any] = {}
    series = {
        f"handler {i + 1}": [r["handler_rss_mib"][i] for r in rows] for i in range(n_handlers)
    }
    series["redis"] = [r["redis_rss_mib"] for r in rows]
    series["nats"] = [r["nats_rss_mib"] for r in rows]
    print("RSS MiB first / last / max:")
    for name, vals in series.items():
        got = [v for v in vals if v is not None]
        if got:
            rss[name] = {"first": got[0], "last": got[-1], "max": max(got)}
            print(f"  {name:<10} {got[0]:8.1f} / {got[-1]:8.1f} / {max(got):8.1f}")
    used = [r["redis_used_mib"] for r in rows]
    keys = [r["redis_keys"] for r in rows]
    print(f"redis used_memory MiB per interval: {used}")
    print(f"redis keys per interval: {keys}")
    first = next((r["index"] for r in rows if r.get("index")), None)
    last = next((r["index"] for r in reversed(rows) if r.get("index")), None)
    if first and last:
        pairs = [
            f"{k} {first[k]:g} -> {last[k]:g}" for k in INDEX_FIELDS if k in first and k in last
        ]
        print(f"index (FT.INFO, first -> last row): {', '.join(pairs)}")
    # The fit leaves out the first quarter of the run (start-up, filling up to the cap).
    fit = [r for r in rows if r["minute"] > minutes / 4]
    xs = [r["minute"] for r in fit]
    print(f"flatness (least-squares fit over the last 3/4 of the run: {len(fit)} intervals):")
    lines = []
    for name, vals in series.items():
        vals_fit = vals[len(rows) - len(fit) :]
        got = [v for v in vals_fit if v is not None]
        tol = max(4.0, 0.03 * sum(got) / len(got)) if got else 0.0
        lines.append(verdict(f"{name} RSS", xs, vals_fit, "MiB", tol))
    p99_fit = [r["p99_ms"] for r in fit]
    good = sorted(v for v in p99_fit if v is not None)
    lines.append(
        verdict("p99", xs, p99_fit, "ms", max(1.0, 0.25 * percentile(good, 50)) if good else 0)
    )
    ops_fit = [r["ops_s"] for r in fit]
    lines.append(
        verdict("ops/s", xs, ops_fit, "ops/s", 0.1 * (sum(ops_fit) / len(fit)) if fit else 0)
    )
    for line in lines:
        print(line)
    return {
        "kind": "summary",
        "interrupted": interrupted,
        "minutes": round(minutes, 3),
        "ops": n_ops,
        "errors": n_err,
        "error_rate": n_err / n_ops if n_ops else 0.0,
        "errors_by_code": dict(total.errors),
        "by_op": by_op,
        "p99_per_interval_ms": p99s,
        "rss_mib": rss,
        "flatness": [line.strip() for line in lines],
    }


# ----------------------------------------------------------------------------- run


class Sampler:
    """Reads each interval's figures: latencies, errors, process RSS and CPU, live count."""

    def __init__(self, stack: EmbeddedStack, handlers: list[subprocess.Popen[bytes]]) -> None:
        self.stack = stack
        self.handlers = handlers
        self.cpu = {p.pid: _cpu_s(p.pid) for p in self._procs()}
        self.cpu[os.getpid()] = _cpu_s(os.getpid())

    def _procs(self) -> list[subprocess.Popen[bytes]]:
        return [*self.handlers, *self.stack.servers.values()]

    def cpu_pct(self, pid: int, dt: float) -> float | None:
        now, before = _cpu_s(pid), self.cpu.get(pid)
        self.cpu[pid] = now
        return None if now is None or before is None else 100.0 * (now - before) / dt

    async def row(
        self, k: int, elapsed: float, dt: float, bucket: Bucket, agents: list[Agent], **extra: Any
    ) -> dict[str, Any]:
        every = sorted(v for lat in bucket.lat.values() for v in lat)
        n = len(every)
        handler_rss = [proc_rss_mib(p.pid) if p.poll() is None else None for p in self.handlers]
        redis = self.stack.servers.get("redis")
        nats = self.stack.servers.get("nats")
        return {
            "kind": "interval",
            "interval": k,
            "elapsed_s": round(elapsed, 2),
            "minute": round(elapsed / 60.0, 3),
            "ops": n,
            "ops_s": round(n / dt, 1) if dt > 0 else 0.0,
            "error_count": sum(bucket.errors.values()),
            "errors": dict(bucket.errors),
            "errors_by_op": dict(bucket.errors_by_op),
            "p50_ms": rnd(percentile(every, 50), 3),
            "p99_ms": rnd(percentile(every, 99), 3),
            "max_ms": rnd(every[-1] if every else math.nan, 3),
            "by_op": {
                op: {k2: rnd(float(v), 3) for k2, v in lat_summary(bucket.lat[op]).items()}
                for op in OPS
            },
            "handler_rss_mib": [rnd(v) for v in handler_rss],
            "handler_exit": [p.poll() for p in self.handlers],
            "handler_cpu_pct": [rnd(self.cpu_pct(p.pid, dt), 1) for p in self.handlers],
            "redis_rss_mib": rnd(proc_rss_mib(redis.pid)) if redis else None,
            "redis_cpu_pct": rnd(self.cpu_pct(redis.pid, dt), 1) if redis else None,
            "nats_rss_mib": rnd(proc_rss_mib(nats.pid)) if nats else None,
            "nats_cpu_pct": rnd(self.cpu_pct(nats.pid, dt), 1) if nats else None,
            "client_cpu_pct": rnd(self.cpu_pct(os.getpid(), dt), 1),
            "client_rss_mib": rnd(proc_rss_mib(os.getpid())),
            "tracked": sum(len(a.owned.items) for a in agents),
            **extra,
        }


def nats_callbacks(stop: asyncio.Event) -> dict[str, Any]:
    """nats-py's callbacks, quiet once the soak stops (else it prints each reconnect try)."""
    seen: Counter[str] = Counter()

    async def error_cb(exc: Exception) -> None:
        name = type(exc).__name__
        seen[name] += 1
        if not stop.is_set() and seen[name] <= 3:
            print(f"nats client error: {name}: {exc}", flush=True)

    async def disconnected_cb() -> None:
        if not stop.is_set():
            print("nats client: disconnected", flush=True)

    async def reconnected_cb() -> None:
        print("nats client: reconnected", flush=True)

    return {
        "error_cb": error_cb,
        "disconnected_cb": disconnected_cb,
        "reconnected_cb": reconnected_cb,
    }


async def preload(agents: list[Agent], n: int) -> None:
    """`n` adds (no short TTLs) before the clock starts, spread over the agents."""
    t0 = time.perf_counter()
    left = n
    while left > 0:
        batch = agents[: min(left, len(agents))]
        await asyncio.gather(*(a.add(False) for a in batch), return_exceptions=True)
        left -= len(batch)
    print(f"preload: {n} adds in {time.perf_counter() - t0:.1f} s")


async def soak(
    args: argparse.Namespace,
    stack: EmbeddedStack,
    handlers: list[subprocess.Popen[bytes]],
    bus: MemoryBus,
    client: aioredis.Redis,
    cfg: Config,
    stop: asyncio.Event,
    out: Any,
) -> tuple[list[dict[str, Any]], Stats]:
    workflows = [f"wf-{w}" for w in range(args.workflows)]
    agents = [Agent(i, bus, workflows[i % len(workflows)], cfg) for i in range(args.concurrency)]
    if args.preload:
        await preload(agents, args.preload)
    stats = Stats()
    duration = args.minutes * 60.0
    sampler = Sampler(stack, handlers)
    t0 = time.monotonic()
    deadline = t0 + duration

    async def track() -> None:
        while True:
            now = time.time()
            for a in agents:
                a.owned.prune(now)
            cfg.tracked = sum(len(a.owned.items) for a in agents)
            await asyncio.sleep(PRUNE_EVERY_S)

    tracker = asyncio.create_task(track())
    tasks = [asyncio.create_task(a.run(stats, stop, deadline)) for a in agents]
    rows: list[dict[str, Any]] = []
    n_intervals = max(1, math.ceil(duration / args.interval))
    prev = t0
    print(header(len(handlers)))
    try:
        for k in range(1, n_intervals + 1):
            target = t0 + min(k * args.interval, duration)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, target - time.monotonic()))
            interrupted = stop.is_set()
            last = k == n_intervals or interrupted
            if last:
                stop.set()
                if interrupted:  # requests in flight are not counted: the servers may be gone
                    for t in tasks:
                        t.cancel()
                # Else each agent finishes the request in flight.
                await asyncio.gather(*tasks, return_exceptions=True)
            now = time.monotonic()
            bucket = stats.swap()
            redis_used, redis_keys = await redis_info(client)
            index = await index_info(client)
            nats = stack.servers.get("nats")
            live = None
            if nats is not None and nats.poll() is None:
                with contextlib.suppress(TimeoutError):
                    live = await asyncio.wait_for(live_count(bus, workflows), 2 * args.timeout)
            row = await sampler.row(
                k,
                now - t0,
                now - prev,
                bucket,
                agents,
                live=live,
                redis_used_mib=rnd(redis_used),
                redis_keys=redis_keys,
                index=index,
            )
            prev = now
            rows.append(row)
            print(row_line(row), flush=True)
            out.write(json.dumps(row) + "\n")
            out.flush()
            if last:
                break
    finally:
        stop.set()
        tracker.cancel()
        for t in tasks:
            t.cancel()
        await asyncio.gather(tracker, *tasks, return_exceptions=True)
    return rows, stats


async def amain(args: argparse.Namespace) -> int:
    durable_ok = hasattr(AgentMemory, "durable")
    recall_ok = hasattr(AgentMemory, "recall")
    durable = bool(args.durable and durable_ok)
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rate = f"{args.rate:g} ops/s" if args.rate > 0 else "unthrottled"
    print(
        f"machine: {cpus} usable cores, {platform.machine()}, {platform.system()} "
        f"{platform.release()}; python {platform.python_version()}"
    )
    print(
        f"soak: {args.minutes:g} min, interval {args.interval:g} s, {args.handlers} handler(s), "
        f"embedder {args.embedder}, {args.concurrency} agents in {args.workflows} workflows, "
        f"{rate}, cap {args.cap}, timeout {args.timeout:g} s, seed {args.seed}, "
        f"persist {'off' if args.no_persist else 'on (AOF)'}"
    )
    print(f"mix: {dict(zip(OPS, OP_WEIGHTS, strict=True))}; recall {'on' if recall_ok else 'n/a'}")
    if args.durable and not durable_ok:
        print("--durable: not available (AgentMemory has no `durable`); adds are not durable")
    elif durable:
        # A durable add's memory id is known only from its event, which the agents do not
        # follow: they never delete those memories.
        print("--durable: half the adds go through mem.durable (never deleted: live grows)")
    if extra_env:
        print(f"handler env: {extra_env}")

    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    stack = EmbeddedStack.temporary()
    stack.persist = not args.no_persist
    if args.logs:
        stack.log_dir = Path(args.logs)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    interrupted = False

    def on_signal(signum: int) -> None:
        nonlocal interrupted
        interrupted = True
        print(f"\n{signal.Signals(signum).name}: stopping (again to abort)", flush=True)
        stop.set()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(s)

    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, on_signal, s)
    cfg = Config(args, durable, recall_ok)
    try:
        stack.start_servers()
        env = {"MEMBUS_EMBEDDER": args.embedder, **extra_env}
        procs = stack.start_handlers(args.handlers, env=env)
        await wait_for_handlers(stack.nats_url, args.handlers, procs)
        pids: dict[str, Any] = {"handlers": [p.pid for p in procs]}
        pids |= {name: p.pid for name, p in stack.servers.items()}
        print(f"stack up: {stack.nats_url}, {stack.redis_url}, pids {pids}; rows -> {out_path}\n")
        bus = await MemoryBus.connect(
            stack.nats_url, namespace=NS, timeout=args.timeout, **nats_callbacks(stop)
        )
        client = aioredis.Redis.from_url(stack.redis_url)
        with out_path.open("w") as out:  # noqa: ASYNC230 - a few short lines per interval
            config = {
                "kind": "config",
                "started": datetime.now(UTC).isoformat(),
                **{k: v for k, v in vars(args).items()},
                "durable_available": durable_ok,
                "recall_available": recall_ok,
                "mix": dict(zip(OPS, OP_WEIGHTS, strict=True)),
                "cores": cpus,
                "pids": pids,
            }
            out.write(json.dumps(config) + "\n")
            try:
                rows, stats = await soak(args, stack, procs, bus, client, cfg, stop, out)
                # What Redis holds at the end, by key family: what grew, if anything did.
                print("\nRedis keys at the end, by family (keys, MiB):")
                for family, count, mib in await keyspace(client):
                    print(f"  {family:<12} {count:>9,}  {mib:8.2f}")
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(bus.close(), 5.0)
                await client.aclose()
            result = summary(rows, stats, len(procs), interrupted)
            out.write(json.dumps(result) + "\n")
        print(f"\nrows: {out_path}")
        return 130 if interrupted else 0
    finally:
        stack.stop()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="memory-bus soak bench (see the module docstring)")
    p.add_argument("--minutes", type=float, default=20.0, help="duration (default 20)")
    p.add_argument("--interval", type=float, default=60.0, help="s per row (default 60)")
    p.add_argument("--handlers", type=int, default=2, help="handler processes (default 2)")
    p.add_argument("--embedder", choices=["hash", "minilm"], default="hash")
    p.add_argument("--concurrency", type=int, default=8, help="agents (default 8)")
    p.add_argument("--workflows", type=int, default=3, help="agents spread over (default 3)")
    p.add_argument(
        "--rate",
        type=lambda v: 0.0 if v in ("unthrottled", "none", "0") else float(v),
        default=0.0,
        help="total ops/s over all agents, or 'unthrottled' (default)",
    )
    p.add_argument("--cap", type=int, default=5000, help="live memories kept about (5000)")
    p.add_argument("--preload", type=int, default=0, help="adds before the clock starts (0)")
    p.add_argument("--durable", action="store_true", help="half the adds durable, if the SDK can")
    p.add_argument("--timeout", type=float, default=5.0, help="request timeout s (default 5)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=".membus/soak.jsonl", help="JSON lines of the rows")
    p.add_argument("--logs", default=None, help="keep server and handler logs in this dir")
    p.add_argument("--no-persist", action="store_true", help="Redis without AOF/RDB")
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="extra handler env"
    )
    args = p.parse_args()
    if args.interval <= 0 or args.minutes <= 0 or args.concurrency < 1 or args.handlers < 1:
        p.error("--minutes, --interval, --concurrency and --handlers must be positive")
    if any("=" not in kv for kv in args.env):
        p.error("--env takes KEY=VALUE")
    return args


if __name__ == "__main__":
    try:
        raise SystemExit(asyncio.run(amain(parse_args())))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
