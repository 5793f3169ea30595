"""Bench: workspaces, states, capture, the LLM tool executor and the MCP server.

Starts the embedded stack (NATS, Redis Stack, N handlers, MEMBUS_EMBEDDER=hash) and times,
through the bus: `create_state`, `load_state`, `list_states` (of a workspace holding
`--states` states), `capture` as a request, a burst of plain-publish captures (how fast they
are sent, and how long until all are stored), a search beside the same search through
`bus.tools.ToolExecutor` (what the executor adds), and a `memory_search` tools/call through
the MCP server over stdio. Prints figures; not a test. Run from the project root:

    .venv/bin/python bench/bench_workspaces.py [--states 200] [--n 300] [--handlers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bus import MemoryBus
from bus.capture import send_capture
from bus.tools import ToolExecutor
from deploy.embedded import EmbeddedStack, wait_for_handlers

NS = "benchws"
WS = "Bench Workspace"
STATE: dict[str, Any] = {
    "conversation_context": "We moved payment calls behind a PaymentGateway interface.",
    "active_task": "Retry failed card payments with backoff",
    "active_files": ["shop/payments.py", "shop/gateway.py"],
    "next_steps": ["Add an idempotency key", "Test a gateway timeout"],
}


def figures(name: str, samples: list[float]) -> None:
    s = sorted(samples)
    p = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    print(
        f"  {name:<34} p50 {p(0.5):7.3f} ms  p95 {p(0.95):7.3f} ms  "
        f"mean {statistics.fmean(s):7.3f} ms  (n={len(s)})"
    )


async def timed(n: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    for i in range(10):  # warm-up
        await call(-1 - i)
    out = []
    for i in range(n):
        t = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - t) * 1000)
    return out


async def run(args: argparse.Namespace, stack: EmbeddedStack) -> None:
    bus = await MemoryBus.connect(stack.nats_url, namespace=NS, timeout=10)
    await bus.create_workspace(WS, description="bench", root_folder="/", purpose="bench")
    mem = bus.agent(workflow_id="wf_bench", agent_id="bench", workspace=WS)
    print(f"== {args.handlers} handler(s), hash embedder, namespace {NS}")

    for i in range(args.states):
        await mem.create_state(f"seed {i}", **STATE)
    figures(
        "create_state",
        await timed(args.n, lambda i: mem.create_state(f"timed {i}", **STATE)),
    )
    figures("load_state", await timed(args.n, lambda i: mem.load_state(f"seed {abs(i) % 50}")))
    states = args.states + args.n + 10
    figures(f"list_states ({states} states)", await timed(50, lambda i: mem.list_states()))
    figures("load_workspace", await timed(args.n, lambda i: bus.load_workspace(WS)))
    figures(
        "capture (request/reply)",
        await timed(
            args.n,
            lambda i: mem.capture("read_file", args={"path": f"f{i}.py"}, output="x" * 200),
        ),
    )

    before = (await mem.describe()).total
    burst = args.n * 3
    t0 = time.perf_counter()
    for i in range(burst):
        await send_capture(mem, "grep", {"pattern": f"p{i}"}, "hit", False, 1.0)
    sent = time.perf_counter() - t0
    while True:  # poll the store: the publishes have no reply to wait for
        if (await mem.describe()).total >= before + burst:
            break
        await asyncio.sleep(0.01)
    stored = time.perf_counter() - t0
    print(
        f"  capture burst (publish, no reply)  {burst} sent in {sent * 1000:.1f} ms "
        f"({sent / burst * 1e6:.1f} us each), all stored after {stored * 1000:.0f} ms "
        f"({burst / stored:.0f} traces/s)"
    )

    executor = ToolExecutor(bus, workflow_id="wf_bench", agent_id="bench", workspace=WS)
    query = {"query": "payment gateway retries", "types": ["state", "trace"], "limit": 5}
    figures("search (SDK)", await timed(args.n, lambda i: mem.search(**query)))  # type: ignore[arg-type]
    figures(
        "memory_search (ToolExecutor)",
        await timed(args.n, lambda i: executor.call("memory_search", query)),
    )
    await mcp_figures(stack, args.n, query)
    await bus.close()


async def mcp_figures(stack: EmbeddedStack, n: int, query: dict[str, object]) -> None:
    try:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError:
        print("  (MCP figures skipped: install the `mcp` extra)")
        return
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bus.mcp"],
        env={
            "MEMBUS_NATS_URL": stack.nats_url,
            "MEMBUS_NAMESPACE": NS,
            "MEMBUS_WORKFLOW_ID": "wf_bench",
            "MEMBUS_WORKSPACE": WS,
            "MEMBUS_LOG_LEVEL": "warning",
        },
    )
    t0 = time.perf_counter()
    async with Client(params, read_timeout_seconds=30) as client:
        ready = time.perf_counter() - t0
        await client.list_tools()
        samples = await timed(n, lambda i: client.call_tool("memory_search", query))
        reply = await client.call_tool("memory_search", query)
    print(f"  MCP server start + initialize      {ready * 1000:.0f} ms")
    figures("memory_search (MCP stdio)", samples)
    text = getattr(reply.content[0], "text", "{}")
    print(f"  (an MCP search returned {len(json.loads(text).get('results', []))} results)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--states", type=int, default=200)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--handlers", type=int, default=2)
    args = parser.parse_args()
    with EmbeddedStack.temporary() as stack:
        stack.start_servers()
        procs = stack.start_handlers(args.handlers, {"MEMBUS_EMBEDDER": "hash"})
        asyncio.run(wait_for_handlers(stack.nats_url, args.handlers, procs, timeout=60))
        asyncio.run(run(args, stack))


if __name__ == "__main__":
    main()
