"""Trust and stores (PROTOCOL "Trust and stores"): the caller's trust comes from the subject
(`mem.<ns>.<op>` full, `mem.<ns>.<op>.<trust>` reduced); every read is cut to the stores it
sees, writes default to its store, and ids of other stores never leak."""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec
import pytest

from bus import Forbidden, MemoryBus, NotFound
from contracts.messages import Event

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")

As = Callable[[str], MemoryBus]


@pytest.fixture
def as_trust(bus: MemoryBus) -> As:
    """The same namespace and connection as `bus`, at another trust level."""

    def make(trust: str) -> MemoryBus:
        return MemoryBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust=trust)

    return make


async def _three_stores(bus: MemoryBus, as_trust: As) -> dict[str, str]:
    """One memory in each store, written at each store's default trust."""
    ids = {}
    for trust, store in (("full", "private"), ("inner", "shared"), ("familiar", "social")):
        mem = as_trust(trust).agent(workflow_id="wf_t", agent_id=f"agent-{trust}")
        reply = await mem.add("knowledge", f"the {store} launch codeword is zebra {store}")
        ids[store] = reply.id
    return ids


async def test_writes_go_to_the_callers_store_and_reads_see_only_visible_ones(
    bus: MemoryBus, as_trust: As
) -> None:
    ids = await _three_stores(bus, as_trust)
    for trust, visible in (
        ("full", {"private", "shared", "social"}),
        ("inner", {"shared", "social"}),
        ("familiar", {"social"}),
    ):
        mem = as_trust(trust).agent(workflow_id="wf_t")
        found = await mem.search("launch codeword zebra", limit=10)
        assert {r.store for r in found.results} == visible, trust
        listed = await mem.list(limit=10)
        assert {m.id for m in listed.memories} == {ids[s] for s in visible}, trust
        assert (await mem.describe()).total == len(visible), trust
        recalled = await mem.recall("what is the launch codeword?", session_id=f"s-{trust}")
        assert {r.id for r in recalled.results} == {ids[s] for s in visible}, trust


async def test_ids_of_invisible_stores_are_missing_everywhere(bus: MemoryBus, as_trust: As) -> None:
    ids = await _three_stores(bus, as_trust)
    familiar = as_trust("familiar").agent(workflow_id="wf_t")
    got = await familiar.get([ids["private"], ids["shared"], ids["social"]])
    assert [m.id for m in got.memories] == [ids["social"]]
    assert got.missing == [ids["private"], ids["shared"]]
    with pytest.raises(NotFound):
        await familiar.update(ids["shared"], content="overwritten")
    with pytest.raises(NotFound):
        await familiar.history(ids["private"])
    with pytest.raises(NotFound):
        await familiar.timeline(ids["shared"])
    deleted = await familiar.delete([ids["private"], ids["social"]])
    assert (deleted.deleted, deleted.missing) == (1, [ids["private"]])
    # Nothing happened to the private memory, not even an access count.
    full = bus.agent(workflow_id="wf_t")
    kept = (await full.get([ids["private"], ids["shared"]])).memories
    assert [m.content for m in kept] == [
        "the private launch codeword is zebra private",
        "the shared launch codeword is zebra shared",
    ]
    assert kept[0].access_count == 0


async def test_apply_treats_invisible_ids_as_missing_and_writes_nothing(
    bus: MemoryBus, as_trust: As
) -> None:
    ids = await _three_stores(bus, as_trust)
    familiar = as_trust("familiar").agent(workflow_id="wf_t")
    for action in (
        {"action": "delete", "id": ids["private"]},
        {"action": "update", "id": ids["shared"], "content": "overwritten"},
        {"action": "supersede", "id": ids["private"], "type": "fact", "content": "newer"},
    ):
        with pytest.raises(NotFound, match=r"actions\[1\]"):
            await familiar.apply(
                [{"action": "add", "type": "fact", "content": "never written"}, action]
            )
    # Nothing was written, and the hidden memories are as they were.
    full = bus.agent(workflow_id="wf_t")
    assert "never written" not in {m.content for m in (await full.list(limit=20)).memories}
    kept = (await full.get([ids["private"], ids["shared"]])).memories
    assert [(m.content, m.superseded_by) for m in kept] == [
        ("the private launch codeword is zebra private", None),
        ("the shared launch codeword is zebra shared", None),
    ]


async def test_an_explicit_store_must_be_visible(bus: MemoryBus, as_trust: As) -> None:
    inner = as_trust("inner").agent(workflow_id="wf_t")
    reply = await inner.add("knowledge", "for familiar eyes too", store="social")
    assert (await inner.get([reply.id])).memories[0].store == "social"
    with pytest.raises(Forbidden, match="private"):
        await inner.add("knowledge", "a secret", store="private")
    full = bus.agent(workflow_id="wf_t")
    assert (await full.add("knowledge", "to the team", store="shared")).id
    assert (await full.describe()).total == 2


async def test_exact_dedup_never_folds_into_another_store(bus: MemoryBus, as_trust: As) -> None:
    # An inner agent repeating a private memory must get its own memory, not the private id.
    full = bus.agent(workflow_id="wf_t")
    private = await full.add("knowledge", "The deploy key rotates on Mondays")
    inner = as_trust("inner").agent(workflow_id="wf_t")
    shared = await inner.add("knowledge", "The deploy key rotates on Mondays")
    assert shared.id != private.id and shared.duplicate_of is None
    again = await inner.add("knowledge", "the deploy key rotates on mondays")
    assert again.duplicate_of == shared.id


async def test_an_edited_memory_keeps_the_dedup_key_of_its_store(
    bus: MemoryBus, as_trust: As
) -> None:
    inner = as_trust("inner").agent(workflow_id="wf_t")
    shared = await inner.add("knowledge", "The standup moves to ten")
    await inner.update(shared.id, content="The standup moves to eleven")

    # A private repeat of the new text is its own memory; a shared one folds into the edit.
    private = await bus.agent(workflow_id="wf_t").add("knowledge", "the standup moves to eleven")
    assert private.duplicate_of is None and private.id != shared.id
    again = await inner.add("knowledge", "The standup moves to eleven")
    assert again.duplicate_of == shared.id


async def test_public_trust_is_forbidden_everything(bus: MemoryBus, as_trust: As) -> None:
    public = as_trust("public").agent(workflow_id="wf_t")
    with pytest.raises(Forbidden, match="no memory store"):
        await public.search("anything")
    with pytest.raises(Forbidden):
        await public.add("knowledge", "let me in")
    assert (await bus.agent(workflow_id="wf_t").describe()).total == 0


async def test_workspaces_need_full_trust(bus: MemoryBus, as_trust: As) -> None:
    with pytest.raises(Forbidden, match="full trust"):
        await as_trust("inner").create_workspace(
            "W", description="d", root_folder="/w", purpose="p"
        )
    await bus.create_workspace("W", description="d", root_folder="/w", purpose="p")
    with pytest.raises(Forbidden):
        await as_trust("familiar").list_workspaces()


async def test_an_unknown_trust_token_is_invalid_request(bus: MemoryBus) -> None:
    msg = await bus.nc.request(f"mem.{bus.namespace}.search.root", b'{"query": "x"}', timeout=5)
    reply = json.loads(msg.data)
    assert reply["code"] == "invalid_request"
    assert "inner, familiar, public" in reply["error"]


async def test_a_spelt_out_full_trust_token_is_refused_not_full_trust(bus: MemoryBus) -> None:
    # Full trust is the subject without a token; `.full` is none of inner, familiar, public.
    await bus.agent().add("knowledge", "the private launch codeword is zebra")
    msg = await bus.nc.request(f"mem.{bus.namespace}.search.full", b'{"query": "zebra"}', timeout=5)
    reply = json.loads(msg.data)
    assert (reply["success"], reply["code"]) == (False, "invalid_request")
    assert "inner, familiar, public" in reply["error"]
    msg = await bus.nc.request(
        f"mem.{bus.namespace}.add.full", b'{"type": "knowledge", "content": "x"}', timeout=5
    )
    assert json.loads(msg.data)["code"] == "invalid_request"
    assert (await bus.agent().describe()).total == 1


async def test_events_carry_the_store(bus: MemoryBus, as_trust: As) -> None:
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.wf_t.>")
    await bus.nc.flush()
    inner = as_trust("inner").agent(workflow_id="wf_t")
    await inner.add("context", "scratch for the team")
    event = msgspec.json.decode((await sub.next_msg(timeout=5)).data, type=Event)
    await sub.unsubscribe()
    assert (event.action, event.store) == ("added", "shared")
