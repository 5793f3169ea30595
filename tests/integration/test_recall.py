"""`recall` (PROTOCOL v2): pre-turn injection with two paths, two dedup filters, and a
session state in Redis that any handler can serve."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import redis.asyncio as aioredis
from inprocess import InProcess

from bus import AgentMemory, InvalidRequest, MemoryBus
from contracts import limits
from handlers.store import layout
from handlers.store.sessions import session_key


@pytest.fixture
def agent(bus: MemoryBus) -> AgentMemory:
    return bus.agent(workflow_id="wf_1", agent_id="assistant", session_id="sess-1")


async def _facts(mem: AgentMemory, n: int, word: str = "kayak") -> list[str]:
    out = []
    for i in range(n):
        added = await mem.add("knowledge", f"{word} trip note {i} about river number {i * 7}")
        out.append(added.id)
    return out


async def test_the_second_turn_does_not_repeat_the_first(agent: AgentMemory) -> None:
    await _facts(agent, 12)

    first = await agent.recall("tell me about the kayak trip", limit=5, dedup_threshold=1.0)
    second = await agent.recall("tell me about the kayak trip", limit=5, dedup_threshold=1.0)

    assert (first.turn, second.turn) == (1, 2)
    assert len(first.results) == len(second.results) == 5
    assert not {r.id for r in first.results} & {r.id for r in second.results}
    assert second.left_out_recalled >= 5


async def test_a_memory_comes_back_once_the_window_has_passed(agent: AgentMemory) -> None:
    [only] = await _facts(agent, 1)

    turns = [await agent.recall("kayak trip", reinject_after=2) for _ in range(3)]

    assert [[r.id for r in t.results] for t in turns] == [[only], [], [only]]


async def test_a_memory_comes_back_every_window_and_never_in_two_turns_in_a_row(
    agent: AgentMemory,
) -> None:
    [only] = await _facts(agent, 1)

    turns = [await agent.recall("kayak trip", reinject_after=10) for _ in range(23)]

    given = [t.turn for t in turns if [r.id for r in t.results] == [only]]
    assert given == [1, 11, 21]


async def test_the_turn_count_stops_at_its_documented_maximum(agent: AgentMemory) -> None:
    last = await agent.recall("hello", turn=limits.MAX_TURN)
    assert last.turn == limits.MAX_TURN

    with pytest.raises(InvalidRequest, match="new session_id"):
        await agent.recall("hello")
    assert (await agent.recall("hello", turn=limits.MAX_TURN)).turn == limits.MAX_TURN


async def test_identity_comes_first_and_each_result_says_its_path(agent: AgentMemory) -> None:
    await agent.add("knowledge", "kayak trips need a dry bag", importance=0.1)
    ident = await agent.add("identity", "The user is Sam, a river guide")
    important = await agent.add("goal", "Plan the autumn kayak trip", importance=0.95)

    reply = await agent.recall("kayak", recent_s=0)
    by_id = {r.id: r.path for r in reply.results}

    assert reply.results[0].id == ident.id
    assert by_id[ident.id] == "identity"
    assert by_id[important.id] == "important"
    assert sorted(by_id.values()) == ["identity", "important", "semantic"]
    scores = [r.score for r in reply.results[1:]]
    assert scores == sorted(scores, reverse=True)


async def test_recent_memories_come_by_path_one_without_matching_the_message(
    agent: AgentMemory,
) -> None:
    fresh = await agent.add("knowledge", "the bus timetable changed", importance=0.1)

    reply = await agent.recall("what about lunch", min_importance=1.0)

    assert [(r.id, r.path) for r in reply.results] == [(fresh.id, "recent")]


async def test_near_duplicates_are_recalled_once(agent: AgentMemory) -> None:
    a = await agent.add("knowledge", "the kayak trip starts at dawn", dedup="none")
    b = await agent.add("knowledge", "the kayak trip starts at dawn!", dedup="none")

    first = await agent.recall("kayak trip dawn", recent_s=0)
    second = await agent.recall("kayak trip dawn", recent_s=0)

    [got] = first.results
    assert got.id in {a.id, b.id}
    assert first.left_out_similar == 1
    assert second.results == []  # the other one is too close to what turn 1 injected


async def test_limit_budget_and_block(agent: AgentMemory) -> None:
    await _facts(agent, 8)

    reply = await agent.recall("kayak trip", limit=3, dedup_threshold=1.0)
    budgeted = await agent.recall("kayak trip", max_tokens=12, dedup_threshold=1.0)

    assert len(reply.results) == 3
    assert reply.block.splitlines() == [f"knowledge: {r.content}" for r in reply.results]
    assert len(budgeted.results) == 1  # always at least one


async def test_a_system_message_recalls_nothing_and_is_not_a_turn(agent: AgentMemory) -> None:
    await _facts(agent, 2)
    first = await agent.recall("kayak")

    skipped = await agent.recall("tool output: 200 OK", source="system")
    after = await agent.recall("kayak", dedup_threshold=1.0)

    assert (skipped.skipped, skipped.turn, skipped.results, skipped.block) == (True, 1, [], "")
    assert (first.turn, after.turn) == (1, 2)


async def test_an_explicit_turn_is_used_and_the_count_goes_on_from_it(
    agent: AgentMemory,
) -> None:
    assert (await agent.recall("hello", turn=7)).turn == 7
    assert (await agent.recall("hello")).turn == 8


async def test_recall_leaves_out_superseded_memories_and_filters_by_people(
    agent: AgentMemory,
) -> None:
    old = await agent.add("decision", "Ana books the kayaks", related_people=["Ana"])
    new = await agent.add(
        "decision", "Bo books the kayaks", related_people=["Bo"], supersedes=[old.id]
    )
    van = await agent.add("decision", "Bo packs the van", related_people=["Bo"])

    ids = {r.id for r in (await agent.recall("who books the kayaks")).results}
    bo = await agent.bus.agent(workflow_id="wf_1", session_id="other").recall(
        "kayaks", people=["bo"], dedup_threshold=1.0
    )

    assert new.id in ids and old.id not in ids
    assert {r.id for r in bo.results} == {new.id, van.id}


async def test_sessions_are_separate(bus: MemoryBus, agent: AgentMemory) -> None:
    [only] = await _facts(agent, 1)
    other = bus.agent(workflow_id="wf_1", session_id="sess-2")

    assert [r.id for r in (await agent.recall("kayak")).results] == [only]
    assert [r.id for r in (await other.recall("kayak")).results] == [only]


async def test_the_session_state_lives_in_redis_with_a_sliding_ttl(
    agent: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    [only] = await _facts(agent, 1)
    await agent.recall("kayak")

    key = session_key(key_ns, "sess-1")
    state = await rds.hgetall(key)
    assert set(state) == {b"turn", only.encode()}
    assert state[b"turn"] == b"1"
    # The turn alone: later turns read the vectors they compare with from the memories.
    assert state[only.encode()] == b"1"
    assert 24 * 3600 - 60 < await rds.ttl(key) <= 24 * 3600


async def test_a_session_written_with_vectors_by_an_older_version_goes_on(
    agent: AgentMemory, rds: aioredis.Redis, key_ns: str, in_process: InProcess
) -> None:
    a = await agent.add("knowledge", "the kayak trip starts at dawn", dedup="none")
    b = await agent.add("knowledge", "the kayak trip starts at dawn!", dedup="none")
    # An older version kept `turn|<384 int8>` per memory given; the migration to layout 3
    # keeps the turn.
    key = session_key(key_ns, "sess-1")
    await rds.hset(key, mapping={"turn": 1, a.id: b"1|" + bytes(384)})
    await layout.ensure(in_process.deps.store, again=True)
    assert await rds.hget(key, a.id) == b"1"

    reply = await agent.recall("kayak trip dawn", recent_s=0)

    assert reply.turn == 2
    assert reply.results == [] and reply.left_out_recalled == 1  # a given, b too close to it
    assert reply.left_out_similar == 1
    assert await rds.hget(key, b.id) is None


async def test_recall_without_a_session_or_a_message_is_invalid(bus: MemoryBus) -> None:
    with pytest.raises(InvalidRequest, match="session"):
        await bus.agent().recall("hello")
    reply = msgspec.json.decode(
        (await bus.nc.request(f"mem.{bus.namespace}.recall", b'{"session_id": "s"}')).data
    )
    assert (reply["code"], "message" in reply["error"]) == ("invalid_request", True)


@pytest.mark.transports("nats")
async def test_concurrent_turns_through_two_handlers_never_inject_an_id_twice(
    agent: AgentMemory,
) -> None:
    await _facts(agent, 30)

    replies = await asyncio.gather(
        *(
            agent.recall("kayak trip river", limit=4, dedup_threshold=1.0, reinject_after=100)
            for _ in range(12)
        )
    )

    ids = [r.id for reply in replies for r in reply.results]
    assert len(ids) == len(set(ids)) == 30  # 12 turns x 4 > 30: each memory exactly once
    assert sorted(r.turn for r in replies) == list(range(1, 13))


async def test_a_burst_of_messages_is_recalled_as_one_text(agent: AgentMemory) -> None:
    [only] = await _facts(agent, 1)
    other = agent.bus.agent(workflow_id="wf_1", session_id="sess-burst")

    burst = await other.recall(["kayak", "trip", "please"])

    assert [r.id for r in burst.results] == [only]
    assert burst.turn == 1


async def test_what_does_not_fit_one_message_is_left_for_a_later_turn(
    agent: AgentMemory,
) -> None:
    body = "river kayak " * (31 * 1024 // 12)
    for i in range(40):
        await agent.add("knowledge", f"{i} {body}", dedup="none")

    first = await agent.recall("river kayak", limit=50, dedup_threshold=1.0)
    second = await agent.recall("river kayak", limit=50, dedup_threshold=1.0)

    assert first.truncated is True and 0 < len(first.results) < 40
    assert len(first.block.splitlines()) == len(first.results)
    given = {r.id for r in first.results}
    assert second.results and not given & {r.id for r in second.results}
    assert second.left_out_recalled == len(given)


async def test_message_and_messages_together_are_refused(bus: MemoryBus) -> None:
    body = b'{"message": "a", "messages": ["b"], "session_id": "s"}'
    reply = msgspec.json.decode((await bus.nc.request(f"mem.{bus.namespace}.recall", body)).data)
    assert (reply["code"], "not both" in reply["error"]) == ("invalid_request", True)


async def test_a_zero_threshold_keeps_only_unrelated_memories(agent: AgentMemory) -> None:
    await agent.add("knowledge", "kayak trip one", dedup="none")
    await agent.add("knowledge", "kayak trip two", dedup="none")

    reply = await agent.recall("kayak trip", dedup_threshold=0.0)

    assert len(reply.results) == 1 and reply.left_out_similar == 1
