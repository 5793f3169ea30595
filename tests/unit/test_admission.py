"""Load shedding's bookkeeping (`handlers.admission`), without a server."""

from __future__ import annotations

import asyncio

from handlers.admission import Admission


async def test_requests_past_the_slots_wait_then_are_refused_in_time() -> None:
    adm = Admission(max_inflight=1, max_waiting=1, wait_s=0.05)
    assert await adm.enter()  # runs
    waiter = asyncio.ensure_future(adm.enter())  # waits for the slot
    await asyncio.sleep(0)
    assert adm.waiting == 1
    assert not await adm.enter()  # nobody else may wait: refused at once
    assert not await waiter  # the slot never freed within wait_s
    assert (adm.running, adm.waiting, adm.refused) == (1, 0, 2)


async def test_a_freed_slot_goes_to_the_first_waiter() -> None:
    adm = Admission(max_inflight=1, max_waiting=5, wait_s=5)
    assert await adm.enter()
    first = asyncio.ensure_future(adm.enter())
    second = asyncio.ensure_future(adm.enter())
    await asyncio.sleep(0)
    adm.leave()
    assert await first
    assert not second.done()
    adm.leave()
    assert await second
    assert (adm.running, adm.waiting, adm.refused) == (1, 0, 0)


async def test_no_waiting_room_refuses_at_once() -> None:
    adm = Admission(max_inflight=2, max_waiting=0, wait_s=1)
    assert await adm.enter() and await adm.enter()
    assert not await adm.enter()
    adm.leave()
    assert await adm.enter()
