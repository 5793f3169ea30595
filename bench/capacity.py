"""Capacity model: CPU milliseconds per operation by process, and the throughput they predict.

Scaling cannot be shown on a 2-core machine by starting more handlers, so it is modelled. For
a phase of `ops` operations, `CpuMeter` reads utime+stime of each process from /proc before
and after (all threads; clock ticks -> ms): the handlers, Redis (valkey-server; its main
thread also on its own, as that is the part that cannot scale), nats-server and this process
(the client: in production the agents, on other machines). Dividing by `ops` gives CPU ms/op
per role, and with H handlers on separate cores:

    X(H) = min(H * 1000 / handler_ms,     handlers scale out
               1000 / redis_main_ms,      Redis runs commands on one thread
               nats_cores * 1000 / nats_ms)   nats-server is multi-threaded (assumed cores)

On this box everything shares its cores, so it is also bound by total CPU per operation:
X_box = cores * 1000 / total_ms (all processes, the client too), and the prediction for the
box is min(X(H), X_box). `busy` is the share of the box's CPU the measured processes used.

Run as a driver, it starts the embedded stack with `--handlers` H, loads `--memories` corpus
memories (bench/corpus.py) through the bus, then for search and for add: a short sequential
calibration (one request at a time; its CPU ms/op give the prediction) and a closed-loop run
(`--concurrency` requests in flight for `--seconds`), and prints predicted vs measured ops/s
and the model's table for H = 1..16. Run from the project root:

    .venv/bin/python bench/capacity.py [--memories 10000] [--handlers 1] [--embedder hash]
        [--concurrency 64] [--seconds 10] [--mode hybrid] [--nats-cores 4] [--seed 7]

bench/bench_bus.py imports the /proc reading and the table printing from here.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio as aioredis
from corpus import Agents, load, make_corpus, make_queries, summarize
from measure import (
    CLK_TCK,
    CommandStats,
    box_cpu_ms,
    command_stats,
    percentile,
    proc_cpu_ms,
    usable_cores,
)

from bus import MemoryBus
from bus.errors import BusError
from deploy.embedded import EmbeddedStack, wait_for_handlers

ROLES = ("handlers", "redis", "nats", "client")
H_VALUES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Probe:
    label: str  # handler-1, redis, redis_main, nats, client
    role: str | None  # None: a part of another probe (Redis's main thread), not added to totals
    pid: int
    tid: int | None = None


@dataclass(frozen=True)
class Snapshot:
    at: float  # perf_counter seconds
    ms: dict[str, float]
    box: tuple[float, float]  # box_cpu_ms()


@dataclass(frozen=True)
class CpuCost:
    """CPU used by each process during a phase of `ops` operations."""

    ops: int
    wall_s: float
    ms: dict[str, float]  # by probe label
    roles: dict[str, str | None]  # label -> role
    box_busy_ms: float  # the whole machine's busy CPU (every process, ours and others')
    steal_ms: float  # CPU the hypervisor gave to other guests

    def role_ms(self, role: str) -> float:
        return sum(v for k, v in self.ms.items() if self.roles[k] == role)

    def per_op(self, role: str) -> float:
        """CPU ms per operation of a role, or of one probe label (e.g. redis_main)."""
        total = self.ms.get(role, 0.0) if role not in ROLES else self.role_ms(role)
        return total / max(1, self.ops)

    @property
    def total_per_op(self) -> float:
        return sum(self.per_op(r) for r in ROLES)

    @property
    def ours_ms(self) -> float:
        return sum(self.role_ms(r) for r in ROLES)

    def _share(self, ms: float, cores: int) -> float:
        return ms / max(1e-9, self.wall_s * 1000.0 * cores)

    def busy(self, cores: int) -> float:
        """Share of the box's CPU (all cores over the wall time) these processes used."""
        return self._share(self.ours_ms, cores)

    def others(self, cores: int) -> float:
        """Share used by everything else on the machine, plus steal: not ours to use."""
        return self._share(max(0.0, self.box_busy_ms - self.ours_ms) + self.steal_ms, cores)


class CpuMeter:
    """Snapshots of the stack's processes' CPU time (see the module docstring)."""

    def __init__(self, stack: EmbeddedStack) -> None:
        probes = [
            Probe(f"handler-{i + 1}", "handlers", p.pid) for i, p in enumerate(stack.handlers)
        ]
        if "redis" in stack.servers:
            pid = stack.servers["redis"].pid
            probes += [Probe("redis", "redis", pid), Probe("redis_main", None, pid, pid)]
        if "nats" in stack.servers:
            probes.append(Probe("nats", "nats", stack.servers["nats"].pid))
        probes.append(Probe("client", "client", os.getpid()))
        self.probes = probes

    def snapshot(self) -> Snapshot:
        ms: dict[str, float] = {}
        for p in self.probes:
            try:
                ms[p.label] = proc_cpu_ms(p.pid, p.tid)
            except (FileNotFoundError, ProcessLookupError):
                ms[p.label] = float("nan")  # the process ended: its row shows nan, not 0
        return Snapshot(time.perf_counter(), ms, box_cpu_ms())

    def since(self, before: Snapshot, ops: int) -> CpuCost:
        after = self.snapshot()
        return CpuCost(
            ops=ops,
            wall_s=after.at - before.at,
            ms={k: after.ms[k] - before.ms[k] for k in after.ms},
            roles={p.label: p.role for p in self.probes},
            box_busy_ms=after.box[0] - before.box[0],
            steal_ms=after.box[1] - before.box[1],
        )


COST_HEADER = (
    f"{'phase':<30} {'ops':>6} {'wall s':>7} {'handlers':>9} {'redis':>7} {'(main)':>7} "
    f"{'nats':>7} {'client':>7} {'total':>7} {'busy':>5} {'other':>5}"
)


def cost_row(name: str, cost: CpuCost, cores: int) -> str:
    """One line of CPU ms/op by role (see COST_HEADER)."""
    return (
        f"{name:<30} {cost.ops:>6} {cost.wall_s:>7.2f} {cost.per_op('handlers'):>9.3f} "
        f"{cost.per_op('redis'):>7.3f} {cost.per_op('redis_main'):>7.3f} "
        f"{cost.per_op('nats'):>7.3f} {cost.per_op('client'):>7.3f} "
        f"{cost.total_per_op:>7.3f} {cost.busy(cores):>5.0%} {cost.others(cores):>5.0%}"
    )


def print_costs(rows: Sequence[tuple[str, CpuCost]], cores: int) -> None:
    print("\nCPU ms per operation by process (utime+stime from /proc over the timed phase;")
    print(f"(main) = Redis's main thread; busy = CPU used / ({cores} cores x wall time); other =")
    print("the same share used by other processes on the machine plus hypervisor steal).")
    print("Clock ticks are 1000/CLK_TCK = %.0f ms: small phases are coarse.\n" % (1000 / CLK_TCK))
    print(COST_HEADER)
    for name, cost in rows:
        print(cost_row(name, cost, cores))


@dataclass(frozen=True)
class Capacity:
    h: int
    handlers: float  # ops/s the H handlers could do
    redis: float  # ops/s Redis's main thread could do
    nats: float  # ops/s nats-server could do on nats_cores
    ops: float
    limiter: str


def _cap(ms_per_op: float, cores: float) -> float:
    return cores * 1000.0 / ms_per_op if ms_per_op > 0 else float("inf")


def model(cost: CpuCost, h: int, nats_cores: float) -> Capacity:
    """Ops/s with `h` handlers each on a core of its own, Redis and NATS on theirs, and the
    clients elsewhere. Redis's bound uses its main thread only: other threads run beside it."""
    bounds = {
        "handlers": _cap(cost.per_op("handlers"), h),
        "redis": _cap(cost.per_op("redis_main"), 1),
        "nats": _cap(cost.per_op("nats"), nats_cores),
    }
    limiter = min(bounds, key=bounds.__getitem__)
    return Capacity(
        h, bounds["handlers"], bounds["redis"], bounds["nats"], bounds[limiter], limiter
    )


def box_bound(cost: CpuCost, cores: float) -> float:
    """Ops/s when every process shares `cores` and they are kept fully busy."""
    return _cap(cost.total_per_op, cores)


def box_left(cost: CpuCost, cores: int) -> float:
    """Ops/s on the cores other jobs (and steal) left free during the phase."""
    return box_bound(cost, cores * max(0.0, 1.0 - cost.others(cores)))


def redis_saturation(cost: CpuCost) -> float:
    """The number of handlers at which they could send as much as Redis's main thread does."""
    main = cost.per_op("redis_main")
    return cost.per_op("handlers") / main if main > 0 else float("inf")


def print_model(name: str, cost: CpuCost, nats_cores: float, hs: Sequence[int] = H_VALUES) -> None:
    print(
        f"\n{name}: model from {cost.ops} ops, CPU ms/op handler {cost.per_op('handlers'):.3f},"
        f" redis main {cost.per_op('redis_main'):.3f} (all threads {cost.per_op('redis'):.3f}),"
        f" nats {cost.per_op('nats'):.3f} (on {nats_cores:g} cores), client"
        f" {cost.per_op('client'):.3f}"
    )
    print(f"  {'H':>3} {'handlers':>10} {'redis':>10} {'nats':>10} {'predicted':>10}  limit")
    for h in hs:
        c = model(cost, h, nats_cores)
        print(
            f"  {h:>3} {c.handlers:>10,.0f} {c.redis:>10,.0f} {c.nats:>10,.0f} {c.ops:>10,.0f}"
            f"  {c.limiter}"
        )
    print(f"  Redis's main thread saturates at H = {redis_saturation(cost):.1f} handlers")


def command_delta(
    before: CommandStats, after: CommandStats, ops: int
) -> list[tuple[str, float, float]]:
    """(command, calls per op, ms per op) over the phase, most time first."""
    out = []
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if calls > c0:
            out.append((name, (calls - c0) / max(1, ops), (usec - u0) / 1000.0 / max(1, ops)))
    return sorted(out, key=lambda r: -r[2])


@dataclass
class LoopResult:
    ops: int
    errors: Counter[str]
    latencies: list[float]  # ms, of the operations completed in the measured window
    cost: CpuCost
    commands: list[tuple[str, float, float]]  # Redis commands per op (command_delta)

    @property
    def rate(self) -> float:
        return self.ops / self.cost.wall_s if self.cost.wall_s > 0 else 0.0


async def closed_loop(
    call: Callable[[int], Awaitable[Any]],
    meter: CpuMeter,
    concurrency: int,
    seconds: float,
    redis_client: aioredis.Redis,
    warmup: float = 1.0,
) -> LoopResult:
    """`concurrency` workers, each sending its next request as soon as the last is answered;
    operations completed (and CPU used) between the two snapshots count."""
    counter = itertools.count()
    stop = False
    window = False
    done = 0
    errors: Counter[str] = Counter()
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal done
        while not stop:
            i = next(counter)
            t0 = time.perf_counter()
            try:
                await call(i)
            except BusError as exc:  # typed errors, e.g. `unavailable` when shedding
                if window:
                    errors[type(exc).__name__] += 1
                continue
            if window:
                done += 1
                latencies.append((time.perf_counter() - t0) * 1000.0)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.sleep(warmup)  # reach steady state: queues filled, caches warm
        stats0 = await command_stats(redis_client)
        before, start = meter.snapshot(), done
        window = True
        await asyncio.sleep(seconds)
        window = False
        cost = meter.since(before, done - start)
        commands = command_delta(stats0, await command_stats(redis_client), cost.ops)
    finally:
        stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
    return LoopResult(cost.ops, errors, latencies, cost, commands)


async def sequential(
    call: Callable[[int], Awaitable[Any]], meter: CpuMeter, n: int, seconds: float
) -> CpuCost:
    """One request at a time, `n` of them or for `seconds`, whichever ends first."""
    before = meter.snapshot()
    deadline = time.perf_counter() + seconds
    done = 0
    while done < n and time.perf_counter() < deadline:
        await call(done)
        done += 1
    return meter.since(before, done)


async def run(args: argparse.Namespace) -> None:
    cores = usable_cores()
    print(
        f"machine: {cores} usable cores, {platform.machine()}, python {platform.python_version()}"
    )
    print(
        f"handlers {args.handlers}, embedder {args.embedder}, memories {args.memories},"
        f" concurrency {args.concurrency}, {args.seconds:g} s per op, search mode {args.mode},"
        f" nats assumed on {args.nats_cores:g} cores, seed {args.seed}"
    )
    t0 = time.perf_counter()
    corpus = make_corpus(args.memories + args.add_pool, args.seed)
    memories, pool = corpus[: args.memories], corpus[args.memories :]
    queries = make_queries(args.query_pool, args.seed, memories)
    print(f"corpus generated in {time.perf_counter() - t0:.1f} s")
    print(summarize(memories, queries))

    stack = EmbeddedStack.temporary()
    try:
        stack.start_servers()
        env = {"MEMBUS_EMBEDDER": args.embedder}
        procs = stack.start_handlers(args.handlers, env=env)
        await wait_for_handlers(stack.nats_url, args.handlers, procs, timeout=180)
        meter = CpuMeter(stack)
        bus = await MemoryBus.connect(stack.nats_url, namespace="capacity", timeout=60.0)
        agents = Agents(bus)
        redis_client = aioredis.Redis.from_url(stack.redis_url)
        try:
            before = meter.snapshot()
            await load(agents, memories, args.batch)
            ingest = meter.since(before, len(memories))
            print(
                f"\ningest: {len(memories)} memories in {ingest.wall_s:.1f} s,"
                f" {len(memories) / ingest.wall_s:,.0f}/s (batches of {args.batch} concurrent adds)"
            )
            adds = itertools.count()  # one pointer over the add pool: no memory added twice
            wrapped = False

            async def add(_: int) -> Any:
                nonlocal wrapped
                i = next(adds)
                wrapped = wrapped or i >= len(pool)
                return await agents.add(pool[i % len(pool)])

            async def search(i: int) -> Any:
                return await agents.search(queries[i % len(queries)], limit=10, mode=args.mode)

            results: list[tuple[str, CpuCost, LoopResult]] = []
            rows: list[tuple[str, CpuCost]] = [("ingest (bulk load)", ingest)]
            for name, call in (("search", search), ("add", add)):
                calib = await sequential(call, meter, args.calibrate, seconds=10.0)
                loop = await closed_loop(call, meter, args.concurrency, args.seconds, redis_client)
                results.append((name, calib, loop))
                rows += [(f"{name} sequential", calib), (f"{name} closed loop", loop.cost)]
            if wrapped:
                print(f"note: the add pool ({len(pool)}) ran out: later adds were duplicates")
        finally:
            await bus.close()
            await redis_client.aclose()
    finally:
        stack.stop()

    print_costs(rows, cores)
    for name, _, loop in results:
        print_model(f"{name} (closed-loop costs)", loop.cost, args.nats_cores)
        # commandstats' usec is wall time in each command (a descheduled Redis inflates it on
        # a busy box), so print each command's share of it, and calls per operation.
        total = sum(ms for *_, ms in loop.commands) or 1.0
        print(
            "  Redis commands per op (INFO commandstats; calls/op, share of command time): "
            + ", ".join(f"{c} {n:.2f} {ms / total:.0%}" for c, n, ms in loop.commands[:6])
        )
    h = args.handlers
    print(f"\npredicted vs measured at H = {h} on this {cores}-core box (ops/s)")
    print(
        f"{'op':<7} {'cost from':<12} {'X(H)':>7} {'box':>7} {'pred':>7} {'left':>7}"
        f" {'pred@left':>9} {'measured':>9} {'m/pred':>6} {'m/p@left':>8} {'busy':>5}"
        f" {'other':>5}  p50/p99 ms, errors"
    )
    for name, calib, loop in results:
        # The cores the run could have had: what other jobs and steal left during the loop.
        free = cores * max(0.0, 1.0 - loop.cost.others(cores))
        for source, cost in (("sequential", calib), ("closed loop", loop.cost)):
            x = model(cost, h, args.nats_cores).ops
            box, left = box_bound(cost, cores), box_bound(cost, free)
            pred, pred_left = min(x, box), min(x, left)
            lat = f"{percentile(loop.latencies, 50):.1f}/{percentile(loop.latencies, 99):.1f}"
            errs = ", ".join(f"{k} {v}" for k, v in loop.errors.items()) or "none"
            print(
                f"{name:<7} {source:<12} {x:>7,.0f} {box:>7,.0f} {pred:>7,.0f} {left:>7,.0f}"
                f" {pred_left:>9,.0f} {loop.rate:>9,.0f} {loop.rate / pred:>6.2f}"
                f" {loop.rate / pred_left:>8.2f} {loop.cost.busy(cores):>5.0%}"
                f" {loop.cost.others(cores):>5.0%}  {lat}, {errs}"
            )
    print(
        "\nX(H): the model with H handlers on cores of their own; box: all processes sharing the"
        f"\n{cores} cores, idle otherwise (cores x 1000 / total CPU ms/op); pred = min(X(H), box);"
        "\nleft / pred@left: the same on the CPU other jobs and steal left free during the run."
        "\n'sequential': CPU ms/op measured one request at a time (an independent prediction);"
        "\n'closed loop': the run's own CPU ms/op, so m/p@left near 1 means the box was full."
    )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="memory-bus capacity model (see the docstring)")
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument("--handlers", type=int, default=1)
    p.add_argument("--embedder", choices=("hash", "minilm"), default="hash")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    p.add_argument("--seconds", type=float, default=10.0, help="measured window per op")
    p.add_argument("--calibrate", type=int, default=500, help="sequential ops (max 10 s)")
    p.add_argument("--mode", choices=("hybrid", "vector", "text"), default="hybrid")
    p.add_argument("--nats-cores", type=float, default=4.0, help="cores assumed for NATS")
    p.add_argument("--add-pool", type=int, default=30_000, help="fresh memories for add")
    p.add_argument("--query-pool", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(run(parse_args()))
