"""Retrieval features on real servers: update, dedup, search modes and token budgets."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from conftest import Servers, handler_here
from inprocess import InProcess

from bus import AgentMemory, InvalidRequest, MemoryBus, NotFound
from handlers.store import keys
from handlers.store.text import word_field, words_key

DIM = 384


def unit(*pairs: tuple[int, float]) -> list[float]:
    """A 384-dim vector with the given (axis, value) parts."""
    vec = [0.0] * DIM
    for axis, value in pairs:
        vec[axis] = value
    return vec


# --------------------------------------------------------------------------- update


async def test_update_content_re_embeds_and_keeps_created_at_and_ttl(
    wf123: AgentMemory, rds: aioredis.Redis, ns: str
) -> None:
    added = await wf123.add("context", "walrus habitat notes", ttl_s=600)
    before = (await wf123.get([added.id])).memories[0]
    ttl_before = await rds.pexpiretime(keys.record_key(ns, added.id))

    reply = await wf123.update(added.id, content="penguin colony census")

    after = (await wf123.get([added.id])).memories[0]
    assert after.content == "penguin colony census"
    assert after.created_at == before.created_at
    assert after.updated_at > before.updated_at
    assert reply.updated_at == after.updated_at
    assert after.expires_at == before.expires_at == reply.expires_at
    assert await rds.pexpiretime(keys.record_key(ns, added.id)) == ttl_before
    found = await wf123.search("penguin colony", mode="vector", limit=1)
    assert found.results[0].id == added.id
    assert found.results[0].similarity > 0.5
    stale = await wf123.search("walrus habitat", mode="vector", limit=1)
    assert stale.results[0].similarity == pytest.approx(0.0, abs=1e-6)


async def test_update_ttl_reapplies_expiry_to_every_key(
    wf123: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    added = await wf123.add("knowledge", "renewable fact")
    await wf123.get([added.id])  # creates the access key
    dedup_keys = [k async for k in rds.scan_iter(keys.dedup_prefix(key_ns) + "*")]
    assert len(dedup_keys) == 1

    reply = await wf123.update(added.id, ttl_s=120)

    assert reply.expires_at is not None
    expected = int(reply.expires_at.timestamp() * 1000)
    for key in (
        keys.record_key(key_ns, added.id),
        keys.access_key(key_ns, added.id),
        dedup_keys[0],
    ):
        assert await rds.pexpiretime(key) == expected

    permanent = await wf123.update(added.id, ttl_s=0)

    assert permanent.expires_at is None
    for key in (
        keys.record_key(key_ns, added.id),
        keys.access_key(key_ns, added.id),
        dedup_keys[0],
    ):
        assert await rds.pexpiretime(key) == -1
    assert (await wf123.get([added.id])).memories[0].expires_at is None


async def test_update_tags_and_importance_and_publishes_updated(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    added = await wf123.add("decision", "use blue buttons", tags=["ui"])
    events = await bus.subscribe("wf_123", action="updated")

    await wf123.update(added.id, tags=["UI", "Design"], importance=0.95)

    ev = await events.next()
    got = (await wf123.get([added.id])).memories[0]
    assert (ev.id, ev.action, ev.type) == (added.id, "updated", "decision")
    assert got.tags == ["ui", "design"]
    assert got.importance == pytest.approx(0.95)
    assert [m.id for m in (await wf123.list(tags=["design"])).memories] == [added.id]
    await events.close()


async def test_update_of_an_unknown_id_is_not_found_with_a_hint(wf123: AgentMemory) -> None:
    with pytest.raises(NotFound) as err:
        await wf123.update("01UNKNOWN", content="x")
    assert "list" in err.value.message
    with pytest.raises(InvalidRequest):
        await wf123.update("01UNKNOWN")  # changes nothing


# --------------------------------------------------------------------------- dedup


async def test_exact_repeat_bumps_mention_count_instead_of_adding(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    first = await wf123.add("knowledge", "The API rate limit is 100 requests per minute")
    events = await bus.subscribe(general=True)
    await asyncio.sleep(0.005)  # a later millisecond, so the mention's updated_at is later

    again = await wf123.add("knowledge", "  the api RATE limit is 100 requests   per minute ")

    assert again.id == first.id
    assert again.duplicate_of == first.id
    assert again.mention_count == 2
    ev = await events.next()
    assert (ev.action, ev.id) == ("updated", first.id)
    [m] = (await wf123.list()).memories
    assert m.mention_count == 2
    assert m.updated_at > m.created_at
    await events.close()


async def test_dedup_is_per_type_and_scope_and_can_be_turned_off(
    wf123: AgentMemory, wf456: AgentMemory
) -> None:
    a = await wf123.add("decision", "ship on friday")
    b = await wf456.add("decision", "ship on friday")  # another workflow
    c = await wf123.add("event", "ship on friday")  # another type
    d = await wf123.add("decision", "ship on friday", dedup="none")

    assert len({a.id, b.id, c.id, d.id}) == 4
    assert all(r.duplicate_of is None for r in (a, b, c, d))


async def test_deleting_a_memory_frees_its_content_for_a_new_add(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "ephemeral duplicate")
    await wf123.delete([a.id])

    b = await wf123.add("knowledge", "ephemeral duplicate")

    assert b.id != a.id
    assert b.duplicate_of is None


async def test_concurrent_identical_adds_leave_one_record(wf123: AgentMemory) -> None:
    # Two handler processes serve these concurrently; the check-and-write is one Lua step.
    replies = await asyncio.gather(
        *(wf123.add("knowledge", "race condition content") for _ in range(40))
    )

    ids = {r.id for r in replies}
    listed = await wf123.list()
    assert len(ids) == 1
    assert listed.total == 1
    assert listed.memories[0].mention_count == 40
    assert sorted(r.mention_count for r in replies) == list(range(1, 41))


async def test_semantic_dedup_folds_near_duplicates_above_the_threshold(
    wf123: AgentMemory,
) -> None:
    base = await wf123.add("knowledge", "vector one", embedding=unit((0, 1.0)))
    near = unit((0, 0.99), (1, math.sqrt(1 - 0.99**2)))
    far = unit((0, 0.80), (1, 0.60))

    folded = await wf123.add("knowledge", "vector one again", embedding=near, dedup="semantic")
    kept = await wf123.add("knowledge", "vector two", embedding=far, dedup="semantic")
    strict = await wf123.add(
        "knowledge", "vector three", embedding=near, dedup="semantic", dedup_threshold=0.999
    )

    assert folded.duplicate_of == base.id
    assert folded.mention_count == 2
    assert kept.duplicate_of is None
    assert strict.duplicate_of is None


async def test_concurrent_near_duplicate_adds_leave_one_record(wf123: AgentMemory) -> None:
    # Different texts (so exact dedup cannot catch them), near-identical vectors, sent at
    # once to two handler processes: the similarity check and the write are one step.
    def near(i: int) -> list[float]:
        return unit((0, 1.0), (1 + i, 0.01))

    replies = await asyncio.gather(
        *(
            wf123.add("knowledge", f"near duplicate {i}", embedding=near(i), dedup="semantic")
            for i in range(60)
        )
    )

    listed = await wf123.list()
    assert listed.total == 1
    assert len({r.id for r in replies}) == 1
    assert listed.memories[0].mention_count == 60
    assert sorted(r.mention_count or 1 for r in replies) == list(range(1, 61))


# --------------------------------------------------------------------------- search modes


async def test_hybrid_finds_an_exact_keyword_that_vector_alone_misses(
    wf123: AgentMemory,
) -> None:
    query = unit((0, 1.0))
    target = await wf123.add(
        "knowledge", "Invoice 88231 was paid late", embedding=unit((0, 0.5), (1, math.sqrt(0.75)))
    )
    for i in range(3):
        vec = unit((0, 0.55), (2 + i, math.sqrt(1 - 0.55**2)))
        await wf123.add("knowledge", f"unrelated note number {i}", embedding=vec)

    vector = await wf123.search("invoice 88231", embedding=query, mode="vector", limit=1)
    hybrid = await wf123.search("invoice 88231", embedding=query, mode="hybrid", limit=1)
    text = await wf123.search("invoice 88231", mode="text", limit=1)

    assert vector.results[0].id != target.id
    assert hybrid.results[0].id == target.id
    assert hybrid.mode == "hybrid"
    assert hybrid.results[0].similarity == pytest.approx(0.5, abs=1e-4)
    assert hybrid.results[0].text_score == pytest.approx(1.0)
    assert text.results[0].id == target.id
    assert text.results[0].similarity == 0.0


async def test_text_mode_matches_tags_and_needs_no_vectors(wf123: AgentMemory) -> None:
    tagged = await wf123.add("knowledge", "plain words only", tags=["kubernetes"])
    await wf123.add("knowledge", "other plain words")

    hits = await wf123.search("kubernetes", mode="text")

    assert [h.id for h in hits.results] == [tagged.id]


async def test_text_score_counts_every_query_term_a_memory_matches(wf123: AgentMemory) -> None:
    # Every search carries a scope filter and leaves superseded memories out; BM25 must still
    # add up all the query's terms. Under an intersection driven by another part, RediSearch
    # reaches a memory in the OR of terms by skipping past one that matches no term, and then
    # scores only the first term it matches. A negation drives when the terms' matches
    # outnumber the memories, so: each word is in several memories (as a name is in a
    # conversation), and one that matches none comes just before the one matching all.
    # Each term is in as many memories (equal weight); a scorer that stopped at the first term
    # would put the short one-term memories ahead (BM25 favours short ones).
    singles = [
        await wf123.add("knowledge", f"{w} sighting {i}")
        for i in range(3)
        for w in ("zebra", "quokka", "wombat")
    ]
    await wf123.add("knowledge", "otter sighting")
    every = await wf123.add(
        "knowledge", "zebra quokka and wombat all seen together near the old river bridge today"
    )

    hits = await wf123.search("zebra quokka wombat", mode="text", scope="both", limit=20)

    assert hits.results[0].id == every.id
    assert {h.id for h in hits.results[1:]} == {s.id for s in singles}
    assert all(h.text_score is not None and h.text_score < 0.6 for h in hits.results[1:])


async def test_text_search_leaves_out_superseded_memories_and_keeps_to_every_filter(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    # The text query repeats every condition (scope, types, workspace, stores, not
    # superseded) in each word's clause (see `text_match`): each must still hold for the
    # whole query. The superseded memory is the best match by BM25 (every word, shortest).
    old = await wf123.add("context", "heron nest pier")  # workflow scope by type
    new = await wf123.add("context", "heron nest moved to the boathouse", supersedes=[old.id])
    general = await wf123.add("knowledge", "heron nest built of sticks by the pier")
    elsewhere = await bus.agent(workflow_id="wf_999").add("context", "heron nest near the dam")
    await bus.create_workspace("Alpha", description="d", root_folder="alpha", purpose="p")
    alpha = bus.agent(workflow_id="wf_123", workspace="Alpha")
    in_alpha = await alpha.add("context", "heron nest in the reeds by the pier")
    familiar = MemoryBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust="familiar")
    social = await familiar.agent(workflow_id="wf_123").add("context", "heron nest pier social")

    async def found(mem: AgentMemory, **kw: Any) -> set[str]:
        hits = await mem.search("heron nest pier", mode="text", limit=20, **kw)
        return {h.id for h in hits.results}

    current = {new.id, general.id, in_alpha.id, social.id}
    assert await found(wf123) == current
    assert await found(wf123, include_superseded=True) == current | {old.id}
    assert await found(wf123, scope="workflow") == {new.id, in_alpha.id, social.id}
    assert await found(wf123, scope="general") == {general.id}
    assert await found(wf123, types=["knowledge"]) == {general.id}
    assert await found(bus.agent(workflow_id="wf_999"), scope="workflow") == {elsewhere.id}
    assert await found(alpha) == {in_alpha.id}
    assert await found(familiar.agent(workflow_id="wf_123")) == {social.id}
    hybrid = await wf123.search("heron nest pier", limit=20)
    assert {h.id for h in hybrid.results} == current


async def test_text_score_does_not_favour_the_workflow_over_general_memories(
    wf123: AgentMemory,
) -> None:
    # The scope filter (`wf` or `general` tag) must not add to BM25: a workflow's tag is
    # rare in the index, so it would lift that workflow's memories above general ones.
    for i in range(20):
        await wf123.add("knowledge", f"general filler note {i}")  # general by type
    in_wf = await wf123.add("context", "pelican migration notes")  # workflow by type
    general = await wf123.add("knowledge", "pelican migration notes")

    hits = await wf123.search("pelican migration", mode="text", scope="both")

    scores = {h.id: h.text_score for h in hits.results}
    assert set(scores) == {in_wf.id, general.id}
    assert scores[in_wf.id] == pytest.approx(scores[general.id])


async def test_text_scores_are_the_same_whatever_the_filter(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    # RediSearch drops `$weight: 0` from a filter that comes down to one tag (the general
    # scope, a union with an empty side, a `types` filter), which then added its own BM25 to
    # every match, more to shorter memories: the ranking must depend on the words alone.
    await wf123.add("context", "unrelated workflow note")  # the workflow's side is not empty
    rare = await wf123.add("knowledge", "the zanzibar ledger was reconciled today")
    for i in range(5):
        await wf123.add("knowledge", f"ledger entry {i}")

    def ratios(reply: Any) -> dict[str, float]:
        return {h.id: h.text_score for h in reply.results}

    both = ratios(await wf123.search("zanzibar ledger", mode="text", scope="both"))
    assert max(both, key=both.__getitem__) == rare.id
    assert len(both) == 6
    general = ratios(await wf123.search("zanzibar ledger", mode="text", scope="general"))
    typed = ratios(await wf123.search("zanzibar ledger", mode="text", types=["knowledge"]))
    other_wf = bus.agent(workflow_id="wf_empty")
    empty_side = ratios(await other_wf.search("zanzibar ledger", mode="text"))
    for scores in (general, typed, empty_side):
        assert scores == pytest.approx(both)


async def test_hybrid_gives_vector_matches_beyond_the_text_cut_their_true_text_score(
    wf123: AgentMemory,
) -> None:
    # 60 short memories outscore the long target on BM25, so the text query (k = 50 for
    # limit 1) leaves the target out; it is the nearest vector and must still get its BM25.
    await asyncio.gather(
        *(
            wf123.add("knowledge", f"heron {i}", embedding=unit((2 + i, 1.0)), dedup="none")
            for i in range(60)
        )
    )
    target = await wf123.add(
        "knowledge",
        "heron seen by the lake near the boathouse in the early morning fog again",
        embedding=unit((0, 1.0)),
    )

    hits = await wf123.search("heron", embedding=unit((0, 1.0)), mode="hybrid", limit=1)

    assert hits.results[0].id == target.id
    assert hits.results[0].text_score is not None
    assert 0.2 < hits.results[0].text_score < 1.0


async def test_a_text_query_of_index_stopwords_only_matches_nothing_by_text(
    wf123: AgentMemory,
) -> None:
    await wf123.add("knowledge", "the cat is on the mat")

    hits = await wf123.search("the is", mode="text")

    assert hits.results == []


async def test_rrf_fusion_is_available_per_request(wf123: AgentMemory) -> None:
    a = await wf123.add("knowledge", "solar panels on the roof")
    hits = await wf123.search("solar roof", mode="hybrid", fusion="rrf", limit=1)
    assert hits.results[0].id == a.id


async def test_default_mode_is_hybrid(wf123: AgentMemory) -> None:
    await wf123.add("knowledge", "anything at all")
    assert (await wf123.search("anything")).mode == "hybrid"


# --------------------------------------------------------------------------- token budgets


async def test_max_tokens_cuts_search_results_but_keeps_at_least_one(
    wf123: AgentMemory,
) -> None:
    for i in range(5):
        await wf123.add("knowledge", f"budget item {i} " + "x" * 80)  # ~24 tokens each

    full = await wf123.search("budget item", limit=5)
    cut = await wf123.search("budget item", limit=5, max_tokens=50)
    tiny = await wf123.search("budget item", limit=5, max_tokens=1)

    assert len(full.results) == 5
    assert len(cut.results) == 2
    assert [h.id for h in cut.results] == [h.id for h in full.results[:2]]
    assert len(tiny.results) == 1


async def test_max_tokens_cuts_list_pages(wf123: AgentMemory) -> None:
    for i in range(4):
        await wf123.add("knowledge", f"listed {i} " + "y" * 150)  # ~40 tokens each

    full = await wf123.list(max_tokens=100)
    compact = await wf123.list(mode="compact", max_tokens=100)

    assert (full.count, full.total) == (2, 4)
    assert compact.count == 3  # previews are 100 characters plus "...": 26 tokens each


async def test_results_cut_by_the_budget_are_not_counted_as_accessed(
    wf123: AgentMemory,
) -> None:
    ids = [(await wf123.add("knowledge", f"counted {i} " + "z" * 80)).id for i in range(4)]

    cut = await wf123.search("counted", limit=4, max_tokens=50)

    got = {m.id: m.access_count for m in (await wf123.get(ids)).memories}
    returned = {h.id for h in cut.results}
    assert len(returned) == 2
    assert all(got[mid] == (1 if mid in returned else 0) for mid in ids)


async def test_diversify_keeps_near_duplicates_from_crowding_the_results(
    wf123: AgentMemory,
) -> None:
    query = unit((0, 1.0))
    twins = []
    for i in range(3):
        vec = unit((0, 0.9), (1, math.sqrt(1 - 0.81 - 0.0001 * i)), (2 + i, 0.01 * math.sqrt(i)))
        twins.append((await wf123.add("knowledge", f"twin {i}", embedding=vec, dedup="none")).id)
    other = await wf123.add("knowledge", "different", embedding=unit((0, 0.8), (9, 0.6)))

    plain = await wf123.search(embedding=query, limit=2, mode="vector")
    mixed = await wf123.search(embedding=query, limit=2, mode="vector", diversify=0.5)

    assert {h.id for h in plain.results} <= set(twins)
    assert mixed.results[0].id in twins
    assert mixed.results[1].id == other.id


async def bounded_bus(in_process: InProcess, ns: str) -> MemoryBus:
    """A bus whose hybrid searches read a word across the namespace only when its memories
    are at most half of it: the others are scored among the candidates found."""
    settings = msgspec.structs.replace(
        in_process.deps.settings, text_read_share_max=0.5, text_read_docs_min=0
    )
    bounded = InProcess(in_process.nc, dataclasses.replace(in_process.deps, settings=settings))
    return await MemoryBus.connect(namespace=ns, nc=bounded)  # type: ignore[arg-type]


async def test_common_words_are_scored_among_the_candidates_with_the_same_scores(
    in_process: InProcess, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "ledger" is in 6 of 7 memories: with it, the words' memories add up to over half of
    # the namespace, so the text query across it reads only "zanzibar", and "ledger" is
    # scored among the candidates found.
    bus = await bounded_bus(in_process, ns)
    whole = await MemoryBus.connect(namespace=ns, nc=in_process)  # type: ignore[arg-type]
    mem = bus.agent(workflow_id="wf_terms")
    for i in range(6):
        await mem.add("knowledge", f"ledger entry number {i}")
    rare = await mem.add("knowledge", "the zanzibar ledger was reconciled")

    room = in_process.deps.store.text
    asked: list[tuple[list[str], bool]] = []
    text_search, scores_search = room.text_search, room.scores_search

    def across(terms: list[str], *args: Any, **kw: Any) -> Any:
        asked.append((list(terms), False))
        return text_search(terms, *args, **kw)

    def among(ns_: str, terms: list[str], *args: Any, **kw: Any) -> Any:
        asked.append((list(terms), True))
        return scores_search(ns_, terms, *args, **kw)

    monkeypatch.setattr(room, "text_search", across)
    monkeypatch.setattr(room, "scores_search", among)
    hits = (await mem.search("zanzibar ledger", limit=10)).results
    assert asked == [(["zanzibar"], False), (["zanzibar", "ledger"], True)]
    assert hits[0].id == rare.id
    # The candidates were every memory here: the same ranking and scores as without a bound.
    same = (await whole.agent(workflow_id="wf_terms").search("zanzibar ledger", limit=10)).results
    assert [(h.id, h.text_score) for h in hits] == [(h.id, h.text_score) for h in same]
    # (scores differ by the recency of the instant between the two searches)
    assert [h.score for h in hits] == pytest.approx([h.score for h in same], abs=1e-6)
    assert all(h.text_score for h in hits)  # "ledger" scored for every memory
    # An explicit text search reads every word across the namespace.
    asked.clear()
    await mem.search("zanzibar ledger", mode="text", limit=10)
    assert asked == [(["zanzibar", "ledger"], False)]
    await bus.close()
    await whole.close()


@pytest.fixture(params=["in_process", "on_cluster"])
def standalone_or_cluster(request: pytest.FixtureRequest) -> InProcess:
    """Operations in this process, on the one Redis or on the Redis Cluster."""
    served: InProcess = request.getfixturevalue(request.param)
    return served


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"diversify": 0.5},
        {"min_score": 0.3},
        {"limit": 3},
        {"limit": 3, "max_tokens": 12},
    ],
    ids=["linear", "diversify", "min_score", "limit", "max_tokens"],
)
async def test_a_search_scoring_words_among_candidates_ranks_as_a_whole_namespace_one(
    standalone_or_cluster: InProcess,
    ns: str,
    options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Scored among its candidates, a hybrid search picks which records to read from each
    # candidate's bounds in one script (`handlers.store.pick`): the results must be those
    # of the search that reads every word across the namespace, whatever the fusion or
    # cut. "ledger" and "zanzibar" are in 70 of 74 memories, so the text query across the
    # namespace reads "payroll" alone; the vector query (k = 50) misses some of the payroll
    # memories, whose cosine the pick then reads from their stored vectors. (RRF is left
    # out: its text ranks are among the candidates here, across the namespace there.) On a
    # Redis Cluster too: the script runs the INKEYS query on the node of the namespace's slot.
    in_process = standalone_or_cluster
    bus = await bounded_bus(in_process, ns)
    whole = await MemoryBus.connect(namespace=ns, nc=in_process)  # type: ignore[arg-type]
    mem = bus.agent(workflow_id="wf_pick")
    for i in range(70):
        words = " ".join(["ledger"] * (1 + i % 3))
        await mem.add("knowledge", f"{words} entry {i} of the zanzibar office" * (i % 2 + 1))
    for what in ("payroll", "payroll run", "the payroll was late", "payroll of the ledger"):
        await mem.add("knowledge", what)
    room = in_process.deps.store.text
    blind: list[bool] = []
    pick = room.pick

    def spied(*args: Any, **kw: Any) -> Any:
        blind.extend(c.blind for c in args[2])
        return pick(*args, **kw)

    monkeypatch.setattr(room, "pick", spied)
    query = {"query": "zanzibar ledger payroll", "limit": 10, **options}
    hits = (await mem.search(**query)).results
    assert any(blind) and not all(blind)
    same = (await whole.agent(workflow_id="wf_pick").search(**query)).results
    assert hits, options
    assert [(h.id, h.text_score, h.similarity) for h in hits] == [
        (h.id, h.text_score, h.similarity) for h in same
    ]
    assert [h.score for h in hits] == pytest.approx([h.score for h in same], abs=1e-6)
    # `recall` reads the same candidates without their records (the pick reads vectors only).
    if not options:
        recalled = await mem.recall("zanzibar ledger payroll", session_id="s1", limit=5)
        again = await whole.agent(workflow_id="wf_pick").recall(
            "zanzibar ledger payroll", session_id="s2", limit=5
        )
        assert [m.id for m in recalled.results] == [m.id for m in again.results]
        assert recalled.results
    # Nothing found by either query: no candidate to score among, an empty reply.
    assert (await mem.search(**{**query, "tags": ["no-such-tag"]})).results == []
    await bus.close()
    await whole.close()


async def test_searches_scored_among_candidates_racing_writes_and_deletes(
    in_process: InProcess, ns: str
) -> None:
    # Candidates deleted or superseded between a search's two round trips: the pick finds
    # their records gone (or their text unscored) and the search answers without them.
    bus = await bounded_bus(in_process, ns)
    mem = bus.agent(workflow_id="wf_race")
    ids = [
        (await mem.add("knowledge", f"ledger {i} of the zanzibar payroll office")).id
        for i in range(60)
    ]
    deleted: set[str] = set()

    async def churn() -> None:
        for i, mid in enumerate(ids[:40]):
            if i % 2:
                await mem.delete([mid])
                deleted.add(mid)
            else:
                await mem.add("knowledge", f"payroll ledger {i} moved", supersedes=[mid])
            await asyncio.sleep(0)

    async def ask() -> list[list[str]]:
        seen = []
        for _ in range(40):
            hits = (await mem.search("zanzibar ledger payroll", limit=10)).results
            seen.append([h.id for h in hits])
            await asyncio.sleep(0)
        return seen

    _, *asked = await asyncio.gather(churn(), ask(), ask())
    assert all(len(page) == 10 for pages in asked for page in pages)
    final = {h.id for h in (await mem.search("zanzibar ledger payroll", limit=50)).results}
    assert not final & deleted
    assert not final & set(ids[:40])  # deleted or superseded
    await bus.close()


async def _ledgers(mem: AgentMemory) -> tuple[Any, Any]:
    """Eight memories, "ledger" in each: six entries, then a "zanzibar ledger" one and the
    one that supersedes it (old, new)."""
    for i in range(6):
        await mem.add("knowledge", f"ledger entry number {i}")
    old = await mem.add("knowledge", "the zanzibar ledger was reconciled by Ana")
    new = await mem.add(
        "knowledge", "the zanzibar ledger is now reconciled by Ben", supersedes=[old.id]
    )
    return old, new


async def test_a_superseded_memory_stays_out_of_a_bounded_hybrid_search(
    in_process: InProcess, ns: str
) -> None:
    # The bounded text query leaves "not superseded" to the handler (and the scoring among
    # candidates leaves it out): a superseded memory holding the rare word must still not
    # come back, and must with `include_superseded`.
    bus = await bounded_bus(in_process, ns)
    mem = bus.agent(workflow_id="wf_current")
    old, new = await _ledgers(mem)

    for mode in ("hybrid", "text", "vector"):
        # In a fresh Redis the pool holds these 8 alone, and "ledger" (in all of them) is
        # scored right only once garbage collection has run after the supersede (within
        # 5 s: `test_an_update_in_a_small_namespace_leaves_its_word_scores_alone`).
        for _ in range(150):
            hits = (await mem.search("zanzibar ledger", limit=10, mode=mode)).results
            assert old.id not in {h.id for h in hits}, mode
            if hits[0].id == new.id:
                break
            await asyncio.sleep(0.1)
        assert hits[0].id == new.id, mode
    both = (await mem.search("zanzibar ledger", limit=10, include_superseded=True)).results
    assert {old.id, new.id} <= {h.id for h in both[:2]}
    await bus.close()


async def test_an_update_in_a_small_namespace_leaves_its_word_scores_alone(
    servers: Servers, ns: str
) -> None:
    # A namespace with an index of its own, 8 memories, a word in every one: an update
    # leaves the word's index more entries than the index has memories until garbage
    # collection, and RediSearch's BM25STD (before MOD-12223) then gave it an IDF of 42
    # against 0.06, so "ledger" outranked "zanzibar" for good (`deploy.embedded`).
    client = aioredis.Redis.from_url(servers.redis_url)
    async with (
        handler_here(servers.nats_url, servers.redis_url, client, {"MEMBUS_POOL_MAX": "0"}) as h,
        await MemoryBus.connect(namespace=ns, nc=h) as bus,  # type: ignore[arg-type]
    ):
        mem = bus.agent(workflow_id="wf_small")
        _, new = await _ledgers(mem)
        for _ in range(150):
            hits = (await mem.search("zanzibar ledger", limit=10, mode="text")).results
            if hits[0].id == new.id:
                break
            await asyncio.sleep(0.1)
        assert hits[0].id == new.id, [h.content for h in hits]
        assert hits[0].score > hits[1].score


async def test_word_counts_are_kept_by_writes_and_start_afresh_daily(
    wf123: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    await wf123.add("knowledge", "The Zanzibar ledger was reconciled on Friday")
    await wf123.add("knowledge", "The ledger of Pemba too", tags=["zanzibar"])
    key = words_key(key_ns)
    counts = {k.decode(): int(v) for k, v in (await rds.hgetall(key)).items()}
    # By each word's hash: the counts hold no word (PROTOCOL v4, "Erasure").
    assert not {"ledger", "zanzibar", "pemba"} & counts.keys()
    ledger, zanzibar, pemba = (word_field(w) for w in ("ledger", "zanzibar", "pemba"))
    assert counts["*"] == 2 and counts[ledger] == 2 and counts[zanzibar] == 2
    assert counts[pemba] == 1 and word_field("the") not in counts  # stopwords: not indexed
    assert 0 < await rds.ttl(key) <= 24 * 3600
