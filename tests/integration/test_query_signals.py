"""The query signals on real Redis (handlers.ops.query_signals): a memory carrying the
person a question names, or held at the time it names, is lifted by the setting's weight;
with a setting at 0 nothing changes, and the search's rules still hold.

The operations are called directly with settings and a clock the test picks (the functions
the handlers run), against the session's Redis.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import msgspec
import pytest
from inprocess import Clock

from contracts import AddRequest, SearchRequest
from handlers import ops as operations
from handlers.ops import search as search_ops
from handlers.ops import writes
from handlers.ops.ranking import DAY_MS
from handlers.settings import RankWeights


def with_weights(in_process, clock: Clock, **weights: float) -> operations.Deps:  # type: ignore[no-untyped-def]
    settings = in_process.deps.settings
    ranked = msgspec.structs.replace(settings.weights, **weights)
    return dataclasses.replace(
        in_process.deps, clock=clock, settings=msgspec.structs.replace(settings, weights=ranked)
    )


async def two_equal(
    ns: str, deps: operations.Deps, clock: Clock, first: AddRequest, second: AddRequest
) -> tuple[str, str]:
    """Two memories of the same content, `second` a day newer (so it wins a tie)."""
    a = await writes.add(ns, first, deps)
    clock.now += DAY_MS
    b = await writes.add(ns, second, deps)
    clock.now += DAY_MS
    return a.id, b.id


async def order(ns: str, deps: operations.Deps, query: str, mode: str = "hybrid") -> list[str]:
    req = SearchRequest(query=query, mode=mode)  # type: ignore[arg-type]
    return [r.id for r in (await search_ops.search(ns, req, deps)).results]


async def test_a_named_person_lifts_the_memories_about_them(in_process, ns: str) -> None:
    clock = Clock()
    off = with_weights(in_process, clock, names=0.0, times=0.0)
    on = with_weights(in_process, clock, names=0.1)
    content = "likes long hikes in the mountains"
    dana, sam = await two_equal(
        ns,
        off,
        clock,
        AddRequest(type="knowledge", content=content, related_people=["Dana Smith"], dedup="none"),
        AddRequest(type="knowledge", content=content, related_people=["Sam"], dedup="none"),
    )
    query = "What does Dana like about hikes?"

    assert await order(ns, off, query) == [sam, dana]
    assert await order(ns, on, query) == [dana, sam]
    # The boost is the weight, on top of the same relevance.
    req = SearchRequest(query=query)
    hits = {r.id: r.score for r in (await search_ops.search(ns, req, on)).results}
    assert hits[dana] - hits[sam] == pytest.approx(0.1 - 0.15 / 30, abs=1e-3)
    # No name in the question: nothing moves.
    assert await order(ns, on, "who likes hikes in the mountains") == [sam, dana]


async def test_a_person_the_content_names_is_not_counted_again(in_process, ns: str) -> None:
    clock = Clock()
    off = with_weights(in_process, clock, names=0.0, times=0.0)
    on = with_weights(in_process, clock, names=0.3)
    content = "Dana likes long hikes in the mountains"
    dana, sam = await two_equal(
        ns,
        off,
        clock,
        AddRequest(type="knowledge", content=content, related_people=["Dana"], dedup="none"),
        AddRequest(type="knowledge", content=content, related_people=["Sam"], dedup="none"),
    )
    query = "What does Dana like about hikes?"
    # Both say "Dana": the text sees the name in both, and the signal adds nothing.
    assert await order(ns, off, query) == [sam, dana]
    assert await order(ns, on, query) == [sam, dana]


async def test_a_speaker_tag_counts_as_the_person(in_process, ns: str) -> None:
    clock = Clock()
    off = with_weights(in_process, clock, names=0.0, times=0.0)
    on = with_weights(in_process, clock, names=0.1)
    content = "went to a pottery class"
    caroline, melanie = await two_equal(
        ns,
        off,
        clock,
        AddRequest(type="fact", content=content, tags=["caroline"], dedup="none"),
        AddRequest(type="fact", content=content, tags=["melanie"], dedup="none"),
    )
    # Vector mode: the tag's word is no help there, only the signal.
    query = "What class did Caroline take?"
    assert await order(ns, off, query, "vector") == [melanie, caroline]
    assert await order(ns, on, query, "vector") == [caroline, melanie]


def at(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


async def test_a_named_time_lifts_the_memories_held_then(in_process, ns: str) -> None:
    clock = Clock()
    off = with_weights(in_process, clock, names=0.0, times=0.0)
    on = with_weights(in_process, clock, times=0.1)
    content = "the team moved the offsite"
    october, may = await two_equal(
        ns,
        off,
        clock,
        AddRequest(type="fact", content=content, valid_from=at(2023, 10, 12), dedup="none"),
        AddRequest(type="fact", content=content, valid_from=at(2023, 5, 2), dedup="none"),
    )

    assert await order(ns, off, "What happened to the offsite in October 2023?") == [may, october]
    assert await order(ns, on, "What happened to the offsite in October 2023?") == [october, may]
    # On by default.
    default = with_weights(in_process, clock)
    assert await order(ns, default, "the offsite in October 2023") == [october, may]
    # A month alone matches it in any year; a time neither fits changes nothing.
    assert await order(ns, on, "the offsite in May") == [may, october]
    assert await order(ns, on, "the offsite in 2019") == [may, october]


async def test_signals_keep_superseded_memories_out(in_process, ns: str) -> None:
    clock = Clock()
    on = with_weights(in_process, clock, names=0.2, times=0.2)
    old = await writes.add(
        ns,
        AddRequest(type="fact", content="Dana's team lead is Ann", related_people=["Dana"]),
        on,
    )
    new = await writes.add(
        ns,
        AddRequest(
            type="fact",
            content="Dana's team lead is Bo",
            related_people=["Dana"],
            supersedes=[old.id],
        ),
        on,
    )

    assert await order(ns, on, "Who is Dana's team lead?") == [new.id]
    req = SearchRequest(query="Who is Dana's team lead?", include_superseded=True)
    assert {r.id for r in (await search_ops.search(ns, req, on)).results} == {old.id, new.id}


def test_by_default_times_count_and_names_do_not() -> None:
    assert (RankWeights().names, RankWeights().times) == (0.0, 0.2)


async def test_a_date_past_the_calendar_searches_as_a_query_naming_no_time(
    in_process, ns: str
) -> None:
    # "after 9999-12-31" raised OverflowError in the time parsing: an internal error reply.
    clock = Clock()
    deps = with_weights(in_process, clock, times=0.2)
    added = await writes.add(ns, AddRequest(type="knowledge", content="the launch date"), deps)
    for query in ("launch after 9999-12-31", "launch 3000 years ago", "launch on 0000-01-01"):
        assert await order(ns, deps, query) == [added.id]
