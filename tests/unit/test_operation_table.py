"""contracts.operations.TABLE is the one list of operations: everything else follows it.

An operation added to the table without a handler function, an SDK method, a protocol text
or a consistent tool fails here, by name, instead of as an `internal` KeyError at run time.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from bus.client import AgentMemory, MemoryBus
from bus.tools import TOOL_OPS, tool_specs
from contracts.messages import Request
from contracts.operations import (
    BY_NAME,
    DURABLE_OPERATIONS,
    FULL_TRUST_OPERATIONS,
    OPERATIONS,
    REQUEST_TYPES,
    TABLE,
    TRIMMED,
    Operation,
)
from deploy.nats_auth import Agent, agent_permissions
from handlers.dispatch import FULL_TRUST_ONLY
from handlers.ops import HANDLERS

ROOT = Path(__file__).resolve().parents[2]
# SDK methods whose name is not the operation's: `import` is a Python keyword.
SDK_NAMES = {"import": "import_memories"}


@pytest.mark.parametrize("op", TABLE, ids=lambda op: op.name)
def test_every_operation_has_a_handler_of_its_request_and_reply(op: Operation) -> None:
    fn = HANDLERS.get(op.name)
    assert fn is not None, f"no @handles({op.request.__name__}) function for {op.name!r}"
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)
    assert hints[params[1]] is op.request
    returned = hints["return"]
    shapes = set(typing.get_args(returned)) or {returned}
    assert shapes == set(op.replies), (op.name, returned)


@pytest.mark.parametrize("op", TABLE, ids=lambda op: op.name)
def test_every_operation_has_an_sdk_method(op: Operation) -> None:
    name = SDK_NAMES.get(op.name, op.name)
    assert callable(getattr(AgentMemory, name, None)) or callable(getattr(MemoryBus, name, None))


@pytest.mark.parametrize("op", TABLE, ids=lambda op: op.name)
def test_every_operation_is_written_in_both_protocol_texts(op: Operation) -> None:
    ours = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    written, _, generated = ours.partition("<!-- generated from contracts/")
    assert f"`{op.name}`" in written, f"docs/protocol.md says nothing of `{op.name}`"
    assert f"| `{op.name}` | `{op.request.__name__}` |" in generated


def test_every_tool_runs_an_operation_and_says_what_it_does() -> None:
    specs = tool_specs()
    assert {s.name for s in specs} == set(TOOL_OPS)
    for spec in specs:
        assert spec.op in BY_NAME, spec
        assert spec.op == TOOL_OPS[spec.name]
        assert len(spec.description) > 80, spec.name  # a text a model can act on
        # A tool never offers what its operation's request does not take.
        fields = set(REQUEST_TYPES[spec.op].__struct_fields__)
        assert set(spec.parameters.get("properties", {})) <= fields, spec.name


def test_the_lists_derived_from_the_table() -> None:
    assert tuple(op.name for op in TABLE) == OPERATIONS
    assert len(set(OPERATIONS)) == len(OPERATIONS)
    assert len({op.request for op in TABLE}) == len(TABLE)  # a request type names its operation
    assert all(issubclass(op.request, Request) for op in TABLE)
    assert set(DURABLE_OPERATIONS) == {"add", "update", "delete", "capture", "import"}
    assert set(FULL_TRUST_OPERATIONS) == FULL_TRUST_ONLY
    for reply, field in TRIMMED.items():
        assert field in reply.__struct_fields__ and "truncated" in reply.__struct_fields__


def test_reduced_trust_agents_may_send_only_durable_operations_open_to_them() -> None:
    allowed = agent_permissions(Agent("a1", "ns1", "inner"))["publish"]["allow"]
    durable = {s.split(".")[2] for s in allowed if s.startswith("memq.")}
    assert durable == set(DURABLE_OPERATIONS) - set(FULL_TRUST_OPERATIONS)


def test_the_handlers_refuse_to_start_with_an_operation_left_unbound() -> None:
    # handlers.ops finds its functions by importing every module of the package; an
    # operation of the table that none binds stops the import, by name.
    code = (
        "import contracts.operations as table\n"
        "table.OPERATIONS += ('ghost',)\n"
        "import handlers.ops\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ImportError: operations without a handler function: ghost" in done.stderr
