"""Bench: where Redis's main-thread CPU goes in a default search, by command.

Loads the seeded corpus of bench/corpus.py into one namespace (as bench/targets.py's (c)
does: hash embedder, queries asked from a workflow), runs the searches once so their words'
index forms are known, then captures every command each search sends (redis-py, the work
left after the reply included) and replays each kind of command alone, counting the Redis
main thread's utime + stime from /proc (`measure.proc_cpu_ms`). `--save` keeps a capture;
`--against` replays another one (say, of another version of the handlers) in alternating
rounds, over the same data. Each replayed command carries its own read and reply (about
25 us), which a pipeline shares.

    .venv/bin/python bench/search_split.py [--size 100000] [--searches 200] [--rounds 7]
        [--save F] [--against F] [--redis-url URL --pid PID]

With `--redis-url` (and the server's `--pid`), a namespace loaded before is used as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import pickle
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio as aioredis
import redis.asyncio.client as redis_client_module
from corpus import WORKFLOWS, make_corpus, make_queries
from measure import proc_cpu_ms
from roundtrips import InProcess
from store_cost import load as load_memories

from contracts.messages import SearchRequest
from deploy.embedded import EmbeddedStack
from handlers.logs import configure_logging
from handlers.store.reads import FETCH_LUA, FIELD_LUA
from handlers.store.validity import ENDED_LUA

NS = "targets"  # bench/targets.py's namespace: a stack it loaded serves here too
Capture = list[list[tuple[str, list[Any]]]]  # per search: (kind, command) in order

_SCRIPTS = {
    hashlib.sha1(src.encode()).hexdigest(): name
    for src, name in ((ENDED_LUA, "validity"), (FETCH_LUA, "fetch"), (FIELD_LUA, "vectors"))
}
_log: list[tuple[str, list[Any]]] | None = None


def kind(args: list[Any]) -> str:
    """What a command is in a search: which query, which script (and how the fetch script
    was asked: read, count an access, keep alive)."""
    name = str(args[0]).upper()
    if name == "FT.SEARCH":
        query = args[2].decode() if isinstance(args[2], bytes) else str(args[2])
        if "=>[KNN" in query:
            return "FT.SEARCH vector query"
        if "INKEYS" in (str(a) for a in args):
            return "FT.SEARCH scoring among candidates"
        return "FT.SEARCH text query"
    if name == "EVALSHA":
        script = _SCRIPTS.get(str(args[1]), "other script")
        if script == "fetch":
            flag = str(args[3 + int(args[2]) + 1])
            script = {"0": "fetch", "1": "count accesses", "2": "keep alive"}.get(flag, script)
        return f"EVALSHA {script}"
    return name


def _hook() -> None:
    """Record every command sent, alone or in a pipeline, while `_log` is a list."""
    single = redis_client_module.Redis.execute_command
    piped = redis_client_module.Pipeline.execute

    async def execute_command(self: Any, *args: Any, **options: Any) -> Any:
        if _log is not None:
            _log.append((kind(list(args)), list(args)))
        return await single(self, *args, **options)

    async def execute(self: Any, *args: Any, **options: Any) -> Any:
        if _log is not None:
            _log.extend((kind(list(c[0])), list(c[0])) for c in self.command_stack)
        return await piped(self, *args, **options)

    redis_client_module.Redis.execute_command = execute_command  # type: ignore[method-assign]
    redis_client_module.Pipeline.execute = execute  # type: ignore[method-assign]


async def capture(app: InProcess, requests: list[SearchRequest]) -> Capture:
    global _log
    for req in requests:  # once first: the words' index forms, the counts kept
        await app.ask(NS, "search", req)
    await app.settle()
    out: Capture = []
    for req in requests:
        _log = []
        await app.ask(NS, "search", req)
        await app.settle()
        out.append(_log)
    _log = None
    return out


async def replay(url: str, pid: int, captures: dict[str, Capture], rounds: int) -> None:
    """Each capture's commands by kind, the captures alternating, `rounds` times; ms of the
    main thread per search, median."""
    rds = aioredis.Redis.from_url(url, protocol=2)
    by_kind: dict[str, dict[str, list[float]]] = {n: defaultdict(list) for n in captures}
    totals: dict[str, list[float]] = defaultdict(list)
    try:
        for _ in range(rounds):
            for name, searches in captures.items():
                groups: dict[str, list[list[Any]]] = defaultdict(list)
                for log in searches:
                    for k, command in log:
                        groups[k].append(command)
                total = 0.0
                for k, commands in groups.items():
                    before = proc_cpu_ms(pid, pid)
                    for command in commands:
                        await rds.execute_command(*command)
                    ms = (proc_cpu_ms(pid, pid) - before) / len(searches)
                    by_kind[name][k].append(ms)
                    total += ms
                totals[name].append(total)
    finally:
        await rds.aclose()
    for name, searches in captures.items():
        runs = ", ".join(f"{t:.2f}" for t in totals[name])
        print(f"\n{name}: {statistics.median(totals[name]):.2f} ms per search ({runs})")
        rows = sorted(by_kind[name].items(), key=lambda kv: -statistics.median(kv[1]))
        for k, samples in rows:
            calls = sum(1 for log in searches for c, _ in log if c == k) / len(searches)
            print(f"  {k:38s} {calls:5.2f} a search  {statistics.median(samples):.3f} ms")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=100_000, help="memories loaded")
    p.add_argument("--searches", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--save", type=Path, default=None, help="write this version's capture")
    p.add_argument("--against", type=Path, default=None, help="also replay this capture")
    p.add_argument("--redis-url", default=None, help="a server holding the namespace")
    p.add_argument("--pid", type=int, default=0, help="that server's process id")
    args = p.parse_args()
    configure_logging("warning")
    _hook()
    stack = EmbeddedStack.temporary()
    if args.redis_url:
        stack.external_redis_url = args.redis_url
        url, pid = args.redis_url, args.pid
    else:
        stack.start_servers()
        url, pid = stack.redis_url, stack.servers["redis"].pid
    corpus = make_corpus(args.size, args.seed)
    queries = make_queries(args.searches, args.seed + args.size, corpus)
    requests = [
        SearchRequest(
            query=q.text, workflow_id=q.workflow_id or WORKFLOWS[i % len(WORKFLOWS)], limit=10
        )
        for i, q in enumerate(queries)
    ]
    app = InProcess(stack, "hash")
    try:
        if not args.redis_url:
            secs = await load_memories(app.deps, corpus, [], ns=NS)
            print(f"loaded {args.size:,} memories in {secs:.0f} s", flush=True)
        mine = await capture(app, requests)
    finally:
        await app.close()
    try:
        captures = {"this version": mine}
        if args.save:
            args.save.write_bytes(pickle.dumps(mine))
        if args.against:
            captures["--against"] = pickle.loads(args.against.read_bytes())
        await replay(url, pid, captures, args.rounds)
    finally:
        if not args.redis_url:
            stack.stop()


if __name__ == "__main__":
    asyncio.run(main())
