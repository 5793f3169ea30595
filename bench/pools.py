"""Bench: many small namespaces through the real handler code (pools). Prints figures; not a test.

Starts a Redis Stack server as the project does (deploy/embedded.py), builds a handler's
operations in-process (`make_deps`, hash embedder, like `bench/namespaces.py` without the
bus), and measures:

- `--namespaces` namespaces of `--per` memories each (`operations.add`, the way a request
  is served): Redis `used_memory` per namespace, each namespace's first add and its later
  ones;
- vector, text and hybrid search in one small namespace, with all of them loaded;
- one namespace grown to `--big` memories: the add that promotes it past `--pool-max`,
  how long the promotion takes, and search latency before (pooled) and after (own index);
- with `--pool-max 0`, the same with every namespace on an index of its own (the old way).

    .venv/bin/python bench/pools.py [--namespaces 10000] [--per 5] [--big 3000]
    .venv/bin/python bench/pools.py --namespaces 2000 --pool-max 0
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable

import redis

from contracts import AddRequest, SearchRequest
from deploy.embedded import EmbeddedStack, free_port
from handlers import ops as operations
from handlers.embed import HashEmbedder
from handlers.ops.deps import Deps
from handlers.service import make_deps, redis_client
from handlers.settings import Settings
from handlers.store.placement import tier_key

WORDS = [
    "deploy",
    "review",
    "budget",
    "schedule",
    "customer",
    "latency",
    "cache",
    "index",
    "release",
    "design",
    "meeting",
    "invoice",
    "backlog",
    "migration",
    "outage",
    "rollout",
    "pricing",
    "contract",
    "onboarding",
    "support",
    "ticket",
]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))


def _ms(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"p50 {statistics.median(values):6.2f}  p99 {p99:6.2f} ms"


async def _timed(run: Callable[[], Awaitable[object]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await run()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def _searches(deps: Deps, ns: str, rng: random.Random, label: str) -> None:
    for mode in ("vector", "text", "hybrid"):

        async def one(mode: str = mode) -> object:
            query = " ".join(rng.sample(WORDS, 4))
            return await operations.search(ns, SearchRequest(query=query, mode=mode), deps)

        await _timed(one, 20)
        print(f"  {label:34s} {mode:6s} search {_ms(await _timed(one, 200))}", flush=True)


async def run(args: argparse.Namespace, redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, embedder="hash", pool_max=args.pool_max)
    client = redis_client(redis_url)
    deps = make_deps(settings, client, HashEmbedder(), _no_publish, 1 << 20)
    sync = redis.Redis.from_url(redis_url)
    rng = random.Random(7)

    async def add(ns: str) -> None:
        await operations.add(ns, AddRequest(type="knowledge", content=_text(rng)), deps)

    # Warm-up: the pool index (or nothing) exists before the measured namespaces.
    await add("warmup")
    base = sync.info("memory")["used_memory"]
    first: list[float] = []
    later: list[float] = []
    t_start = time.perf_counter()
    for i in range(args.namespaces):
        ns = f"n{i:05d}"
        t0 = time.perf_counter()
        await add(ns)
        first.append((time.perf_counter() - t0) * 1000)
        for _ in range(args.per - 1):
            t0 = time.perf_counter()
            await add(ns)
            later.append((time.perf_counter() - t0) * 1000)
        if (i + 1) % 1000 == 0:
            used = sync.info("memory")["used_memory"] - base
            print(
                f"  {i + 1:6d} namespaces: {used / (i + 1) / 1024:6.1f} KB each, "
                f"first add {_ms(first[-1000:])} ({time.perf_counter() - t_start:.0f} s)",
                flush=True,
            )
    await deps.store.settle()
    used = sync.info("memory")["used_memory"] - base
    mode = f"pool_max {args.pool_max}" if args.pool_max else "own index each (pool_max 0)"
    print(f"{args.namespaces} namespaces x {args.per} memories, {mode}:")
    print(f"  used_memory +{used / 2**20:.0f} MB ({used / args.namespaces / 1024:.1f} KB each)")
    print(f"  first add {_ms(first)}")
    if later:
        ratio = statistics.median(first) / statistics.median(later)
        print(f"  later adds {_ms(later)}; first / later add, p50: {ratio:.2f}x")
    await _searches(deps, f"n{args.namespaces // 2:05d}", rng, "small namespace, all loaded")

    if args.big:
        big, pooled = "bigone", min(max(args.pool_max - 1, 0), args.big)
        for _ in range(pooled):
            await add(big)
        if pooled:
            await _searches(deps, big, rng, f"{pooled} memories, pooled")
        t0 = time.perf_counter()
        for _ in range(args.big - pooled):
            await add(big)
        await deps.store.settle()
        tier = sync.get(tier_key(big))
        print(
            f"  grew to {args.big} memories in {time.perf_counter() - t0:.1f} s "
            f"(any promotion included); tier now {tier!r}"
        )
        await _searches(deps, big, rng, f"{args.big} memories, own index")
    await deps.store.client.aclose()


async def _no_publish(*_: object, **__: object) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=10_000)
    parser.add_argument("--per", type=int, default=5)
    parser.add_argument("--big", type=int, default=3000)
    parser.add_argument("--pool-max", type=int, default=Settings().pool_max)
    args = parser.parse_args()
    stack = EmbeddedStack.temporary()
    stack.redis_port = free_port()
    try:
        stack.start_redis()
        asyncio.run(run(args, stack.redis_url))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
