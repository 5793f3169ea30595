"""Bench: Redis round trips per request on the request path (issue 36), counted in redis-py.

Runs the handler's own request path in this process (`dispatch()`: decode, locate, the
operation, reply encode) against the embedded Redis, and counts each write of a command or
of a pipeline's packed commands to a Redis connection (`AbstractConnection.
send_packed_command`: a pipeline is one round trip, a connect's HELLO or a health-check PING
one more). Only the round trips before the reply count: a request runs with a context
variable holding an open `Counting`, which the tasks it starts copy; it is closed as the reply
is returned, and the sends of tasks still running then (work after the reply, such as
counting accesses) are listed apart, as "after". Also prints the longest chain of round trips
that wait for each other (those a request gathers overlap), and the commands of each round
trip (scripts by the store attribute that holds them).

Two namespaces of 30 corpus memories (bench/corpus.py): one with its own index (made with
MEMBUS_POOL_MAX=0, as a namespace past the pool size has) and one in a pool (the default for a
new namespace); and one of 2,000 with its own index, past MEMBUS_TEXT_READ_DOCS_MIN, where a
hybrid search reads its rarer words only and scores the rest among the candidates. At the
default of 1,000, no word of this corpus holds so many of 2,000 memories, so the handler
serves with `--docs-min` (100; the default settings otherwise), caches warm.

    .venv/bin/python bench/roundtrips.py [--requests 20] [--memories 30] [--embedder hash]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec
import nats
from corpus import WORKFLOWS, CorpusMemory, CorpusQuery, make_corpus, make_queries
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from store_cost import load as load_memories

from contracts.messages import (
    AddRequest,
    DescribeRequest,
    GetRequest,
    ListRequest,
    Request,
    SearchMode,
    SearchRequest,
)
from contracts.subjects import request_subject
from deploy.embedded import EmbeddedStack
from handlers.dispatch import dispatch
from handlers.logs import configure_logging
from handlers.ops import Deps
from handlers.service import make_deps, make_embedder, redis_client
from handlers.settings import load_settings
from handlers.store.pick import PICK_SHA

T = TypeVar("T")
NEW_QUERIES = "search hybrid, new queries, from a workflow"


# --------------------------------------------------------------------------- counting


@dataclass
class Trip:
    """One round trip: the commands written at once, who wrote them, when it was answered."""

    commands: list[str]
    task: str
    start: float
    end: float = 0.0  # the last reply read on that connection after this write


@dataclass
class Counting:
    """The round trips of one request."""

    task: asyncio.Task[Any] | None
    open: bool = True
    before: list[tuple[Trip, asyncio.Task[Any] | None]] = field(default_factory=list)
    after: list[Trip] = field(default_factory=list)

    def close(self) -> None:
        """At the reply: what tasks still running sent goes after it."""
        self.open = False
        kept = []
        for trip, task in self.before:
            if task is None or task is self.task or task.done():
                kept.append((trip, task))
            else:
                self.after.append(trip)
        self.before = kept

    @property
    def trips(self) -> list[Trip]:
        return [trip for trip, _ in self.before]

    def chain(self) -> int:
        """The most round trips of this request that ran one after another (each written
        after the previous one's reply): what its latency waits for."""
        trips = sorted(self.trips, key=lambda t: t.start)
        longest: list[int] = []
        for i, t in enumerate(trips):
            prior = [longest[j] for j in range(i) if trips[j].end <= t.start]
            longest.append(1 + max(prior, default=0))
        return max(longest, default=0)


_COUNTING: contextvars.ContextVar[Counting | None] = contextvars.ContextVar(
    "bench_roundtrips", default=None
)


def _arguments(packed: Any) -> Iterable[list[bytes]]:
    """The first three arguments of each command in RESP-packed bytes (one or more)."""
    if isinstance(packed, str):
        data = packed.encode()
    elif isinstance(packed, (bytes, bytearray, memoryview)):
        data = bytes(packed)
    else:
        data = b"".join(bytes(chunk) for chunk in packed)
    i = 0
    while i < len(data) and data[i : i + 1] == b"*":
        j = data.index(b"\r\n", i)
        n, i = int(data[i + 1 : j]), j + 2
        args = []
        for k in range(n):
            j = data.index(b"\r\n", i)
            size, i = int(data[i + 1 : j]), j + 2
            if k < 3:
                args.append(data[i : i + size])
            i += size + 2
        yield args


def _task_name(task: asyncio.Task[Any] | None, own: asyncio.Task[Any] | None) -> str:
    if task is None or task is own:
        return "request"
    coro = task.get_coro()
    return getattr(coro, "__qualname__", None) or task.get_name()


class RoundTrips:
    """Counts redis-py's writes to Redis per request (see the module docstring)."""

    def __init__(self) -> None:
        self.scripts: dict[str, str] = {}  # sha -> name
        self._send: Any = None
        self._read: Any = None

    def name_scripts(self, root: object, depth: int = 4) -> None:
        """Name each Lua script by the attribute that holds it (`Store._fetch`), found by
        walking the attributes of `root` (the store) and of the objects it holds."""
        seen: set[int] = set()
        todo: list[tuple[object, int]] = [(root, 0)]
        while todo:
            obj, level = todo.pop()
            if id(obj) in seen or level > depth:
                continue
            seen.add(id(obj))
            attrs = getattr(obj, "__dict__", None)
            if not isinstance(attrs, dict):
                continue
            for attr, value in attrs.items():
                if isinstance(value, AsyncScript):
                    self.scripts.setdefault(value.sha, f"{type(obj).__name__}.{attr}")
                elif type(value).__module__.startswith("handlers."):
                    todo.append((value, level + 1))
        self.scripts.setdefault(PICK_SHA, "pick (scores among candidates, records)")
        # Scripts held elsewhere (a module's own): named by their first line.
        for obj in gc.get_objects():
            if isinstance(obj, AsyncScript) and obj.sha not in self.scripts:
                text = obj.script.decode() if isinstance(obj.script, bytes) else obj.script
                first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
                self.scripts[obj.sha] = f"script {obj.sha[:8]} ({first[:40]})"

    def describe(self, args: list[bytes]) -> str:
        name = args[0].decode(errors="replace").upper() if args else "?"
        if name in ("EVALSHA", "EVALSHA_RO") and len(args) > 1:
            return f"{name} {self.scripts.get(args[1].decode(), args[1][:8].decode())}"
        if name == "FT.SEARCH" and len(args) > 2:
            return "FT.SEARCH knn" if b"KNN" in args[2] else "FT.SEARCH text"
        if name.startswith("FT.") and len(args) > 1 and name not in ("FT.SEARCH",):
            return name
        return name

    def install(self) -> None:
        send = self._send = AbstractConnection.send_packed_command
        read = self._read = AbstractConnection.read_response
        describe = self.describe

        async def counted_send(conn: AbstractConnection, command: Any, *a: Any, **kw: Any) -> None:
            counting = _COUNTING.get()
            if counting is None:
                return await send(conn, command, *a, **kw)
            task = asyncio.current_task()
            trip = Trip(
                [describe(args) for args in _arguments(command)],
                _task_name(task, counting.task),
                time.perf_counter(),
            )
            conn._bench_trip = trip  # type: ignore[attr-defined]
            if counting.open:
                counting.before.append((trip, task))
            else:
                counting.after.append(trip)
            return await send(conn, command, *a, **kw)

        async def timed_read(conn: AbstractConnection, *a: Any, **kw: Any) -> Any:
            out = await read(conn, *a, **kw)
            trip = getattr(conn, "_bench_trip", None)
            if trip is not None:
                trip.end = time.perf_counter()
            return out

        AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]
        AbstractConnection.read_response = timed_read  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._send is not None:
            AbstractConnection.send_packed_command = self._send  # type: ignore[method-assign]
            AbstractConnection.read_response = self._read  # type: ignore[method-assign]
            self._send = self._read = None

    async def count(self, call: Callable[[], Awaitable[T]]) -> tuple[T, Counting]:
        """Run `call()` (one request) counting its round trips until it returns."""
        counting = Counting(asyncio.current_task())
        token = _COUNTING.set(counting)
        try:
            out = await call()
        finally:
            # No await between the reply and here: nothing started by the request has run
            # since it returned.
            counting.close()
            _COUNTING.reset(token)
        return out, counting


async def check_counting(rt: RoundTrips, client: Any) -> None:
    """The counting's own check, on a live Redis: one GET, a pipeline, two gathered GETs,
    and a task left running after the reply must count 1 + 1 + 2 (2 of them in sequence
    at best) before the reply and 1 after."""
    later: list[asyncio.Task[Any]] = []

    async def request() -> None:
        await client.get("bench:check")
        await client.pipeline(transaction=False).get("a").get("b").execute()
        await asyncio.gather(client.get("c"), client.get("d"))
        later.append(asyncio.ensure_future(client.get("e")))

    _, counting = await rt.count(request)
    await asyncio.gather(*later)
    got = (len(counting.trips), counting.chain(), len(counting.after))
    if got[0] != 4 or got[2] != 1 or got[1] > 4:
        raise SystemExit(f"round trip counting is off: {got} (want 4, <= 4, 1)")


# --------------------------------------------------------------------------- in process


async def noop_publish(subject: str, data: bytes) -> None:
    return None


class InProcess:
    """The handler's request path in this process against an embedded stack's Redis:
    `Deps` as `handlers.service` builds them, requests through `dispatch()`."""

    def __init__(self, stack: EmbeddedStack, embedder: str, env: dict[str, str] | None = None):
        self.settings = load_settings(
            {"MEMBUS_EMBEDDER": embedder, "MEMBUS_REDIS_URL": stack.redis_url, **(env or {})}
        )
        self.client = redis_client(self.settings.redis_url)
        self.embedder = make_embedder(self.settings, self.client)
        self.nc: Any = None
        self.deps: Deps = make_deps(
            self.settings, self.client, self.embedder, noop_publish, 1024 * 1024
        )
        self.stack = stack

    async def with_nats(self) -> InProcess:
        """Publish events to the stack's NATS, as a handler does (writes publish them)."""
        self.nc = await nats.connect(self.stack.nats_url)
        self.deps = make_deps(
            self.settings, self.client, self.embedder, self.nc.publish, self.nc.max_payload
        )
        return self

    async def ask(self, ns: str, op: str, req: Request) -> Any:
        """One request through `dispatch()`, decoded; an error reply raises."""
        body, error = await dispatch(
            op, request_subject(ns, op), msgspec.json.encode(req), self.deps
        )
        if error is not None:
            raise RuntimeError(f"{op}: {error.code}: {error.message}")
        return msgspec.json.decode(body)

    async def settle(self) -> None:
        """Wait for the work the requests left running after their replies."""
        settle = getattr(self.deps.store, "settle", None)
        if settle is not None:
            await settle()
        await asyncio.sleep(0.01)

    async def close(self) -> None:
        await self.settle()
        await self.embedder.close()
        await self.client.aclose()
        if self.nc is not None:
            await self.nc.close()


# --------------------------------------------------------------------------- the bench


@dataclass
class Row:
    name: str
    trips: list[int]
    chains: dict[str, int]  # a shape of request (`shape`): its shortest chain
    after: list[int]
    shapes: Counter[str]
    after_shapes: Counter[str]

    def summary(self) -> dict[str, Any]:
        return {
            "round_trips": statistics.median(self.trips),
            "min": min(self.trips),
            "max": max(self.trips),
            # The commonest shape's shortest: gathered round trips that happened not to
            # overlap in one request (one arm answered before the other sent) are no chain.
            "in_sequence": self.chains[self.shapes.most_common(1)[0][0]],
            "after_reply": statistics.median(self.after),
            "commands": self.shapes.most_common(1)[0][0],
            "commands_after_reply": self.after_shapes.most_common(1)[0][0]
            if self.after_shapes
            else "",
        }


def shape(trips: list[Trip]) -> str:
    """A request's round trips in order, a pipeline's commands in brackets, `<task>:` before
    those another task sent (gathered arms)."""
    out = []
    for t in sorted(trips, key=lambda t: t.start):
        names = Counter(t.commands)
        body = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
        body = f"[{body}]" if len(t.commands) > 1 else body
        out.append(body if t.task == "request" else f"{t.task.split('.')[-1]}: {body}")
    return " | ".join(out)


async def measure(
    rt: RoundTrips,
    app: InProcess,
    name: str,
    requests: int,
    warmup: int,
    call: Callable[[int], Awaitable[object]],
    same: bool = True,
) -> Row:
    """Count `requests` calls after warm-up: with `same`, the same requests first (every
    cache warm: index, home, word forms); else `warmup` others (adds: a repeat would only
    count a mention)."""
    for i in range(requests) if same else range(requests, requests + warmup):
        await call(i)
    await app.settle()
    row = Row(name, [], {}, [], Counter(), Counter())
    for i in range(requests):
        _, counting = await rt.count(lambda i=i: call(i))  # type: ignore[misc]
        await app.settle()
        row.trips.append(len(counting.trips))
        done = shape(counting.trips)
        row.chains[done] = min(row.chains.get(done, 99), counting.chain())
        row.after.append(len(counting.after))
        row.shapes[done] += 1
        if counting.after:
            row.after_shapes[shape(counting.after)] += 1
    return row


Call = Callable[[int], Awaitable[object]]


def requests_of(
    app: InProcess,
    ns: str,
    queries: list[CorpusQuery],
    ids: list[str],
    adds: list[CorpusMemory],
    per_op: int,
) -> dict[str, Call]:
    """The requests counted in `ns`, by row name; request `i` of a row is `call(i)`. Adds
    last: they change the namespace (each a new memory, `per_op` for each row)."""

    def workflow(i: int, wf: bool) -> str | None:
        return WORKFLOWS[i % len(WORKFLOWS)] if wf else None

    def search(mode: SearchMode | None, wf: bool, asked: list[CorpusQuery] = queries) -> Call:
        def one(i: int) -> Awaitable[object]:
            q = asked[i]
            w = (q.workflow_id or WORKFLOWS[i % len(WORKFLOWS)]) if wf else None
            return app.ask(ns, "search", SearchRequest(query=q.text, workflow_id=w, mode=mode))

        return one

    def describe(wf: bool) -> Call:
        return lambda i: app.ask(ns, "describe", DescribeRequest(workflow_id=workflow(i, wf)))

    def listed(wf: bool) -> Call:
        return lambda i: app.ask(ns, "list", ListRequest(workflow_id=workflow(i, wf), limit=20))

    def get(n: int) -> Call:
        return lambda i: app.ask(
            ns, "get", GetRequest(ids=[ids[(i + k) % len(ids)] for k in range(n)])
        )

    def add(wf: bool) -> Call:
        mine = adds[:per_op] if wf else adds[per_op:]

        def one(i: int) -> Awaitable[object]:
            m = mine[i]
            body = AddRequest(workflow_id=workflow(i, wf), agent_id=m.agent_id, **m.add_kwargs())
            return app.ask(ns, "add", body)

        return one

    ops: dict[str, Call] = {}
    where = {True: "from a workflow", False: "no workflow"}
    for wf in (True, False):
        ops[f"search hybrid (default), {where[wf]}"] = search(None, wf)
        ops[f"search vector, {where[wf]}"] = search("vector", wf)
        ops[f"search text, {where[wf]}"] = search("text", wf)
    # Queries not asked before: a word not seen yet is looked up (FT.EXPLAIN) first.
    ops[NEW_QUERIES] = search(None, True, queries[per_op:])
    for wf in (True, False):
        ops[f"describe, {where[wf]}"] = describe(wf)
        ops[f"list 20, {where[wf]}"] = listed(wf)
    ops["get 1 id"] = get(1)
    ops["get 10 ids"] = get(10)
    for wf in (True, False):
        ops[f"add, {where[wf]}"] = add(wf)
    return ops


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20, help="requests counted per row")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--memories", type=int, default=30, help="memories in each namespace")
    p.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    p.add_argument(
        "--large", type=int, default=2000, help="memories of a third namespace (own index; 0: none)"
    )
    p.add_argument(
        "--docs-min",
        type=int,
        default=100,
        help="MEMBUS_TEXT_READ_DOCS_MIN of the handler (default 100: see above)",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args()
    per_op = args.requests + args.warmup
    configure_logging("warning")

    stack = EmbeddedStack.temporary()
    stack.start_servers()
    served = {"MEMBUS_TEXT_READ_DOCS_MIN": str(args.docs_min)}
    app = await InProcess(stack, args.embedder, served).with_nats()
    # Own index: made by a handler with pools off; then served by `app` like any other.
    own_maker = InProcess(stack, args.embedder, {"MEMBUS_POOL_MAX": "0"})
    rt = RoundTrips()
    m, big = args.memories, args.large
    corpus = make_corpus(2 * m + big + 6 * per_op, args.seed)
    spaces = {"own index": ("rt_own", 0, m), "pooled": ("rt_pooled", m, 2 * m)}
    if big:
        spaces[f"own index, {big:,}"] = ("rt_large", 2 * m, 2 * m + big)
    fresh = corpus[2 * m + big :]  # the adds' memories, 2 * per_op for each namespace
    rows: dict[str, list[Row]] = {}
    try:
        for kind, (ns, start, end) in spaces.items():
            maker = app if kind == "pooled" else own_maker
            await load_memories(maker.deps, corpus[start:end], [], ns=ns)
        await own_maker.close()
        await app.settle()
        rt.name_scripts(app.deps.store)
        rt.install()
        await check_counting(rt, app.client)
        for n, (kind, (ns, start, end)) in enumerate(spaces.items()):
            queries = make_queries(3 * per_op, args.seed, corpus[start:end])
            listed = await app.ask(ns, "list", ListRequest(limit=20))
            ids = [m["id"] for m in listed["memories"]]
            adds = fresh[n * 2 * per_op : (n + 1) * 2 * per_op]
            ops = requests_of(app, ns, queries, ids, adds, per_op)
            for name, call in ops.items():
                same = not name.startswith("add") and name != NEW_QUERIES
                row = await measure(rt, app, name, args.requests, args.warmup, call, same)
                rows.setdefault(name, []).append(row)
                print(f"  {kind}: {name}: {statistics.median(row.trips):g}", flush=True)
    finally:
        rt.uninstall()
        await app.close()
        stack.stop()

    kinds = list(spaces)
    print(
        f"\nRedis round trips before the reply, per request (median of {args.requests}; "
        f"{args.embedder} embedder, caches warm). Cells: round trips (their range if it"
    )
    print("varies), seq: the longest chain of them that wait for each other (gathered ones")
    print("overlap), [after]: sent by work the request left running after its reply (not")
    print("counted)\n")
    print("| request | " + " | ".join(kinds) + " |")
    print("| --- |" + " --- |" * len(kinds))
    for name, by_kind in rows.items():
        cells = []
        for row in by_kind:
            s = row.summary()
            spread = "" if s["min"] == s["max"] else f" ({s['min']}-{s['max']})"
            cells.append(
                f"{s['round_trips']:g}{spread} (seq {s['in_sequence']:g}) [{s['after_reply']:g}]"
            )
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nCommands of each round trip, in order (the commonest sequence of the requests):")
    for name, by_kind in rows.items():
        for kind, row in zip(kinds, by_kind, strict=True):
            s = row.summary()
            print(f"  {name}, {kind}: {s['commands']}")
            if s["commands_after_reply"]:
                print(f"      after the reply: {s['commands_after_reply']}")
    if args.json:
        out = {
            name: {k: r.summary() for k, r in zip(kinds, by_kind, strict=True)}
            for name, by_kind in rows.items()
        }
        with open(args.json, "w") as fh:  # noqa: ASYNC230 - once, after the measurements
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
