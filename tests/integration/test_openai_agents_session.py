"""`bus.integrations.openai_agents.MemoryBusSession` with the OpenAI Agents SDK's own types
and runner (a stand-in model: no model is reachable here), against real NATS, Redis Stack
and handlers."""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from bus import MemoryBus, TooLarge
from bus.integrations.openai_agents import MARKER, MemoryBusSession, session_tag
from contracts import Memory

# Through NATS to the two handler processes (consecutive requests land on either), and in
# this process (tracebacks).
pytestmark = pytest.mark.transports("in_process", "nats")


async def stored(bus: MemoryBus, tag: str = MARKER, workflow_id: str | None = None) -> list[Memory]:
    reply = await bus.agent(workflow_id=workflow_id).list(tags=[tag], limit=200)
    return reply.memories


def user(text: str) -> TResponseInputItem:
    return {"role": "user", "content": text}


CONVERSATION: list[TResponseInputItem] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": 'What\'s the weather in Paris? Ünïcode ✓ "quoted"\n'},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18°C, light rain"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "The tool answered."}],
    },
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "18°C and rain in Paris.", "annotations": []},
        ],
    },
    {"role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]},
]


async def test_items_come_back_exactly_and_in_order(bus: MemoryBus) -> None:
    session = MemoryBusSession("chat-1", bus)

    await session.add_items(CONVERSATION)

    assert await session.get_items() == CONVERSATION
    assert await MemoryBusSession("chat-1", bus).get_items() == CONVERSATION  # a new reader


async def test_order_is_exact_within_one_call_and_across_calls_and_handlers(
    bus: MemoryBus,
) -> None:
    session = MemoryBusSession("long", bus)
    first = [user(f"message {n}") for n in range(120)]  # more than one `apply` holds

    await session.add_items(first)
    later = []
    for n in range(30):
        batch = [user(f"later {n}.{k}") for k in range(n % 3 + 1)]
        later.extend(batch)
        await session.add_items(batch)

    assert await session.get_items() == first + later
    assert len(await stored(bus)) == 150 + sum(n % 3 for n in range(30))


async def test_concurrent_calls_keep_the_order_they_were_made_in(bus: MemoryBus) -> None:
    # Sent at once, the writes reach the two handlers in no particular order and land
    # within the same milliseconds: neither their times nor their ids give this order.
    session = MemoryBusSession("burst", bus)
    calls = [[user(f"call {n}"), user(f"call {n}, second item")] for n in range(40)]

    await asyncio.gather(*(session.add_items(items) for items in calls))

    assert await session.get_items() == [item for items in calls for item in items]


async def test_writers_sharing_a_session_see_one_conversation_in_order(bus: MemoryBus) -> None:
    ana, bob = MemoryBusSession("shared", bus), MemoryBusSession("shared", bus)
    expected: list[TResponseInputItem] = []

    for n in range(6):
        writer = (ana, bob)[n % 2]
        await writer.get_items()  # as the Runner does before each turn
        item = user(f"turn {n} by {'ana' if writer is ana else 'bob'}")
        expected.append(item)
        await writer.add_items([item])

    assert await ana.get_items() == expected
    assert await bob.get_items() == expected


async def test_get_items_limit_returns_the_latest_in_order(bus: MemoryBus) -> None:
    items = [user(f"m{n}") for n in range(8)]
    session = MemoryBusSession("limits", bus, session_settings=SessionSettings(limit=3))
    await session.add_items(items)

    assert await session.get_items() == items[-3:]  # the settings' limit by default
    assert await session.get_items(limit=5) == items[-5:]
    assert await session.get_items(limit=50) == items
    assert await session.get_items(limit=0) == []
    assert await MemoryBusSession("limits", bus).get_items() == items
    as_dict = MemoryBusSession("limits", bus, session_settings={"limit": 2})
    assert await as_dict.get_items() == items[-2:]


async def test_pop_item_removes_the_latest_and_returns_it(bus: MemoryBus) -> None:
    session = MemoryBusSession("pops", bus)
    await session.add_items(CONVERSATION[:3])

    assert await session.pop_item() == CONVERSATION[2]
    assert await session.get_items() == CONVERSATION[:2]
    await session.add_items([CONVERSATION[5]])
    assert await session.pop_item() == CONVERSATION[5]
    assert await session.pop_item() == CONVERSATION[1]
    assert await session.pop_item() == CONVERSATION[0]
    assert await session.pop_item() is None
    assert await stored(bus) == []


async def test_concurrent_pops_each_take_a_different_item(bus: MemoryBus) -> None:
    items = [user(f"m{n}") for n in range(10)]
    await MemoryBusSession("race", bus).add_items(items)
    poppers = [MemoryBusSession("race", bus) for _ in range(2)]

    async def pop_five(session: MemoryBusSession) -> list[Any]:
        return [await session.pop_item() for _ in range(5)]

    popped = await asyncio.gather(*(pop_five(s) for s in poppers))

    taken = [item for items_ in popped for item in items_]
    assert sorted(i["content"] for i in taken) == sorted(i["content"] for i in items)
    for got in popped:  # each popper takes from the end: its items go newest to oldest
        order = [items.index(i) for i in got]
        assert order == sorted(order, reverse=True)
    assert await poppers[0].get_items() == []


async def test_clear_session_removes_every_item_of_that_session_only(bus: MemoryBus) -> None:
    mine, other = MemoryBusSession("mine", bus), MemoryBusSession("other", bus)
    await mine.add_items([user(f"m{n}") for n in range(250)])  # more than one page
    await other.add_items([user("keep me")])

    await mine.clear_session()

    assert await mine.get_items() == []
    assert await other.get_items() == [user("keep me")]
    assert await stored(bus, session_tag("mine")) == []
    await mine.clear_session()  # clearing an empty session is no error
    await mine.add_items([user("after")])
    assert await mine.get_items() == [user("after")]


async def test_the_conversation_is_searchable_by_any_agent(bus: MemoryBus) -> None:
    session = MemoryBusSession("chat-9", bus, workflow_id="wf_chat")
    await session.add_items(CONVERSATION)

    hits = await bus.agent(workflow_id="wf_chat", agent_id="observer").search("weather Paris")

    by_content = {h.content: h for h in hits.results}
    question = by_content['user: What\'s the weather in Paris? Ünïcode ✓ "quoted"\n']
    assert question.session_id == "chat-9"
    assert question.type == "event"
    assert question.workflow_id == "wf_chat"
    assert question.agent_id == "openai-agents"
    assert set(question.tags) == {MARKER, session_tag("chat-9")}
    assert 'function_call get_weather({"city": "Paris"})' in by_content
    assert "assistant: 18°C and rain in Paris." in by_content
    assert "function_call_output: 18°C, light rain" in by_content


async def test_a_workflow_session_is_not_the_same_session_elsewhere(bus: MemoryBus) -> None:
    await MemoryBusSession("s", bus, workflow_id="wf_a").add_items([user("in a")])

    assert await MemoryBusSession("s", bus, workflow_id="wf_b").get_items() == []
    assert await MemoryBusSession("s", bus).get_items() == []
    assert await MemoryBusSession("s", bus, workflow_id="wf_a").get_items() == [user("in a")]


async def test_any_session_id_works_and_only_tokens_are_recorded_on_memories(
    bus: MemoryBus,
) -> None:
    odd = MemoryBusSession("Ana López / chat #1", bus)
    await odd.add_items([user("hola")])

    assert await odd.get_items() == [user("hola")]
    assert await MemoryBusSession("ana lópez / chat #1", bus).get_items() == []
    [memory] = await stored(bus)
    assert memory.session_id is None
    assert memory.metadata["session"] == "Ana López / chat #1"


def _tool_output(size: int) -> str:
    rng = random.Random(3)
    return "".join(rng.choices(string.printable + "éü🚀", k=size))


async def test_a_long_tool_output_round_trips_over_several_memories(bus: MemoryBus) -> None:
    session = MemoryBusSession("big", bus)
    big: TResponseInputItem = {
        "type": "function_call_output",
        "call_id": "call_9",
        "output": _tool_output(60_000),
    }
    items = [user("read the log"), big, user("summarise it")]

    await session.add_items(items)

    assert await session.get_items() == items
    assert len(await stored(bus)) >= 2 + 8
    assert await session.get_items(limit=2) == items[1:]
    assert await session.pop_item() == items[2]
    assert await session.pop_item() == big
    assert [m.metadata["item"] for m in await stored(bus)] == [items[0]]


async def test_an_item_too_large_for_one_atomic_write_is_refused_before_writing(
    bus: MemoryBus,
) -> None:
    session = MemoryBusSession("huge", bus)
    huge: TResponseInputItem = {
        "type": "function_call_output",
        "call_id": "c",
        "output": "x" * 400_000,
    }

    with pytest.raises(TooLarge):
        await session.add_items([user("before"), huge])

    assert await session.get_items() == []


async def test_it_is_a_session_as_the_sdk_defines_one(bus: MemoryBus) -> None:
    session = MemoryBusSession("protocol", bus)

    assert isinstance(session, Session)
    assert session.session_id == "protocol"
    assert session.session_settings == SessionSettings()


async def test_it_answers_as_the_sdks_sqlite_session_does(bus: MemoryBus) -> None:
    ours, reference = MemoryBusSession("same", bus), SQLiteSession("same")
    script: list[tuple[str, Any]] = [
        ("add", CONVERSATION[:4]),
        ("get", None),
        ("get", 2),
        ("pop", None),
        ("add", [user("one"), user("two")]),
        ("get", 1),
        ("get", 10),
        ("pop", None),
        ("get", None),
        ("clear", None),
        ("pop", None),
        ("get", None),
        ("add", CONVERSATION[4:]),
        ("get", None),
    ]
    try:
        for op, arg in script:
            for session in (ours, reference):
                if op == "add":
                    await session.add_items(list(arg))
            if op == "get":
                assert await ours.get_items(arg) == await reference.get_items(arg), (op, arg)
            elif op == "pop":
                assert await ours.pop_item() == await reference.pop_item()
            elif op == "clear":
                await ours.clear_session()
                await reference.clear_session()
    finally:
        reference.close()


class StandInModel(Model):
    """A model that answers without a network: it says how many items it was given and
    what the first user message was, and keeps each input it saw."""

    def __init__(self) -> None:
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        given = kwargs.get("input", args[1] if len(args) > 1 else None)
        assert isinstance(given, list)
        self.inputs.append(list(given))
        first = next(i for i in given if i.get("role") == "user")
        text = f"{len(given)} items; you first said: {first['content']}"
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the stand-in model does not stream")


async def test_the_runner_keeps_and_replays_the_conversation_through_the_session(
    bus: MemoryBus,
) -> None:
    model = StandInModel()
    agent = Agent(name="assistant", instructions="Answer briefly.", model=model)
    config = RunConfig(tracing_disabled=True)
    session = MemoryBusSession("runner", bus, workflow_id="wf_run")

    first = await Runner.run(agent, "My name is Ana", session=session, run_config=config)
    second = await Runner.run(agent, "What is my name?", session=session, run_config=config)

    assert first.final_output == "1 items; you first said: My name is Ana"
    assert second.final_output == "3 items; you first said: My name is Ana"
    assert model.inputs[1][0] == {"role": "user", "content": "My name is Ana"}
    history = await MemoryBusSession("runner", bus, workflow_id="wf_run").get_items()
    assert [i.get("role") for i in history] == ["user", "assistant", "user", "assistant"]
    assert history[0] == {"role": "user", "content": "My name is Ana"}
    assert history[2] == {"role": "user", "content": "What is my name?"}
    assert history[3]["content"][0]["text"] == second.final_output  # type: ignore[index,typeddict-item]
