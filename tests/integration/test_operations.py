"""Every operation through the bus, against real NATS and Redis Stack."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
import structlog

from bus import AgentMemory, InvalidRequest, MemoryBus
from contracts import CompactListReply, Context, ListReply
from handlers.dispatch import dispatch
from handlers.store.placement import OWN_INDEX, index_name, pool_index_name, tier_key

# Every operation both ways: in this process, and through NATS to the handler processes.
pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def test_add_then_get_returns_every_field(wf123: AgentMemory) -> None:
    added = await wf123.add(
        "knowledge",
        "RediSearch supports vector KNN with pre-filters",
        tags=["Redis", "search", "redis"],
        importance=0.42,
        source="docs",
        metadata={"url": "https://example.invalid/doc", "pages": [1, 2]},
    )

    got = await wf123.get([added.id])

    assert got.missing == []
    [m] = got.memories
    assert m.id == added.id
    assert m.type == "knowledge"
    assert m.content == "RediSearch supports vector KNN with pre-filters"
    assert m.tags == ["redis", "search"]
    assert m.importance == pytest.approx(0.42)
    assert m.workflow_id is None
    assert m.agent_id == "researcher"
    assert m.source == "docs"
    assert m.metadata == {"url": "https://example.invalid/doc", "pages": [1, 2]}
    assert m.created_at == m.updated_at
    assert abs(m.created_at - datetime.now(UTC)) < timedelta(seconds=30)
    assert m.expires_at is None


async def test_add_defaults_importance_and_ttl_by_type(wf123: AgentMemory) -> None:
    pref = await wf123.add("user_pref", "likes tea")
    ctx = await wf123.add("context", "scratch")
    permanent = await wf123.add("context", "kept", ttl_s=0)

    assert pref.importance == pytest.approx(0.8)
    assert pref.expires_at is None
    assert ctx.importance == pytest.approx(0.3)
    assert ctx.expires_at is not None
    assert timedelta(days=6, hours=23) < ctx.expires_at - datetime.now(UTC) <= timedelta(days=7)
    assert permanent.expires_at is None


async def test_ids_sort_by_creation_time(wf123: AgentMemory) -> None:
    ids = [(await wf123.add("knowledge", f"fact {i}")).id for i in range(5)]
    assert ids == sorted(ids)


async def test_get_reports_missing_ids_and_keeps_request_order(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "alpha")
    b = await wf123.add("knowledge", "beta")

    got = await wf123.get([b.id, "01NOTAREALID", a.id])

    assert [m.id for m in got.memories] == [b.id, a.id]
    assert got.missing == ["01NOTAREALID"]


async def test_get_bumps_access_and_shows_values_before_its_own_access(
    wf123: AgentMemory,
) -> None:
    a = await wf123.add("knowledge", "accessed")

    first = (await wf123.get([a.id])).memories[0]
    second = (await wf123.get([a.id])).memories[0]

    assert first.access_count == 0
    assert first.last_accessed_at is None
    assert second.access_count == 1
    assert second.last_accessed_at is not None
    # A bump is no change.
    assert second.updated_at == first.updated_at


async def test_search_results_count_as_accesses(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "zebra crossing rules")

    await wf123.search("zebra crossing", limit=1)
    # Counted right after the reply (docs/protocol.md, "Access"): a read through the other
    # handler may come first, so wait for it, briefly, reading with `export`, which counts
    # no access itself (a get would).
    for _ in range(50):
        page = await wf123.bus.export_page(ids=[a.id])
        if page.memories[0].access_count:
            break
        await asyncio.sleep(0.02)
    assert page.memories[0].access_count == 1
    got = (await wf123.get([a.id])).memories[0]
    assert got.access_count == 1


async def test_list_is_newest_first_with_total_and_paging(wf123: AgentMemory) -> None:
    ids = [(await wf123.add("knowledge", f"item {i}")).id for i in range(5)]

    page1 = await wf123.list(limit=2)
    page2 = await wf123.list(limit=2, offset=2)

    assert isinstance(page1, ListReply)
    assert page1.total == 5
    assert page1.count == 2
    assert [m.id for m in page1.memories] == ids[::-1][:2]
    assert [m.id for m in page2.memories] == ids[::-1][2:4]


async def test_list_compact_gives_previews_only(wf123: AgentMemory) -> None:
    long = "x" * 150
    await wf123.add("knowledge", long, tags=["big"])

    reply = await wf123.list(mode="compact")

    assert isinstance(reply, CompactListReply)
    assert reply.mode == "compact"
    [item] = reply.memories
    assert item.preview == "x" * 100 + "..."
    assert item.tags == ["big"]
    assert not hasattr(item, "content")


async def test_list_filters_by_types_and_any_tag(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "a", tags=["red"])
    b = await wf123.add("user_pref", "b", tags=["blue"])
    await wf123.add("knowledge", "c", tags=["green"])

    by_type = await wf123.list(types=["user_pref"])
    by_tags = await wf123.list(tags=["RED", "blue"])

    assert [m.id for m in by_type.memories] == [b.id]
    assert {m.id for m in by_tags.memories} == {a.id, b.id}


async def test_describe_counts_without_content(wf123: AgentMemory, wf456: AgentMemory) -> None:
    await wf123.add("user_pref", "p", tags=["tone"])
    await wf123.add("decision", "d", tags=["db", "tone"])
    await wf123.add("context", "c")
    await wf456.add("decision", "elsewhere", tags=["hidden"])

    d = await wf123.describe()

    assert d.total == 3
    assert d.by_type == {"context": 1, "decision": 1, "user_pref": 1}
    assert d.tags == ["db", "tone"]
    assert d.scope == "both"
    assert d.workflow_id == "wf_123"
    assert d.workflow_count == 2
    assert d.general_count == 1
    assert d.oldest is not None and d.newest is not None and d.oldest <= d.newest
    assert d.embedder == "hash"
    assert d.dimension == 384


async def test_describe_of_an_empty_namespace(wf123: AgentMemory) -> None:
    d = await wf123.describe()
    assert (d.total, d.by_type, d.tags, d.oldest, d.newest) == (0, {}, [], None, None)


async def test_delete_removes_and_reports_missing(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "to delete")

    first = await wf123.delete([a.id, "01MISSING"])
    second = await wf123.delete([a.id])

    assert (first.deleted, first.missing) == (1, ["01MISSING"])
    assert (second.deleted, second.missing) == (0, [a.id])
    assert (await wf123.get([a.id])).missing == [a.id]
    assert (await wf123.describe()).total == 0


async def test_search_filters_types_tags_and_time(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "apples are red", tags=["fruit"])
    await asyncio.sleep(0.01)
    mid = datetime.now(UTC)
    await asyncio.sleep(0.01)
    b = await wf123.add("user_pref", "apples are tasty", tags=["taste"])

    assert [h.id for h in (await wf123.search("apples", types=["user_pref"])).results] == [b.id]
    assert [h.id for h in (await wf123.search("apples", tags=["fruit"])).results] == [a.id]
    assert [h.id for h in (await wf123.search("apples", since=mid)).results] == [b.id]
    assert [h.id for h in (await wf123.search("apples", until=mid)).results] == [a.id]


async def test_search_min_score_applies_to_the_final_score(wf123: AgentMemory) -> None:
    await wf123.add("knowledge", "completely unrelated words here")
    hits = await wf123.search("completely unrelated words here")
    top = hits.results[0].score

    above = await wf123.search("completely unrelated words here", min_score=top + 0.001)
    at = await wf123.search("completely unrelated words here", min_score=top - 0.001)

    assert above.results == []
    assert len(at.results) == 1


async def test_search_limit_caps_results(wf123: AgentMemory) -> None:
    for i in range(7):
        await wf123.add("knowledge", f"shared word number {i}")
    hits = await wf123.search("shared word", limit=3)
    assert len(hits.results) == 3


async def test_caller_embedding_must_match_namespace_dimension(wf123: AgentMemory) -> None:
    vec = [0.0] * 384
    vec[7] = 1.0
    added = await wf123.add("knowledge", "own vector", embedding=vec)
    hits = await wf123.search(embedding=vec, limit=1)
    assert hits.results[0].id == added.id
    assert hits.results[0].similarity == pytest.approx(1.0, abs=1e-5)

    with pytest.raises(InvalidRequest) as err:
        await wf123.search(embedding=[1.0, 0.0, 0.0])
    assert "384" in err.value.message


async def test_agent_handle_identity_is_fixed(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_x", agent_id="a1")
    with pytest.raises(AttributeError):
        mem.workflow_id = "wf_y"  # type: ignore[misc]
    assert (mem.workflow_id, mem.agent_id) == ("wf_x", "a1")


async def test_a_request_published_without_reply_subject_is_still_executed(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    stream = await bus.subscribe(general=True)

    await bus.nc.publish(
        f"mem.{bus.namespace}.add", b'{"type": "knowledge", "content": "fire and forget"}'
    )

    ev = await stream.next()
    assert ev.preview == "fire and forget"
    assert [m.content for m in (await wf123.list()).memories] == ["fire and forget"]
    await stream.close()


async def test_punctuation_in_tags_and_workflow_ids_is_matched_exactly(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf-1_X")
    other = bus.agent(workflow_id="wf-1_x")  # differs only by case
    tagged = await mem.add("decision", "punctuated", tags=["proj:alpha.v2-x"])
    await other.add("decision", "lower-case twin")
    await mem.add("decision", "untagged")

    by_tag = await mem.list(tags=["proj:alpha.v2-x"])
    own = await mem.list(scope="workflow")

    assert [m.id for m in by_tag.memories] == [tagged.id]
    assert {m.workflow_id for m in own.memories} == {"wf-1_X"}
    assert own.total == 2


async def test_a_dropped_index_is_created_again_on_the_next_query(
    wf123: AgentMemory, rds, key_ns: str, transport: str
) -> None:
    added = await wf123.add("knowledge", "survives an index drop")
    await wf123.describe()  # every handler has the index cached by now or soon

    # The index that holds the namespace: its pool's, or its own once promoted.
    tier = (await rds.get(tier_key(key_ns))).decode()
    clustered = transport == "cluster"
    index = index_name(key_ns) if tier == OWN_INDEX else pool_index_name(int(tier), clustered)
    await rds.execute_command("FT.DROPINDEX", index)  # keeps the hashes

    hits = await wf123.search("index drop", mode="vector")
    described = await wf123.describe()
    assert [h.id for h in hits.results] == [added.id]
    assert described.total == 1


# --------------------------------------------------------------------------- reply size


async def _forty_large(mem: AgentMemory) -> list[str]:
    # 40 x 31 KiB: about 1.24 MB of content, more than NATS's default 1 MiB max payload.
    body = "lorem ipsum dolor " * (31 * 1024 // 18)
    added = await asyncio.gather(
        *(mem.add("knowledge", f"{i} {body}", tags=["big"]) for i in range(40))
    )
    return [a.id for a in added]


async def test_a_list_too_large_for_one_message_comes_back_truncated(wf123: AgentMemory) -> None:
    await _forty_large(wf123)

    page = await wf123.list(limit=40)

    assert isinstance(page, ListReply)
    assert page.truncated is True
    assert 20 <= page.count == len(page.memories) < 40
    assert page.total == 40
    assert (await wf123.list(limit=10)).truncated is False


async def test_get_and_search_too_large_for_one_message_come_back_truncated(
    wf123: AgentMemory,
) -> None:
    ids = await _forty_large(wf123)

    got = await wf123.get(ids)
    hits = await wf123.search("lorem ipsum", limit=40)

    assert got.truncated is True
    assert 20 <= len(got.memories) < 40
    assert [m.id for m in got.memories] == ids[: len(got.memories)]
    assert got.missing == []  # dropped ids are not missing
    assert hits.truncated is True
    assert 20 <= len(hits.results) < 40


async def test_get_answers_each_distinct_id_once(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "asked for twice")
    b = await wf123.add("knowledge", "asked for once")

    got = await wf123.get([a.id, b.id, a.id, "01NOPE", "01NOPE"])

    assert [m.id for m in got.memories] == [a.id, b.id]
    assert got.missing == ["01NOPE"]
    assert got.truncated is False


async def test_describe_lists_at_most_a_thousand_tags_and_says_so(wf123: AgentMemory) -> None:
    await asyncio.gather(
        *(
            wf123.add("knowledge", f"note {i}", tags=[f"t{i}_{j}" for j in range(32)])
            for i in range(32)
        )
    )

    overview = await wf123.describe()

    assert overview.total == 32
    assert overview.tags_truncated is True
    assert len(overview.tags) == 1000
    assert overview.tags == sorted(overview.tags)


# --------------------------------------------------------------------------- context


async def test_writes_record_the_session_of_their_context(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_1", agent_id="a", session_id="sess-42")
    added = await mem.add("decision", "ship on Friday")

    [got] = (await mem.get([added.id])).memories
    [listed] = (await bus.agent(workflow_id="wf_1").list()).memories

    assert got.session_id == listed.session_id == "sess-42"
    assert mem.session_id == "sess-42"


async def test_a_context_block_changes_no_read(bus: MemoryBus) -> None:
    plain = bus.agent(workflow_id="wf_1")
    told = bus.agent(
        workflow_id="wf_1",
        context=Context(session_id="s:1", goal="find the deadline", constraints="be brief"),
    )
    await plain.add("decision", "the deadline is Friday")
    await plain.add("knowledge", "Fridays are busy")

    a = await plain.search("deadline friday")
    b = await told.search("deadline friday")

    assert [(r.id, round(r.score, 6)) for r in a.results] == [
        (r.id, round(r.score, 6)) for r in b.results
    ]
    assert (await told.describe()).total == (await plain.describe()).total == 2


@pytest.mark.parametrize(
    ("context", "code", "hint"),
    [
        ({"session_id": "has space"}, "invalid_request", "session_id"),
        ({"session": "s1"}, "invalid_request", 'Did you mean "session_id"'),
        ({"goal": "€" * 1500}, "too_large", "context.goal"),
        ({"memory": "x" * 4097}, "invalid_request", "memory"),
    ],
)
async def test_a_bad_context_block_is_refused(
    bus: MemoryBus, context: dict[str, object], code: str, hint: str
) -> None:
    body = msgspec.json.encode({"type": "fact", "content": "x", "context": context})
    msg = await bus.nc.request(f"mem.{bus.namespace}.add", body, timeout=5)
    reply = msgspec.json.decode(msg.data)

    assert (reply["success"], reply["code"]) == (False, code)
    assert hint in reply["error"]
    assert (await bus.agent().describe()).total == 0


async def test_handlers_log_the_session_id_with_the_request(in_process, ns: str) -> None:
    body = b'{"query": "x", "context": {"session_id": "sess-7"}}'
    with structlog.testing.capture_logs([structlog.contextvars.merge_contextvars]) as logs:
        await dispatch("search", f"mem.{ns}.search", body, in_process.deps)

    [done] = [e for e in logs if e["event"] == "request.done"]
    assert done["session_id"] == "sess-7"


@pytest.mark.transports("nats")
async def test_concurrent_edits_of_one_memory_leave_one_consistent_memory(
    transport: str, bus: MemoryBus
) -> None:
    # Twenty agents rewrite one memory at once through two handlers: it ends as one of
    # them wrote it, and only that text is its exact-dedup key.
    mem = bus.agent(workflow_id="wf_race")
    kept = await mem.add("decision", "the release train leaves on monday")
    texts = [f"the release train leaves on day {i}" for i in range(20)]
    await asyncio.gather(*(mem.update(kept.id, content=t) for t in texts))
    [final] = (await mem.get([kept.id])).memories
    assert final.content in texts
    for text in texts:
        again = await mem.add("decision", text)
        assert (again.duplicate_of == kept.id) == (text == final.content), text
    history = await mem.history(kept.id)
    assert [e.event for e in history.entries].count("updated") == 20
