"""Fuzz `dispatch()` in this process, against the session's real Redis.

Inputs come from tests/fuzzing.py: bodies built from each operation's JSON schema (valid,
mutated, and raw bytes), with hostile strings and the ids, workspaces and states that a
seeding step created in the test's namespace. Every input must get a well-formed reply: a
JSON object with a boolean `success`, and on an error a typed code (never `internal`) with a
message. A bounded, derandomized number of examples runs here; bench/fuzz.py does long runs.

Timings are recorded and printed (`test_slowest_inputs_are_reported`), never asserted: each
input is bounded only by the suite's per-test timeout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from inprocess import InProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fuzzing
from fuzzing import FuzzInput, Outcome, Pool

from contracts.operations import OPERATIONS
from handlers.dispatch import dispatch

# Inputs per operation (every operation of contracts.operations.TABLE is fuzzed on its own).
EXAMPLES = 28

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: it would replay many inputs against Redis; the failure message carries
    # the whole input instead.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
)

# The outcomes of this module's inputs, for the report of the slowest.
OUTCOMES: list[Outcome] = []


def test_every_operation_is_fuzzed() -> None:
    assert fuzzing.OPS == OPERATIONS
    assert len(set(OPERATIONS)) == len(OPERATIONS)


@pytest.fixture
async def pool(in_process: InProcess, ns: str) -> Pool:
    return await fuzzing.seed_pool(ns, in_process.deps)


def _failure(outcome: Outcome) -> str:
    item, reply = outcome.input.describe(head=4000), outcome.reply[:2000]
    return f"{outcome.problem}\ninput: {item}\nreply: {reply!r}"


async def _send(item: FuzzInput, ns: str, in_process: InProcess) -> Outcome:
    outcome = await fuzzing.run_input(item, ns, in_process.deps)
    OUTCOMES.append(outcome)
    return outcome


@pytest.mark.parametrize("op", OPERATIONS)
@FUZZ_SETTINGS
@given(data=st.data())
async def test_fuzzed_inputs_get_a_typed_reply(
    op: str, data: st.DataObject, in_process: InProcess, ns: str, pool: Pool
) -> None:
    item = data.draw(fuzzing.inputs(pool, (op,)), label="input")
    outcome = await _send(item, ns, in_process)
    assert outcome.problem is None, _failure(outcome)


def _body(value: object) -> bytes:
    return fuzzing.encode(value)


# Inputs that broke handlers before, or that stress one path in a known way: a fixed corpus
# beside the generated inputs.
HOSTILE_INPUTS = [
    pytest.param("add", b'{"a":"' + b'\\"' * 120_000, id="escaped-quotes-unterminated"),
    pytest.param("add", b'{"a":"' + b'\\"' * 120_000 + b"[" * 40, id="escaped-quotes-brackets"),
    pytest.param("search", b"[" * 33 + b'"' + b'\\"' * 100_000, id="brackets-then-escapes"),
    pytest.param("add", b'{"a":"' + b"\\\\" * 120_000 + b'"}', id="escaped-backslashes"),
    pytest.param("add", b'{"a":' * 50_000, id="open-objects"),
    pytest.param("list", b"[" * 250_000, id="open-arrays"),
    pytest.param("add", b'"' * 250_000, id="quotes"),
    pytest.param("add", b"x" * (256 * 1024 + 1), id="over-the-body-limit"),
    pytest.param(
        "add", _body({"type": "knowledge", "content": "x", "workflow_id": "_"}), id="wf-_"
    ),
    pytest.param("add", _body({"type": "knowledge", "content": "x", "tags": ["_"]}), id="tag-_"),
    pytest.param("search", _body({"query": "x", "workflow_id": "_"}), id="search-wf-_"),
    pytest.param("search", _body({"query": "x", "tags": ["_"]}), id="search-tag-_"),
    pytest.param("search", _body({"query": "_"}), id="search-query-_"),
    pytest.param("list", _body({"workflow_id": "_", "scope": "workflow"}), id="list-wf-_"),
    pytest.param("list", _body({"tags": ["_", "-", ":"]}), id="list-odd-tags"),
    pytest.param("describe", _body({"workflow_id": "-"}), id="describe-wf--"),
    pytest.param("people", _body({"query": "_"}), id="people-query-_"),
    pytest.param(
        "clear_by_type", _body({"type": "knowledge", "workflow_id": "_"}), id="clear-wf-_"
    ),
    pytest.param("add", _body({"type": "knowledge", "content": "a\x00b"}), id="nul-content"),
    pytest.param("add", _body({"type": "knowledge", "title": "t\x00"}), id="nul-title"),
    pytest.param("capture", _body({"tool": "t\x00", "output": "o\x00"}), id="nul-capture"),
    pytest.param("search", _body({"query": "\x00"}), id="nul-query"),
    pytest.param(
        "add", _body({"type": "knowledge", "content": "\ud800"}), id="lone-surrogate-escape"
    ),
    pytest.param(
        "add",
        b'{"type":"knowledge","content":"\xed\xa0\x80"}',
        id="lone-surrogate-bytes",
    ),
    pytest.param("search", _body({"query": "\udfff"}), id="search-lone-surrogate"),
    pytest.param(
        "add",
        _body({"type": "knowledge", "content": "x", "related_people": ["\ud800"]}),
        id="person-lone-surrogate",
    ),
    pytest.param(
        "search",
        _body({"query": "@tags:{x} | -(a) ~b *c* %d% $e [1 2] =>{$x}"}),
        id="redisearch-syntax",
    ),
    pytest.param("search", _body({"query": "\u202e\u200b\ufeff"}), id="invisible-query"),
    pytest.param("people", _body({"query": "*"}), id="people-star"),
    # Control characters in a `people` filter (found by bench/fuzz.py, 100k inputs).
    pytest.param("search", _body({"query": "x", "people": ["a\x00b"]}), id="search-people-nul"),
    pytest.param("search", _body({"query": "x", "people": ["\x7f"]}), id="search-people-del"),
    pytest.param("list", _body({"people": ["\x01"]}), id="list-people-control"),
    pytest.param(
        "recall",
        _body({"message": "x", "session_id": "s", "people": ["\x12"]}),
        id="recall-people-control",
    ),
    pytest.param(
        "search", _body({"query": "x", "people": ["\t\n\x1f"]}), id="search-people-blanks"
    ),
    pytest.param(
        "add",
        _body({"type": "knowledge", "content": "😀" * 8192, "importance": 1.0}),
        id="content-at-the-byte-limit",
    ),
    pytest.param(
        "add",
        _body({"type": "knowledge", "content": "é" * 16_385}),
        id="content-past-the-byte-limit",
    ),
    pytest.param("add", b'{"type":"knowledge","content":"x","importance":NaN}', id="nan"),
    pytest.param("search", b'{"query":"x","min_score":1e999}', id="min-score-1e999"),
    pytest.param("search", b'{"query":"x","min_score":-1e308}', id="min-score-huge"),
    pytest.param("recall", b'{"message":"x","session_id":"s","turn":9007199254740992}', id="turn"),
    pytest.param("list", b'{"offset":10000,"limit":200}', id="list-deepest-page"),
    pytest.param("search", _body({"query": "x", "since": "9999-12-31T23:59:59Z"}), id="since-9999"),
    pytest.param("search", _body({"query": "x", "until": "0001-01-01T00:00:00Z"}), id="until-0001"),
    pytest.param(
        "add", _body({"type": "knowledge", "content": "x", "ttl_s": 3155760000}), id="ttl"
    ),
    pytest.param(
        "add", _body({"type": "knowledge", "content": "x", "metadata": {"a": 10**30}}), id="bigint"
    ),
    pytest.param("create_workspace", b'{"name":"\\u200b"}', id="workspace-zero-width"),
    pytest.param("load_workspace", _body({"name": "a" * 129}), id="workspace-name-too-long"),
]


@pytest.mark.parametrize(("op", "body"), HOSTILE_INPUTS)
async def test_hostile_inputs_get_a_typed_reply(
    op: str, body: bytes, in_process: InProcess, ns: str
) -> None:
    outcome = await _send(FuzzInput(op=op, body=body, kind="hostile"), ns, in_process)
    assert outcome.problem is None, _failure(outcome)


def test_slowest_inputs_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints the slowest inputs of this module (no timing is asserted)."""
    slowest = sorted(OUTCOMES, key=lambda o: o.ms, reverse=True)[:5]
    codes: dict[str, int] = {}
    for outcome in OUTCOMES:
        codes[outcome.code or "success"] = codes.get(outcome.code or "success", 0) + 1
    with capsys.disabled():
        print(f"\nfuzz: {len(OUTCOMES)} inputs, replies {json.dumps(codes, sort_keys=True)}")
        for outcome in slowest:
            print(f"  {outcome.ms:8.1f} ms  {outcome.input.describe(head=100)}")


# The reads a stored memory meets: none of them may fail on what an import accepted.
_READS: tuple[tuple[str, dict[str, object]], ...] = (
    ("list", {"limit": 200}),
    ("list", {"limit": 200, "include_superseded": True, "mode": "compact"}),
    ("describe", {}),
    ("search", {"query": "fuzz memory text", "limit": 50, "include_superseded": True}),
    ("search", {"query": "fuzz memory text", "limit": 50, "mode": "text"}),
    ("people", {"limit": 200}),
    ("export", {"limit": 1000}),
    ("recall", {"message": "fuzz memory text", "session_id": "fuzz-import"}),
)


async def test_what_an_import_accepts_every_read_serves(in_process: InProcess, ns: str) -> None:
    pool = await fuzzing.seed_pool(ns, in_process.deps)
    deps = in_process.deps
    # Hostile bodies (ids, times, counters at the edges): refused or accepted, never internal;
    # tame ones (drawn fields the contract accepts): every one imported.
    hostile = fuzzing.draw(fuzzing.valid_bodies("import", pool), 40, seed=20)
    tame = fuzzing.draw(fuzzing.tame_import_bodies(pool), 30, seed=21)
    imported: list[str] = []
    for body in [*hostile, *tame]:
        _, error = await dispatch("import", f"mem.{ns}.import", _body(body), deps)
        if error is None:
            imported += [m["id"] for m in body["memories"]]
        else:
            assert error.code != "internal", (error.message, body)
            assert body not in tame, (error.message, body)
    by_id = [("get", {"ids": imported[:100]})]
    for mid in imported:
        by_id += [("timeline", {"anchor": mid}), ("history", {"id": mid})]
    for op, read in [*_READS, *by_id]:
        for scope in ({}, {"scope": "both"}, {"workflow_id": "wf_fuzz"}):
            if op in ("get", "history", "export", "people") and scope:
                continue
            _reply, error = await dispatch(op, f"mem.{ns}.{op}", _body({**read, **scope}), deps)
            assert error is None or error.code != "internal", (op, read, scope, error.message)
