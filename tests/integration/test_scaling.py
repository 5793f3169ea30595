"""Several handler processes share one workload through the queue group; SIGTERM drains."""

from __future__ import annotations

import asyncio
import signal

import msgspec
import pytest
from nats.aio.client import Client as NatsClient

from bus import AgentMemory, MemoryBus
from deploy.embedded import EmbeddedStack, ping_handlers, wait_for_handlers

pytestmark = pytest.mark.transports("nats")


async def _stats(nc: NatsClient) -> dict[str, int]:
    """Requests served per handler instance, from `$SRV.STATS.memory`."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$SRV.STATS.memory", b"", reply=inbox)
    out: dict[str, int] = {}
    while True:
        try:
            msg = await sub.next_msg(timeout=0.3)
        except Exception:
            break
        stats = msgspec.json.decode(msg.data)
        out[stats["id"]] = sum(ep["num_requests"] for ep in stats["endpoints"])
    await sub.unsubscribe()
    return out


async def test_two_handler_processes_serve_one_workload(
    bus: MemoryBus, wf123: AgentMemory, nc: NatsClient, servers
) -> None:
    assert len(await ping_handlers(servers.nats_url)) == 2
    before = await _stats(nc)

    added = await asyncio.gather(*(wf123.add("knowledge", f"fact {i}") for i in range(200)))
    hits = await asyncio.gather(*(wf123.search(f"fact {i}", limit=1) for i in range(50)))

    after = await _stats(nc)
    served = {hid: after[hid] - before.get(hid, 0) for hid in after}
    assert len(served) == 2
    assert sum(served.values()) >= 250
    assert all(n > 0 for n in served.values()), served
    assert len({a.id for a in added}) == 200
    assert (await wf123.describe()).total == 200
    assert all(h.results for h in hits)


async def test_sigterm_drains_in_flight_requests(
    handlers: EmbeddedStack, bus: MemoryBus, wf123: AgentMemory, servers
) -> None:
    # Few slots, so requests queue inside the process: those must be served too.
    [extra] = handlers.start_handlers(1, {"MEMBUS_EMBEDDER": "hash", "MEMBUS_MAX_INFLIGHT": "2"})
    await wait_for_handlers(servers.nats_url, 3, [extra], timeout=60)

    async def stop_soon() -> None:
        await asyncio.sleep(0.05)
        extra.send_signal(signal.SIGTERM)

    results, _ = await asyncio.gather(
        asyncio.gather(*(wf123.add("knowledge", f"during shutdown {i}") for i in range(300))),
        stop_soon(),
    )

    # Every request got its one reply (no timeouts, no errors), and the process exited cleanly.
    assert len(results) == 300
    assert await asyncio.to_thread(extra.wait, 20) == 0
    handlers.handlers.remove(extra)
    assert (await wf123.describe()).total == 300
    assert len(await ping_handlers(servers.nats_url)) == 2
