"""`bus.integrations.langgraph.MemoryBusStore` through LangGraph's own store interface, and a
LangGraph graph whose nodes use it, against real NATS, Redis Stack and handlers."""

from __future__ import annotations

import asyncio
import random
import string
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from bus import MemoryBus, TooLarge
from bus.client import AgentMemory
from bus.errors import Conflict
from bus.integrations import langgraph
from bus.integrations.langgraph import MARKER, PART_TAG, MemoryBusStore, key_tag
from contracts import Memory

# Every test through NATS to the handler processes, and in this process (tracebacks).
pytestmark = pytest.mark.transports("in_process", "nats")


@pytest.fixture
async def store(bus: MemoryBus) -> MemoryBusStore:
    return MemoryBusStore(bus)  # made on the bus's loop, as an application would


async def stored(bus: MemoryBus, tag: str = MARKER) -> list[Memory]:
    """The memories that carry `tag`, as any agent of the namespace sees them."""
    reply = await bus.agent().list(tags=[tag], limit=200, scope="both")
    return reply.memories


VALUE = {
    "text": "The user prefers dark mode in every editor",
    "score": 4.5,
    "count": 3,
    "ok": True,
    "none": None,
    "tags": ["ui", "Ünïcode ✓", {"nested": [1, 2.25, "x"]}],
    "quote": 'say "hi"\n\tand \\ leave',
}


async def test_put_then_get_returns_the_value_key_and_namespace_exactly(
    store: MemoryBusStore,
) -> None:
    ns = ("Users", "ÜBER user", "memories")
    key = "Key/With Spaces & Ünïcode 🚀"
    before = datetime.now(UTC)

    await store.aput(ns, key, VALUE)
    item = await store.aget(ns, key)

    assert item is not None
    assert item.value == VALUE
    assert item.key == key
    assert item.namespace == ns
    assert before - timedelta(seconds=5) <= item.created_at <= datetime.now(UTC)
    assert item.updated_at == item.created_at
    assert await store.aget(ns, "other key") is None
    assert await store.aget(("users", "über user", "memories"), key) is None  # case counts


async def test_a_secret_in_a_value_is_stored_redacted(store: MemoryBusStore) -> None:
    # The bus scans every string of metadata, where the store keeps values (MEMBUS_SECRETS,
    # redact by default): the rest of the value comes back exactly.
    key = "sk-" + "proj-" + "Zq8xLm2Pv7Rt4Wn9Yb3Kc6Hd1Jf5Gs0AeU"
    await store.aput(("cfg",), "openai", {"key": key, "model": "small", "n": 2})
    item = await store.aget(("cfg",), "openai")
    assert item is not None
    assert item.value == {"key": "[redacted:api_key]", "model": "small", "n": 2}


async def test_a_second_put_replaces_the_value_keeps_created_at_and_leaves_one_memory(
    bus: MemoryBus, store: MemoryBusStore
) -> None:
    ns = ("users", "u1", "memories")
    await store.aput(ns, "k", {"text": "first"})
    first = await store.aget(ns, "k")
    await asyncio.sleep(0.01)  # the second write's time must differ from the first's

    await store.aput(ns, "k", {"text": "second"})
    second = await store.aget(ns, "k")

    assert first is not None and second is not None
    assert second.value == {"text": "second"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    memories = await stored(bus)
    assert [m.content for m in memories] == ["text: second"]


async def test_delete_removes_the_item_from_get_search_and_the_bus(
    bus: MemoryBus, store: MemoryBusStore
) -> None:
    await store.aput(("docs",), "a", {"text": "alpha document"})
    await store.aput(("docs",), "b", {"text": "beta document"})

    await store.adelete(("docs",), "a")

    assert await store.aget(("docs",), "a") is None
    assert [i.key for i in await store.asearch(("docs",))] == ["b"]
    assert [i.key for i in await store.asearch(("docs",), query="alpha document")] == ["b"]
    assert [m.content for m in await stored(bus)] == ["text: beta document"]
    await store.adelete(("docs",), "never there")  # deleting nothing is no error


async def test_prefix_search_finds_every_deeper_namespace_and_no_sibling(
    store: MemoryBusStore,
) -> None:
    await store.aput(("users", "u1", "memories"), "m", {"text": "coffee, dark roast"})
    await store.aput(("users", "u1", "prefs", "ui"), "p", {"text": "dark mode"})
    await store.aput(("users", "u1"), "top", {"text": "profile"})
    await store.aput(("users", "u10", "memories"), "m", {"text": "tea"})
    await store.aput(("users", "U1", "memories"), "m", {"text": "water"})
    await store.aput(("teams", "u1"), "t", {"text": "team"})

    def found(items: list[Any]) -> set[tuple[tuple[str, ...], str]]:
        return {(i.namespace, i.key) for i in items}

    u1 = {
        (("users", "u1", "memories"), "m"),
        (("users", "u1", "prefs", "ui"), "p"),
        (("users", "u1"), "top"),
    }
    assert found(await store.asearch(("users", "u1"))) == u1
    assert found(await store.asearch(("users", "u1"), query="dark")) >= {
        (("users", "u1", "memories"), "m"),
        (("users", "u1", "prefs", "ui"), "p"),
    }
    assert found(await store.asearch(("users", "u1"), query="dark")) <= u1
    assert found(await store.asearch(("users", "u1", "prefs"))) == {
        (("users", "u1", "prefs", "ui"), "p")
    }
    assert len(await store.asearch(("users",), limit=50)) == 5
    assert len(await store.asearch((), limit=50)) == 6
    assert await store.asearch(("nobody",)) == []


async def test_a_query_ranks_the_matching_item_first_with_the_bus_score(
    store: MemoryBusStore,
) -> None:
    ns = ("users", "u1", "memories")
    await store.aput(ns, "editor", {"text": "The user prefers dark mode in the editor"})
    await store.aput(ns, "food", {"text": "The user is allergic to peanuts"})
    await store.aput(ns, "travel", {"text": "Next trip: Lisbon in March"})

    hits = await store.asearch(("users", "u1"), query="which editor mode does the user prefer?")

    assert hits[0].key == "editor"
    assert all(isinstance(h.score, float) for h in hits)
    assert hits[0].score is not None and hits[-1].score is not None
    assert hits[0].score > hits[-1].score
    assert hits[0].value == {"text": "The user prefers dark mode in the editor"}


async def test_search_filters_by_value_with_and_without_a_query(store: MemoryBusStore) -> None:
    ns = ("shop", "products")
    rows = [
        ("p1", {"name": "red mug", "color": "red", "price": 5, "meta": {"size": "s"}}),
        ("p2", {"name": "red shirt", "color": "red", "price": 25, "meta": {"size": "m"}}),
        ("p3", {"name": "blue mug", "color": "blue", "price": 7, "meta": {"size": "s"}}),
        ("p4", {"name": "blue shirt", "color": "blue", "price": 30, "meta": {"size": "l"}}),
    ]
    for key, value in rows:
        await store.aput(ns, key, value)

    async def keys(**kwargs: Any) -> list[str]:
        return sorted(i.key for i in await store.asearch(("shop",), **kwargs))

    assert await keys(filter={"color": "red"}) == ["p1", "p2"]
    assert await keys(filter={"price": {"$gt": 6, "$lte": 25}}) == ["p2", "p3"]
    assert await keys(filter={"color": {"$ne": "red"}, "price": {"$lt": 10}}) == ["p3"]
    assert await keys(filter={"meta": {"size": "s"}}) == ["p1", "p3"]
    assert await keys(filter={"missing": {"$gt": 1}}) == []
    # A query ranks every item it is given (the bus's search has no relevance floor).
    ranked = await store.asearch(("shop",), query="mug", filter={"color": "blue"})
    assert [i.key for i in ranked] == ["p3", "p4"]
    assert await keys(query="shirt", filter={"price": {"$gte": 25}}) == ["p2", "p4"]
    assert await keys(query="shirt", filter={"price": {"$gte": 25}}, limit=1, offset=1) in (
        ["p2"],
        ["p4"],
    )


async def test_search_without_a_query_pages_newest_first(store: MemoryBusStore) -> None:
    for n in range(7):
        await store.aput(("log",), f"k{n}", {"n": n})
        await asyncio.sleep(0.002)  # the bus orders by write time, in milliseconds

    first = await store.asearch(("log",), limit=3)
    second = await store.asearch(("log",), limit=3, offset=3)
    rest = await store.asearch(("log",), limit=3, offset=6)
    filtered = await store.asearch(("log",), filter={"n": {"$gte": 2}}, limit=2, offset=1)

    assert [i.key for i in first] == ["k6", "k5", "k4"]
    assert [i.key for i in second] == ["k3", "k2", "k1"]
    assert [i.key for i in rest] == ["k0"]
    assert [i.key for i in filtered] == ["k5", "k4"]
    assert all(i.score is None for i in first)


NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]
QUERIES: list[dict[str, Any]] = [
    {},
    {"prefix": ("a",)},
    {"prefix": ("a", "b")},
    {"prefix": ("a", "b"), "max_depth": 3},
    {"prefix": ("a", "*", "f")},
    {"suffix": ("f",)},
    {"prefix": ("a",), "suffix": ("f",)},
    {"max_depth": 1},
    {"max_depth": 2, "limit": 3, "offset": 1},
    {"prefix": ("users",)},
    {"suffix": ("*", "789")},
    {"prefix": ("nothing",)},
    {"limit": 2},
    {"offset": 7},
]


async def test_list_namespaces_answers_as_langgraphs_in_memory_store(
    store: MemoryBusStore,
) -> None:
    reference = InMemoryStore()
    for i, ns in enumerate(NAMESPACES):
        for key in ("x", "y"):
            await store.aput(ns, key, {"i": i})
            await reference.aput(ns, key, {"i": i})

    for query in QUERIES:
        ours = await store.alist_namespaces(**query)
        assert ours == await reference.alist_namespaces(**query), query
    assert len(await store.alist_namespaces()) == len(NAMESPACES)

    await store.adelete(("users", "123"), "x")
    await store.adelete(("users", "123"), "y")
    assert await store.alist_namespaces(prefix=("users",)) == [("users", "456", "settings")]


async def test_one_batch_runs_every_kind_of_op_reads_before_puts(store: MemoryBusStore) -> None:
    await store.aput(("a", "b"), "old", {"v": 1})

    results = await store.abatch(
        [
            PutOp(("a", "b"), "new", {"v": 2}),
            GetOp(("a", "b"), "new"),
            GetOp(("a", "b"), "old"),
            SearchOp(("a",)),
            ListNamespacesOp(),
            PutOp(("a", "b"), "new", {"v": 3}),
            PutOp(("a", "b"), "old", None),
        ]
    )

    assert results[0] is None and results[5] is None and results[6] is None
    assert results[1] is None  # the batch's own put comes after its reads
    assert results[2] is not None and results[2].value == {"v": 1}
    assert [i.key for i in results[3]] == ["old"]
    assert results[4] == [("a", "b")]
    after = await store.aget(("a", "b"), "new")
    assert after is not None and after.value == {"v": 3}  # the last put of a key wins
    assert await store.aget(("a", "b"), "old") is None


def _big_value(size: int) -> dict[str, Any]:
    rng = random.Random(7)
    words = ["".join(rng.choices(string.ascii_letters + 'é"\\\n🚀 ', k=12)) for _ in range(64)]
    deep: dict[str, Any] = {"leaf": "bottom"}
    for level in range(12):  # deeper than the 8 levels metadata keeps as an object
        deep = {f"level{level}": deep}
    return {
        "text": "A long report about quarterly revenue",
        "deep": deep,
        "body": [rng.choice(words) for _ in range(size // 13)],
    }


async def test_a_value_over_the_metadata_limit_round_trips_over_several_memories(
    bus: MemoryBus, store: MemoryBusStore
) -> None:
    ns = ("reports", "q3")
    value = _big_value(60_000)

    await store.aput(ns, "big", value)

    item = await store.aget(ns, "big")
    assert item is not None and item.value == value
    parts = await stored(bus, PART_TAG)
    assert len(parts) >= 7  # 60 KB of JSON at under 8 KiB a memory
    [hit] = await store.asearch(("reports",), query="quarterly revenue report")
    assert hit.key == "big" and hit.value == value
    [listed] = await store.asearch(("reports",))
    assert listed.value == value
    assert await store.alist_namespaces() == [ns]

    await store.aput(ns, "big", {"text": "small now"})
    assert await stored(bus, PART_TAG) == []
    small = await store.aget(ns, "big")
    assert small is not None and small.value == {"text": "small now"}
    assert small.created_at == item.created_at

    await store.aput(ns, "big", value)
    await store.adelete(ns, "big")
    assert await stored(bus, PART_TAG) == []
    assert await stored(bus) == []


async def test_a_value_too_large_for_one_atomic_write_is_refused_before_writing(
    bus: MemoryBus, store: MemoryBusStore
) -> None:
    with pytest.raises(TooLarge) as refused:
        await store.aput(("x",), "huge", {"blob": "z" * 400_000})

    assert "KiB of JSON" in refused.value.message
    assert await stored(bus) == [] and await stored(bus, PART_TAG) == []


async def test_items_are_memories_any_agent_can_search(
    bus: MemoryBus, store: MemoryBusStore
) -> None:
    await store.aput(("users", "u1", "memories"), "m1", {"text": "The user likes oolong tea"})

    hits = await bus.agent(workflow_id="wf_other").search("oolong tea")

    [hit] = hits.results
    assert hit.type == "knowledge"
    assert hit.content == "text: The user likes oolong tea"
    assert hit.agent_id == "langgraph"
    assert MARKER in hit.tags
    assert hit.metadata["key"] == "m1"
    assert hit.metadata["namespace"] == ["users", "u1", "memories"]
    assert hit.metadata["value"] == {"text": "The user likes oolong tea"}


async def test_index_fields_choose_what_is_embedded_and_searched(bus: MemoryBus) -> None:
    store = MemoryBusStore(bus, fields=["title", "tags[*]"])
    value = {"title": "Quarterly plan", "tags": ["budget", "hiring"], "body": "zebra giraffe"}

    await store.aput(("notes",), "plan", value)
    await store.aput(("notes",), "body", {"body": "zebra giraffe"}, index=["body"])
    await store.aput(("notes",), "hidden", {"title": "zebra secret"}, index=False)

    contents = {m.metadata["key"]: m.content for m in await stored(bus)}
    assert contents == {
        "plan": "Quarterly plan\nbudget\nhiring",
        "body": "zebra giraffe",
        "hidden": "notes/hidden",
    }
    hits = await store.asearch(("notes",), query="zebra giraffe")
    assert hits[0].key == "body"
    item = await store.aget(("notes",), "plan")
    assert item is not None and item.value == value


async def test_a_workflow_store_is_seen_only_from_that_workflow(bus: MemoryBus) -> None:
    in_a = MemoryBusStore(bus, workflow_id="wf_a")
    in_b = MemoryBusStore(bus, workflow_id="wf_b")
    general = MemoryBusStore(bus)

    await in_a.aput(("users", "u1"), "k", {"text": "only in workflow a"})

    item = await in_a.aget(("users", "u1"), "k")
    assert item is not None and item.value == {"text": "only in workflow a"}
    assert await in_b.aget(("users", "u1"), "k") is None
    assert await general.aget(("users", "u1"), "k") is None
    assert await in_b.asearch(("users",), query="workflow") == []
    assert await general.alist_namespaces() == []
    assert await stored(bus) == []  # not a general memory...
    listed = await bus.agent(workflow_id="wf_a").list(tags=[MARKER], scope="workflow")
    assert [m.workflow_id for m in listed.memories] == ["wf_a"]  # ...one of workflow wf_a

    # The bus's key index is per namespace, not per workflow: the workflow is in the name.
    await in_b.aput(("users", "u1"), "k", {"text": "only in workflow b"})
    await general.aput(("users", "u1"), "k", {"text": "general"})
    for store, text in ((in_a, "a"), (in_b, "b"), (general, "l")):
        item = await store.aget(("users", "u1"), "k")
        assert item is not None and item.value["text"].endswith(text)


async def test_ttl_becomes_the_memorys_idle_or_fixed_lifetime(bus: MemoryBus) -> None:
    refreshing = MemoryBusStore(bus)
    fixed = MemoryBusStore(bus, ttl={"refresh_on_read": False, "default_ttl": 2})

    await refreshing.aput(("t",), "idle", {"v": 1}, ttl=1.5)
    await fixed.aput(("t",), "fixed", {"v": 2})
    await refreshing.aput(("t",), "forever", {"v": 3})

    by_key = {m.metadata["key"]: m for m in await stored(bus)}
    assert by_key["idle"].idle_ttl_s == 90
    assert by_key["fixed"].idle_ttl_s is None
    expires = by_key["fixed"].expires_at
    assert expires is not None
    assert timedelta(seconds=110) < expires - datetime.now(UTC) <= timedelta(seconds=120)
    assert by_key["forever"].expires_at is None and by_key["forever"].idle_ttl_s is None


async def test_concurrent_puts_of_one_key_leave_one_memory(bus: MemoryBus) -> None:
    one, other = MemoryBusStore(bus), MemoryBusStore(bus)
    await one.aput(("race",), "k", {"v": 0})

    for round_ in range(5):
        await asyncio.gather(
            one.aput(("race",), "k", {"v": f"one-{round_}"}),
            other.aput(("race",), "k", {"v": f"other-{round_}"}),
        )

    memories = await stored(bus)
    assert len(memories) == 1
    item = await one.aget(("race",), "k")
    assert item is not None and item.value in ({"v": "one-4"}, {"v": "other-4"})


async def test_concurrent_first_puts_of_one_key_leave_one_item(bus: MemoryBus) -> None:
    stores = [MemoryBusStore(bus) for _ in range(12)]  # as many agents' stores

    await asyncio.gather(
        *(s.aput(("race", "first"), "k", {"writer": n}) for n, s in enumerate(stores))
    )

    memories = await stored(bus, key_tag(("race", "first"), "k"))
    assert len(memories) == 1
    assert memories[0].version == 12  # created once, then replaced by each other put
    item = await stores[0].aget(("race", "first"), "k")
    assert item is not None and item.value == memories[0].metadata["value"]
    assert item.value["writer"] in range(12)
    assert len(await stores[0].asearch(("race",))) == 1


async def _settled(bus: MemoryBus, store: MemoryBusStore, ns: tuple[str, ...], key: str) -> Any:
    """The key's value, after checking that its memories are its head and exactly the parts
    of the head's version."""
    memories = await stored(bus, key_tag(ns, key))
    heads = [m for m in memories if MARKER in m.tags]
    parts = [m for m in memories if PART_TAG in m.tags]
    item = await store.aget(ns, key)
    if item is None:
        assert memories == []
        return None
    [head] = heads
    assert {p.metadata["version"] for p in parts} <= {head.metadata["version"]}
    assert len(parts) == head.metadata.get("parts", 1) - 1
    return item.value


async def test_concurrent_large_and_small_puts_settle_on_one_whole_value(bus: MemoryBus) -> None:
    ns = ("race", "sizes")
    big, small = _big_value(30_000), {"text": "small"}
    writers = [MemoryBusStore(bus) for _ in range(4)]
    reader = MemoryBusStore(bus)
    await reader.aput(ns, "k", big)
    seen: list[Any] = []

    async def read_while_writing(stop: asyncio.Event) -> None:
        while not stop.is_set():
            item = await reader.aget(ns, "k")
            seen.append(item.value if item is not None else None)

    for round_ in range(4):
        stop = asyncio.Event()
        reading = asyncio.create_task(read_while_writing(stop))
        await asyncio.gather(
            *(w.aput(ns, "k", big if (n + round_) % 2 else small) for n, w in enumerate(writers))
        )
        stop.set()
        await reading
        assert await _settled(bus, reader, ns, "k") in (big, small)

    # A key replaced in place is never missing, and a read never mixes two writes.
    assert seen and all(value in (big, small) for value in seen)


async def test_a_delete_racing_a_put_ends_with_the_item_whole_or_gone(bus: MemoryBus) -> None:
    ns = ("race", "delete")
    deleter, writer = MemoryBusStore(bus), MemoryBusStore(bus)
    big = _big_value(30_000)
    outcomes = set()

    for round_ in range(6):
        await writer.aput(ns, "k", big if round_ % 2 else {"v": "before"})
        new = {"v": f"after-{round_}"} if round_ % 3 else big
        await asyncio.gather(deleter.adelete(ns, "k"), writer.aput(ns, "k", new))
        value = await _settled(bus, writer, ns, "k")
        assert value in (None, new)
        outcomes.add(value is None)

    await deleter.adelete(ns, "k")
    assert await stored(bus, key_tag(ns, "k")) == [] and outcomes


async def test_get_reads_heads_by_key_a_hundred_a_request(
    bus: MemoryBus, store: MemoryBusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = ("many",)
    await store.abatch([PutOp(ns, f"k{n}", {"n": n}) for n in range(150)])
    asked: list[list[str]] = []
    get = AgentMemory.get

    async def counted(self: AgentMemory, ids: Any = None, *, keys: Any = None) -> Any:
        asked.append(list(keys or []))
        return await get(self, ids, keys=keys)

    monkeypatch.setattr(AgentMemory, "get", counted)

    items = await store.abatch([GetOp(ns, f"k{n}") for n in range(150)] + [GetOp(ns, "none")])

    assert [len(keys) for keys in asked] == [100, 51]
    assert [i.value for i in items[:150]] == [{"n": n} for n in range(150)]  # type: ignore[union-attr]
    assert items[150] is None
    assert len(await stored(bus)) == 150


async def test_orphan_parts_are_swept_by_a_later_put_once_old_enough(
    bus: MemoryBus, store: MemoryBusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, big = ("orphans",), _big_value(30_000)
    # A put that died after writing its parts: parts that no head names.
    dead = store._prepare(PutOp(ns, "k", big))
    await store.memory.apply(store._part_actions(dead))
    orphans = len(await stored(bus, PART_TAG))
    assert orphans == len(dead.metadatas) - 1 > 1

    await store.aput(ns, "k", big)  # young parts may be a running put's: kept
    assert len(await stored(bus, PART_TAG)) == 2 * orphans
    assert await store.aget(ns, "k") is not None

    monkeypatch.setattr(langgraph, "_ORPHAN_AGE", timedelta(0))
    await store.aput(ns, "k", big)
    assert await _settled(bus, store, ns, "k") == big
    assert len(await stored(bus, PART_TAG)) == orphans  # only the head's own


async def test_a_put_too_slow_to_name_its_parts_gives_up_and_leaves_nothing(
    bus: MemoryBus, store: MemoryBusStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(langgraph, "_HEAD_WINDOW_S", -1.0)

    with pytest.raises(Conflict, match="retry"):
        await store.aput(("slow",), "k", _big_value(30_000))

    assert await stored(bus) == [] and await stored(bus, PART_TAG) == []
    await store.aput(("slow",), "k", {"small": "values have no parts"})
    assert await store.aget(("slow",), "k") is not None


async def test_namespaces_langgraph_refuses_are_refused(store: MemoryBusStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        await store.aput(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([PutOp(("langgraph", "x"), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([PutOp(tuple(f"l{i}" for i in range(31)), "k", {"v": 1})])
    deepest = tuple(f"l{i}" for i in range(30))
    await store.aput(deepest, "k", {"v": 1})
    assert [i.namespace for i in await store.asearch(deepest[:29])] == [deepest]


async def test_the_sync_interface_works_from_a_thread(store: MemoryBusStore) -> None:
    ns = ("users", "sync")

    def session() -> tuple[Any, ...]:
        store.put(ns, "k", {"text": "written without a loop"})
        got = store.get(ns, "k")
        hits = store.search(("users",), query="loop")
        names = store.list_namespaces(prefix=("users",))
        store.delete(ns, "k")
        return got, hits, names, store.get(ns, "k")

    got, hits, names, gone = await asyncio.to_thread(session)

    assert got is not None and got.value == {"text": "written without a loop"}
    assert [h.key for h in hits] == ["k"]
    assert names == [ns]
    assert gone is None


async def test_a_store_made_outside_the_loop_is_given_it(bus: MemoryBus) -> None:
    loop = asyncio.get_running_loop()

    def outside() -> Any:
        store = MemoryBusStore(bus, loop=loop)  # no loop runs in this thread
        store.put(("o",), "k", {"v": "made outside"})
        return store.get(("o",), "k")

    item = await asyncio.to_thread(outside)

    assert item is not None and item.value == {"v": "made outside"}


async def test_a_sync_call_on_the_bus_loop_raises_instead_of_blocking_it(
    store: MemoryBusStore,
) -> None:
    with pytest.raises(asyncio.InvalidStateError, match="aput"):
        store.put(("x",), "k", {"v": 1})
    assert await store.aget(("x",), "k") is None


class GraphState(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]


async def test_a_graph_node_writes_and_reads_memories_through_the_injected_store(
    store: MemoryBusStore, bus: MemoryBus
) -> None:
    async def remember(state: GraphState, *, store: BaseStore) -> GraphState:
        user = state["user"]
        hits = await store.asearch(("users", user), query=state["message"], limit=3)
        await store.aput(("users", user, "memories"), uuid.uuid4().hex, {"text": state["message"]})
        return {"recalled": [h.value["text"] for h in hits]}

    builder = StateGraph(GraphState)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(store=store)

    first = await graph.ainvoke({"user": "ana", "message": "I drink dark roast coffee"})
    await graph.ainvoke({"user": "bob", "message": "I drink green tea"})
    second = await graph.ainvoke({"user": "ana", "message": "which coffee do I drink?"})

    assert first["recalled"] == []
    assert second["recalled"] == ["I drink dark roast coffee"]  # bob's is another namespace
    names = await store.alist_namespaces(prefix=("users",))
    assert names == [("users", "ana", "memories"), ("users", "bob", "memories")]
    assert len(await stored(bus)) == 3


async def test_a_sync_graph_run_from_a_thread_uses_the_sync_store(store: MemoryBusStore) -> None:
    def count_visits(state: GraphState, *, store: BaseStore) -> GraphState:
        ns = ("visits", state["user"])
        seen = store.get(ns, "counter")
        visits = (seen.value["n"] if seen else 0) + 1
        store.put(ns, "counter", {"n": visits, "last": state["message"]})
        return {"recalled": [str(visits)]}

    builder = StateGraph(GraphState)
    builder.add_node("count", count_visits)
    builder.add_edge(START, "count")
    graph = builder.compile(store=store)

    for message in ("hello", "again", "bye"):
        out = await asyncio.to_thread(graph.invoke, {"user": "cy", "message": message})

    assert out["recalled"] == ["3"]
    item = await store.aget(("visits", "cy"), "counter")
    assert item is not None and item.value == {"n": 3, "last": "bye"}
