"""Long fuzz runs of `dispatch()`, in this process, against embedded servers of its own.

Inputs come from tests/fuzzing.py (the strategies of tests/integration/test_fuzz.py), in
chunks: each chunk gets a fresh namespace, seeded with memories, workspaces and states that
its inputs refer to. Prints the counts of replies (success, each typed error code,
`internal`, crashes and malformed replies), the slowest inputs, and every input that got
`internal`, crashed, broke the reply's shape or took longer than `--slow-ms`; those are also
saved (bodies in base64) under `--out`, with the handler's error log. Run from the project root:

    .venv/bin/python bench/fuzz.py --inputs 100000 [--seed 1] [--chunk 2000] [--out DIR]

Exits 1 when any input got `internal`, crashed or broke the reply's shape.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import heapq
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import fuzzing  # noqa: E402
from fuzzing import Outcome  # noqa: E402

from deploy.embedded import EmbeddedStack  # noqa: E402
from handlers.logs import configure_logging  # noqa: E402
from handlers.ops import Deps  # noqa: E402
from handlers.service import make_deps, make_embedder, redis_client  # noqa: E402
from handlers.settings import load_settings  # noqa: E402


def log_errors_to(path: Path) -> Any:
    """The handler's error logs (tracebacks of `internal` replies) as JSON lines in a file."""
    fh = path.open("w", encoding="utf-8")
    configure_logging("warning", fh)
    return fh


def record(outcome: Outcome) -> dict[str, Any]:
    item = outcome.input
    return {
        "op": item.op,
        "kind": item.kind,
        "namespace": item.namespace,
        "trust": item.trust,
        "durable": item.durable,
        "code": outcome.code,
        "ms": round(outcome.ms, 3),
        "problem": outcome.problem,
        "size": len(item.body),
        "head": repr(item.body[:200]),
        "body_b64": base64.b64encode(item.body).decode(),
        "reply": outcome.reply[:1000].decode("utf-8", "replace"),
    }


class Tally:
    def __init__(self, slow_ms: float, keep: int = 10) -> None:
        self.slow_ms = slow_ms
        self.keep = keep
        self.codes: Counter[str] = Counter()
        self.by_kind: Counter[tuple[str, str]] = Counter()
        self.by_op: Counter[tuple[str, str]] = Counter()
        self.problems: list[Outcome] = []
        self.slow: list[Outcome] = []
        self._slowest: list[tuple[float, int, Outcome]] = []
        self.count = 0

    def add(self, outcome: Outcome) -> None:
        self.count += 1
        code = "success" if outcome.code is None else outcome.code
        if outcome.problem is not None and code not in ("internal", "crash"):
            code = "malformed"
        self.codes[code] += 1
        self.by_kind[(outcome.input.kind, code)] += 1
        self.by_op[(outcome.input.op, code)] += 1
        if outcome.problem is not None:
            self.problems.append(outcome)
        if outcome.ms > self.slow_ms:
            self.slow.append(outcome)
        entry = (outcome.ms, self.count, outcome)
        if len(self._slowest) < self.keep:
            heapq.heappush(self._slowest, entry)
        else:
            heapq.heappushpop(self._slowest, entry)

    def slowest(self) -> list[Outcome]:
        return [o for _, _, o in sorted(self._slowest, reverse=True)]

    def line(self) -> str:
        return ", ".join(f"{code} {n}" for code, n in self.codes.most_common())


async def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    errors_log = log_errors_to(out / "handler-errors.log")
    stack = EmbeddedStack.temporary()
    stack.start_servers()
    settings = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_REDIS_URL": stack.redis_url})
    client = redis_client(settings.redis_url)
    embedder = make_embedder(settings, client)
    nc = await nats.connect(stack.nats_url)
    tally = Tally(args.slow_ms)
    started = time.perf_counter()
    generating = 0.0
    try:
        deps: Deps = make_deps(settings, client, embedder, nc.publish, nc.max_payload)
        chunks = (args.inputs + args.chunk - 1) // args.chunk
        for chunk in range(chunks):
            ns = f"fuzz{args.seed}c{chunk}"
            pool = await fuzzing.seed_pool(ns, deps)
            count = min(args.chunk, args.inputs - chunk * args.chunk)
            t0 = time.perf_counter()
            items = fuzzing.draw(fuzzing.inputs(pool), count, seed=args.seed * 1_000_003 + chunk)
            generating += time.perf_counter() - t0
            for item in items:
                tally.add(await fuzzing.run_input(item, ns, deps))
            elapsed = time.perf_counter() - started
            print(
                f"[{tally.count}/{args.inputs}] {elapsed:.0f}s (generating {generating:.0f}s):"
                f" {tally.line()}",
                flush=True,
            )
        # Still serving after all that.
        check = await fuzzing.run_input(
            fuzzing.FuzzInput(op="describe", body=b"{}", kind="check"), "fuzzcheck", deps
        )
        assert check.code is None, check.reply
    finally:
        await nc.drain()
        await embedder.close()
        await client.aclose()
        stack.stop()
        errors_log.close()

    with (out / "problems.jsonl").open("w") as fh:
        for outcome in tally.problems:
            fh.write(json.dumps(record(outcome)) + "\n")
    with (out / "slow.jsonl").open("w") as fh:
        for outcome in tally.slow:
            fh.write(json.dumps(record(outcome)) + "\n")

    total = time.perf_counter() - started
    print(
        f"\n{tally.count} inputs in {total:.0f}s (seed {args.seed}, generating {generating:.0f}s)"
    )
    typed = sum(n for code, n in tally.codes.items() if code in fuzzing.TYPED_CODES)
    print(f"  success      {tally.codes['success']}")
    print(f"  typed error  {typed}")
    for code in sorted(fuzzing.TYPED_CODES):
        print(f"    {code:<16} {tally.codes[code]}")
    print(f"  internal     {tally.codes['internal']}")
    print(f"  crash        {tally.codes['crash']}")
    print(f"  malformed    {tally.codes['malformed']}")
    print("\nby kind:")
    for kind in fuzzing.KINDS:
        row = {c: n for (k, c), n in tally.by_kind.items() if k == kind}
        print(f"  {kind:<8} {json.dumps(dict(sorted(row.items())))}")
    print("\nby op:")
    for op in fuzzing.OPS:
        row = {c: n for (o, c), n in tally.by_op.items() if o == op}
        print(f"  {op:<18} {json.dumps(dict(sorted(row.items())))}")
    print("\nslowest:")
    for outcome in tally.slowest():
        print(f"  {outcome.ms:8.1f} ms  {outcome.input.describe(head=200)}")
    print(f"\n{len(tally.slow)} inputs over {args.slow_ms} ms (in {out / 'slow.jsonl'}):")
    for outcome in tally.slow[:50]:
        print(f"  {outcome.ms:8.1f} ms  {outcome.input.describe(head=200)}")
    print(f"\n{len(tally.problems)} problems (in {out / 'problems.jsonl'}):")
    for outcome in tally.problems[:50]:
        print(f"  {outcome.problem}\n    {outcome.input.describe(head=300)}")
    return 1 if tally.problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=2000, help="inputs per namespace")
    parser.add_argument("--slow-ms", type=float, default=100.0)
    parser.add_argument("--out", default=".membus/fuzz")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    raise SystemExit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
