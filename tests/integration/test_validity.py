"""Validity (PROTOCOL.md v3): `valid_from` / `valid_until` on memories, supersedes closing
the old memory's validity, current reads leaving out what no longer holds, and `as_of`
reads of what was valid at an instant, superseded memories included."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis

from bus import AgentMemory, MemoryBus
from bus.errors import InvalidRequest

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")

T2020 = datetime(2020, 1, 1, tzinfo=UTC)
T2021 = datetime(2021, 1, 1, tzinfo=UTC)
T2022 = datetime(2022, 1, 1, tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


async def _listed(mem: AgentMemory, **kw: object) -> set[str]:
    return {m.id for m in (await mem.list(limit=100, **kw)).memories}  # type: ignore[arg-type]


async def _found(mem: AgentMemory, query: str, **kw: object) -> list[str]:
    return [r.id for r in (await mem.search(query, limit=20, **kw)).results]  # type: ignore[arg-type]


async def test_bounds_are_stored_returned_and_checked(wf123: AgentMemory) -> None:
    added = await wf123.add(
        "fact", "Ana leads the platform team", valid_from=T2020, scope="workflow"
    )
    got = (await wf123.get([added.id])).memories[0]
    assert (got.valid_from, got.valid_until) == (T2020, None)
    listed = (await wf123.list()).memories[0]
    assert listed.valid_from == T2020

    with pytest.raises(InvalidRequest, match="valid_until"):
        await wf123.add("fact", "backwards", valid_from=T2021, valid_until=T2020)
    # An update is checked against the bound it keeps, and writes nothing when refused.
    with pytest.raises(InvalidRequest, match="valid_until"):
        await wf123.update(added.id, valid_until=T2020 - timedelta(days=1))
    assert (await wf123.get([added.id])).memories[0].valid_until is None


async def test_supersedes_closes_the_old_validity_and_as_of_reads_each_side(
    wf123: AgentMemory,
) -> None:
    old = await wf123.add("decision", "The database is MySQL", valid_from=T2020)
    new = await wf123.add(
        "decision", "The database is Postgres", valid_from=T2021, supersedes=[old.id]
    )

    closed = (await wf123.get([old.id])).memories[0]
    assert closed.valid_until == T2021
    history = await wf123.history(old.id)
    change = history.entries[-1].changes["valid_until"]
    assert (change.old, change.new) == (None, "2021-01-01T00:00:00Z")

    # Now: only the new one; as of mid-2020: only the old one, superseded as it is now.
    assert await _found(wf123, "database") == [new.id]
    mid_2020 = T2020 + timedelta(days=180)
    assert await _found(wf123, "database", as_of=mid_2020) == [old.id]
    assert await _found(wf123, "database", as_of=T2021) == [new.id]
    assert await _listed(wf123, as_of=mid_2020) == {old.id}
    assert await _listed(wf123) == {new.id}
    # Before anything held, nothing.
    assert await _found(wf123, "database", as_of=T2020 - timedelta(days=1)) == []


async def test_a_supersede_keeps_an_earlier_end_and_closes_an_open_one_at_created_at(
    wf123: AgentMemory,
) -> None:
    ended = await wf123.add("fact", "Bo was on call", valid_from=T2020, valid_until=T2021)
    opened = await wf123.add("fact", "Cy is on call")
    new = await wf123.add("fact", "Dee is on call", supersedes=[ended.id, opened.id])
    got = {m.id: m for m in (await wf123.get([ended.id, opened.id, new.id])).memories}

    assert got[ended.id].valid_until == T2021
    # The new memory has no valid_from: it holds from its created_at, where the old stops.
    assert got[opened.id].valid_until == got[new.id].created_at


async def test_a_memory_whose_end_passes_leaves_current_reads(
    wf123: AgentMemory, bus: MemoryBus
) -> None:
    soon = _now() + timedelta(seconds=1.5)
    brief = await wf123.add("context", "the deploy window is open", valid_until=soon)
    lasting = await wf123.add("context", "the deploy runbook lives in the wiki")
    assert await _listed(wf123) == {brief.id, lasting.id}
    assert set(await _found(wf123, "deploy")) == {brief.id, lasting.id}
    before = await wf123.describe()

    await asyncio.sleep(1.8)

    assert set(await _found(wf123, "deploy")) == {lasting.id}
    assert set(await _found(wf123, "deploy", mode="text")) == {lasting.id}
    assert await _listed(wf123) == {lasting.id}
    assert await _listed(wf123, types=["context"]) == {lasting.id}
    after = await wf123.describe()
    assert (before.superseded_count, after.superseded_count) == (0, 1)
    assert after.total == before.total
    # Still there for whoever asks: with include_superseded, or as of before its end.
    assert await _listed(wf123, include_superseded=True) == {brief.id, lasting.id}
    earlier = soon - timedelta(seconds=1)
    assert set(await _found(wf123, "deploy", as_of=earlier)) == {brief.id, lasting.id}
    timeline = await wf123.timeline(lasting.id, as_of=earlier)
    assert [m.id for m in timeline.memories] == [brief.id, lasting.id]
    timeline = await wf123.timeline(lasting.id)
    assert [m.id for m in timeline.memories] == [lasting.id]


async def test_a_past_fact_is_read_only_as_of_its_time(wf123: AgentMemory) -> None:
    past = await wf123.add("fact", "the office was in Lisbon", valid_from=T2020, valid_until=T2021)
    assert await _listed(wf123) == set()
    assert await _found(wf123, "office Lisbon") == []
    assert await _found(wf123, "office Lisbon", as_of=T2020 + timedelta(days=1)) == [past.id]
    # valid_until is exclusive.
    assert await _found(wf123, "office Lisbon", as_of=T2021) == []
    recalled = await wf123.recall(
        "where was the office?", session_id="s1", as_of=T2020 + timedelta(days=1)
    )
    assert past.id in {r.id for r in recalled.results}
    recalled = await wf123.recall("where was the office?", session_id="s2")
    assert past.id not in {r.id for r in recalled.results}


async def test_opening_the_end_again_makes_it_current(wf123: AgentMemory) -> None:
    past = await wf123.add("fact", "the cache is warm", valid_until=_now() - timedelta(hours=1))
    assert await _listed(wf123) == set()
    await wf123.update(past.id, valid_until=None)
    assert await _listed(wf123) == {past.id}
    assert (await wf123.get([past.id])).memories[0].valid_until is None
    await wf123.update(past.id, valid_until=_now() - timedelta(minutes=1))
    assert await _listed(wf123) == set()


async def test_the_same_content_after_its_end_is_a_new_current_memory(
    wf123: AgentMemory,
) -> None:
    first = await wf123.add("fact", "the build is green", valid_until=_now() + timedelta(seconds=1))
    await asyncio.sleep(1.2)
    again = await wf123.add("fact", "the build is green")
    assert again.duplicate_of is None and again.id != first.id
    assert await _listed(wf123) == {again.id}


async def test_a_list_as_of_pages_the_tallies_exactly_as_the_index(
    wf123: AgentMemory, bus: MemoryBus, rds: aioredis.Redis, transport: str
) -> None:
    # `list` by scope alone with `as_of` reads the writes' tallies (counts by validity, then
    # the newest valid memories); with a `types` filter it reads the index. Both must agree
    # at every instant: before, between and after supersedes and ends.
    old = await wf123.add("fact", "version one", valid_from=T2020)
    new = await wf123.add("fact", "version two", valid_from=T2021, supersedes=[old.id])
    await wf123.add("fact", "a past fact", valid_from=T2020, valid_until=T2022)
    await wf123.add("fact", "a workflow note", scope="workflow")
    for i in range(5):
        await wf123.add("fact", f"plain fact {i}")
    brief = await wf123.add("fact", "ends soon", valid_until=_now() + timedelta(seconds=1))
    await wf123.delete([new.id])
    await asyncio.sleep(1.1)
    await wf123.add("fact", "after the end")
    searched = await rds.info("commandstats")
    for at in (T2020 - timedelta(days=1), T2020, T2021 - timedelta(days=1), T2021, T2022,
               _now() - timedelta(seconds=2), _now()):  # fmt: skip
        for offset in (0, 2):
            tallied = await wf123.list(as_of=at, limit=3, offset=offset)
            indexed = await wf123.list(as_of=at, limit=3, offset=offset, types=["fact"])
            assert [m.id for m in tallied.memories] == [m.id for m in indexed.memories], at
            assert tallied.total == indexed.total, at
    during = (await wf123.get([brief.id])).memories[0].created_at + timedelta(milliseconds=500)
    assert brief.id in {m.id for m in (await wf123.list(as_of=during)).memories}
    if transport != "cluster":  # (a cluster client's INFO is another node's)
        # The scope-alone lists above read no index: FT.SEARCH ran for the 14 typed ones.
        after = (await rds.info("commandstats")).get("cmdstat_FT.SEARCH", {}).get("calls", 0)
        assert after - searched.get("cmdstat_FT.SEARCH", {}).get("calls", 0) == 14
