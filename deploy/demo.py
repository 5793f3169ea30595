"""A short demo: two agents in two workflows share a preference and a decision through the
bus, while a third agent subscribes to the namespace's events and prints them. Then the team
changes its mind (a decision superseded by a newer one), a fact that changed is read as of
last week and now, and an assistant recalls memories
before two turns of one session: the second turn gets no repeats. A lead writes a decision
through JetStream, and a guest of lower trust sees only the social store. Last, a coding agent works
in a workspace: it saves a state in one session and loads it in another, its wrapped tools
leave searchable traces, and the same search runs through the MCP server's tools."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import msgspec

from bus import AgentMemory, Conflict, MemoryBus, Unavailable
from bus.capture import captured
from contracts.messages import Request, ScoredMemory

R = TypeVar("R", bound=msgspec.Struct)

# How long the demo waits between sending again an operation answered `unavailable`.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0)


class RetryingBus(MemoryBus):
    """The demo's bus: an operation answered `unavailable`, which the protocol says was not
    run and is safe to retry (a Redis still loading its data, a handler busy), is sent
    again after a pause, up to len(RETRY_DELAYS_S) times (13.5 s in all)."""

    async def request(self, op: str, body: Request | bytes, reply_type: type[R]) -> R:
        for delay in RETRY_DELAYS_S:
            try:
                return await super().request(op, body, reply_type)
            except Unavailable as exc:
                print(f"  ({op}: unavailable, retrying in {delay:g} s: {exc.message})")
                await asyncio.sleep(delay)
        return await super().request(op, body, reply_type)


async def run_demo(nats_url: str, namespace: str = "demo") -> None:
    async with await RetryingBus.connect(nats_url, namespace=namespace) as bus:
        events = await bus.subscribe()  # every workflow, and general memories
        printed = asyncio.Event()
        seen = 0

        async def follow() -> None:
            nonlocal seen
            async for ev in events:
                seen += 1
                where = ev.workflow_id or "general"
                who = f"{ev.action:<7} {ev.type:<9} in {where:<8} by {ev.agent_id}"
                print(f"  [observer] {who}: {' '.join(ev.preview.split())}")
                if seen >= 6:
                    printed.set()

        follower = asyncio.create_task(follow())
        researcher = bus.agent(workflow_id="wf_123", agent_id="researcher")
        writer = bus.agent(workflow_id="wf_456", agent_id="writer")

        print("\n== researcher (workflow wf_123) stores what it learned")
        pref = await researcher.add(
            "user_pref", "The user prefers concise answers with code examples"
        )
        print(f"  user_pref -> {pref.id} stored as general (workflow_id={pref.workflow_id})")
        if pref.duplicate_of:
            # The bus keeps its data between runs: a repeat is counted, not stored twice.
            print(f"               already known: mentioned {pref.mention_count} times now")
        dec = await researcher.add(
            "decision", "Team decision: use PostgreSQL for every new service", scope="general"
        )
        print(f"  decision  -> {dec.id} shared as general (scope='general')")
        local = await researcher.add("decision", "Scratch decision: try pgvector in this run only")
        print(f"  decision  -> {local.id} kept in wf_123 (workflow_id={local.workflow_id})")
        ctx = await researcher.add("context", "Search results page 1 for 'postgres vs mysql'")
        print(f"  context   -> {ctx.id} kept in wf_123, expires {ctx.expires_at:%Y-%m-%d}")

        print("\n== writer (workflow wf_456) discovers, then searches")
        d = await writer.describe()
        print(
            f"  describe: {d.total} memories in scope, by type {d.by_type}, embedder {d.embedder}"
        )
        for q in ("how does the user like answers written?", "which database should we use?"):
            hits = await writer.search(q, limit=2)
            print(f"  search {q!r}")
            for h in hits.results:
                print(f"    {h.score:.3f}  {h.type:<9} {h.content}")
        scratch = await writer.search("pgvector scratch decision", scope="workflow")
        print(f"  wf_456 sees wf_123's scratch decision: {bool(scratch.results)}")

        print("\n== the team changes its mind: a newer decision supersedes the old one")
        mysql = await researcher.add(
            "decision",
            "Team decision: use MySQL for every new service (ops knows it better)",
            scope="general",
            supersedes=[dec.id],
        )
        print(f"  decision  -> {mysql.id} supersedes {mysql.superseded or 'nothing new'}")
        hits = await writer.search("which database should we use?", types=["decision"])
        print(f"  writer's search now: {[h.content for h in hits.results]}")
        kept = await writer.search(
            "which database should we use?", types=["decision"], include_superseded=True
        )
        print(f"  with include_superseded: {len(kept.results)} decisions")
        trail = await writer.history(dec.id)
        print(f"  history of the old one: {' -> '.join(e.event for e in trail.entries)}")

        print("\n== a fact that changed: read as of last week, and now")
        now = datetime.now(UTC)
        lisbon = await researcher.add(
            "fact", "The team's office is in Lisbon", valid_from=now - timedelta(days=30)
        )
        porto = await researcher.add(
            "fact",
            "The team's office is in Porto (moved three days ago)",
            valid_from=now - timedelta(days=3),
            supersedes=[lisbon.id],
        )
        print(f"  fact      -> {porto.id} holds from 3 days ago, closing {lisbon.id}")
        for label, as_of in (("a week ago", now - timedelta(days=7)), ("now", None)):
            hits = await writer.search("where is the office?", types=["fact"], limit=1, as_of=as_of)
            print(f"  as of {label:<10}: {[h.content for h in hits.results]}")

        print("\n== an assistant recalls before each turn of one session")
        await writer.add("knowledge", "Architecture notes use short sections and a decision log")
        await writer.add("knowledge", "Diagrams live in docs/diagrams, drawn as SVG")
        assistant = bus.agent(
            workflow_id="wf_456", agent_id="assistant", session_id=f"demo-{uuid.uuid4().hex[:8]}"
        )
        for message in ("Draft the architecture note: which database?", "Any style rules?"):
            turn = await assistant.recall(message, limit=3)
            print(f"  turn {turn.turn}: {message!r}")
            for line in turn.block.splitlines() or ["(nothing new to recall)"]:
                print(f"    {line}")
            print(f"    left out: {turn.left_out_recalled} already recalled this session")

        await durable_demo(bus)
        await workspace_demo(bus, nats_url)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(printed.wait(), timeout=5)
        follower.cancel()
        await events.close()
        print(f"\n== observer saw {seen} events\n")


async def durable_demo(bus: MemoryBus) -> None:
    print("\n== a durable write (JetStream), and a guest of lower trust")
    lead = bus.agent(workflow_id="wf_789", agent_id="lead")
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.wf_789.>")
    await bus.nc.flush()
    accepted = await lead.durable.add("decision", "Release on Friday")
    print(f"  accepted by stream {accepted.stream} (seq {accepted.seq}): not lost from here on")
    # A NATS cluster that just restarted takes 10 to 15 s to elect the stream's leaders
    # before the handlers pull from it: the write waits in the stream meanwhile.
    applied = json.loads((await sub.next_msg(timeout=60)).data)
    await sub.unsubscribe()
    print(f"  applied: {applied['action']} {applied['id']} (request_id {applied['request_id']})")
    await lead.add("context", "Friday's release notes draft is in notes/rel.md", store="social")
    guest = RetryingBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust="familiar")
    seen = await guest.agent(workflow_id="wf_789").search("release friday")
    print(f"  a familiar-trust guest searching 'release friday' sees {len(seen.results)}:")
    for h in seen.results:
        print(f"    [{h.store}] {h.content}")


async def workspace_demo(bus: MemoryBus, nats_url: str) -> None:
    print("\n== a coding agent saves a state in one session and resumes in another")
    with contextlib.suppress(Conflict):  # the bus keeps its data between runs
        await bus.create_workspace(
            "Demo Shop",
            description="E-commerce platform rebuild",
            root_folder="projects/shop",
            purpose="Rebuild the checkout",
        )
    run = uuid.uuid4().hex[:6]
    monday = bus.agent(workflow_id="wf_shop", agent_id="coder", workspace="Demo Shop",
                       session_id=f"monday-{run}")  # fmt: skip
    name = f"Checkout refactor {run}"  # a state's name is unique in its workspace, forever
    await monday.create_state(
        name,
        conversation_context="We moved payment calls behind a PaymentGateway interface.",
        active_task="Retry failed card payments with backoff",
        active_files=["shop/payments.py", "shop/gateway.py"],
        next_steps=["Add an idempotency key", "Test a gateway timeout"],
    )
    print(f"  monday: state {name!r} saved")

    @captured(monday)
    async def read_file(path: str) -> str:
        return f"# {path}\nclass PaymentGateway: ...  # retries: none yet"

    await read_file("shop/gateway.py")
    await read_file("shop/payments.py")
    print("  monday: read_file ran twice (each run captured as a trace)")

    tuesday = bus.agent(workflow_id="wf_shop", agent_id="coder", workspace="Demo Shop",
                        session_id=f"tuesday-{run}")  # fmt: skip
    state = await tuesday.load_state(name)
    print(f"  tuesday: loaded {state.name!r}: {state.active_task}")
    for step in state.next_steps:
        print(f"    next: {step}")
    query = "payment gateway retries"
    hits = await _traces(tuesday, query)
    print(f"  tuesday: search {query!r} in states and traces")
    for h in hits:
        print(f"    {h.type:<6} {h.title}")
    await mcp_demo(nats_url, bus.namespace, query)


async def mcp_demo(nats_url: str, namespace: str, query: str) -> None:
    """The same search through the MCP server's tools, as an MCP client (an IDE, a desktop
    assistant) would make it: `python -m bus.mcp` over stdio, identity from its env."""
    print("\n== the same search through the MCP server (python -m bus.mcp, stdio)")
    try:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError:
        print("  (skipped: install the `mcp` extra)")
        return
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bus.mcp"],
        env={
            "MEMBUS_NATS_URL": nats_url,
            "MEMBUS_NAMESPACE": namespace,
            "MEMBUS_WORKFLOW_ID": "wf_shop",
            "MEMBUS_WORKSPACE": "Demo Shop",
            "MEMBUS_AGENT_ID": "ide-assistant",
            "MEMBUS_LOG_LEVEL": "warning",
        },
    )
    async with Client(params, read_timeout_seconds=30) as client:
        tools = await client.list_tools()
        print(f"  {len(tools.tools)} tools: {', '.join(t.name for t in tools.tools[:5])}, ...")
        args = {"query": query, "types": ["state", "trace"], "limit": 5}
        result = await client.call_tool("memory_search", args)
    block = result.content[0]
    reply = json.loads(getattr(block, "text", "{}"))
    print(f"  memory_search {json.dumps(args)}")
    for r in reply.get("results", []):
        print(f"    {r['type']:<6} {r.get('title')}  (score {r['score']:.3f})")


async def _traces(mem: AgentMemory, query: str) -> list[ScoredMemory]:
    """The workspace's states and traces for `query`, once the captures are stored (a
    capture is published, not awaited)."""
    for _ in range(50):
        found = await mem.search(query, types=["state", "trace"], limit=5)
        if sum(r.type == "trace" for r in found.results) >= 2:
            break
        await asyncio.sleep(0.05)
    return found.results
