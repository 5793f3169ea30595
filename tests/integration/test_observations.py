"""Observation fields on the record (PROTOCOL v2, "More on the record"): title, facts,
narrative, related files and people; composed content; dedup on title plus facts; `people`."""

from __future__ import annotations

import msgspec
import pytest

from bus import AgentMemory, InvalidRequest, MemoryBus


async def test_an_observation_without_content_gets_it_composed(wf123: AgentMemory) -> None:
    added = await wf123.add(
        "observation",
        title="Deploy failed",
        narrative="The migration locked the users table.",
        facts=["migration 42 took 9 minutes", "rollback worked"],
        related_files=["db/migrations/42.sql"],
        related_people=["Ana Lima"],
    )

    [m] = (await wf123.get([added.id])).memories

    assert m.content == (
        "Deploy failed\n\nThe migration locked the users table.\n"
        "- migration 42 took 9 minutes\n- rollback worked"
    )
    assert m.title == "Deploy failed"
    assert m.narrative == "The migration locked the users table."
    assert m.facts == ["migration 42 took 9 minutes", "rollback worked"]
    assert m.related_files == ["db/migrations/42.sql"]
    assert m.related_people == ["Ana Lima"]


async def test_a_title_alone_is_the_whole_content(wf123: AgentMemory) -> None:
    added = await wf123.add("observation", title="Standup moved to 10:00")
    [m] = (await wf123.get([added.id])).memories
    assert m.content == "Standup moved to 10:00"
    assert (m.facts, m.narrative, m.related_people) == ([], None, [])


async def test_a_plain_memory_has_empty_observation_fields(wf123: AgentMemory) -> None:
    added = await wf123.add("knowledge", "plain")
    [m] = (await wf123.get([added.id])).memories
    assert (m.title, m.facts, m.narrative, m.related_files, m.related_people) == (
        None,
        [],
        None,
        [],
        [],
    )


async def test_add_without_content_or_title_is_invalid(wf123: AgentMemory) -> None:
    with pytest.raises(InvalidRequest, match="title"):
        await wf123.add("observation", facts=["a fact with no title"])


async def test_same_title_and_facts_is_a_repeat_whatever_the_narrative(
    wf123: AgentMemory,
) -> None:
    first = await wf123.add("observation", title="API is slow", facts=["p99 2s"], narrative="a")
    again = await wf123.add("observation", title="api  is SLOW", facts=["P99 2s"], narrative="b")
    other = await wf123.add("observation", title="API is slow", facts=["p99 3s"])
    listed = await wf123.add("observation", title="Two facts", facts=["a", "b"])
    reordered = await wf123.add("observation", title="two facts", facts=["B", "a"])

    assert again.duplicate_of == first.id
    assert again.mention_count == 2
    assert other.duplicate_of is None and other.id != first.id
    assert reordered.duplicate_of == listed.id  # the facts are a set


async def test_an_observation_never_repeats_plain_content_that_reads_the_same(
    wf123: AgentMemory,
) -> None:
    plain = await wf123.add("observation", "API is slow")
    titled = await wf123.add("observation", title="API is slow")
    assert titled.duplicate_of is None and titled.id != plain.id


async def test_the_people_filter_matches_any_name_case_insensitively(wf123: AgentMemory) -> None:
    ana = await wf123.add("decision", "use Postgres", related_people=["Ana Lima", "Bo"])
    smith = await wf123.add("decision", "use Postgres too", related_people=["Smith, John"])
    await wf123.add("decision", "use Postgres again")

    found = await wf123.search("postgres", people=["ana lima", "SMITH, JOHN"])
    listed = await wf123.list(people=["bo"])

    assert {r.id for r in found.results} == {ana.id, smith.id}
    assert [m.id for m in listed.memories] == [ana.id]
    assert listed.total == 1


@pytest.mark.parametrize(
    ("fields", "code", "hint"),
    [
        ({"title": "t", "narrative": "é" * 17_000}, "too_large", "narrative"),
        ({"title": "t", "narrative": "n" * 32_769}, "too_large", "narrative"),
        (
            {"title": "t", "facts": ["f" * 1000] * 32, "narrative": "n" * 1000},
            "too_large",
            "composed",
        ),
        ({"title": "t" * 257}, "invalid_request", "title"),
        ({"title": "t", "facts": ["f"] * 33}, "invalid_request", "facts"),
        ({"title": "t", "facts": [""]}, "invalid_request", "facts"),
        ({"title": "t", "related_people": ["p" * 129]}, "invalid_request", "related_people"),
        ({"title": "t", "related_files": ["f" * 513]}, "invalid_request", "related_files"),
    ],
)
async def test_observation_fields_over_their_limits_are_refused(
    bus: MemoryBus, fields: dict[str, object], code: str, hint: str
) -> None:
    body = msgspec.json.encode({"type": "observation", **fields})
    reply = msgspec.json.decode((await bus.nc.request(f"mem.{bus.namespace}.add", body)).data)

    assert (reply["success"], reply["code"]) == (False, code)
    assert hint in reply["error"]
    assert (await bus.agent().describe()).total == 0
