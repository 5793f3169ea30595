"""The LLM tools of `bus.tools`: definitions generated from the contracts, the system prompt,
and the executor's validation (no network: `prepare` never touches the bus)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import msgspec
import pytest
from nats.aio.client import Client as NatsClient

from bus.client import MemoryBus
from bus.tools import (
    EXAMPLES,
    FIELD_TEXTS,
    HIDDEN_FIELDS,
    TOOL_NAMES,
    TOOL_OPS,
    ToolCallError,
    ToolExecutor,
    ToolSpec,
    _compact,
    check_identity,
    mcp_tools,
    openai_tools,
    request_schema,
    system_prompt,
    tool_specs,
)
from contracts import limits
from contracts.messages import Context
from contracts.operations import REQUEST_TYPES
from contracts.types import DEFAULT_TYPES, STATE_TYPE, TypeConfig

EXPECTED_NAMES = [
    "memory_add",
    "memory_search",
    "memory_describe",
    "memory_list",
    "memory_get",
    "memory_update",
    "memory_delete",
    "memory_timeline",
    "memory_history",
    "memory_people",
    "memory_reconcile",
    "memory_apply",
    "create_workspace",
    "list_workspaces",
    "load_workspace",
    "update_workspace",
    "archive_workspace",
    "create_state",
    "list_states",
    "load_state",
    "archive_state",
]
SPECS = tool_specs()
BY_NAME = {spec.name: spec for spec in SPECS}
STATE_TOOLS = ["create_state", "list_states", "load_state", "archive_state"]


def _bus() -> MemoryBus:
    # Never connected: `prepare` must not need the network.
    return MemoryBus(NatsClient(), "default", 5.0, owns=False)


def executor(**identity: Any) -> ToolExecutor:
    return ToolExecutor(_bus(), **identity)


FULL = {
    "workflow_id": "wf_tools",
    "agent_id": "tool-agent",
    "workspace": "Project Alpha",
    "session_id": "sess-1",
}


def validator(spec: ToolSpec) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(spec.parameters)
    return jsonschema.Draft202012Validator(spec.parameters)


def example_in_description(spec: ToolSpec) -> dict[str, Any]:
    match = re.search(r"\nExample: (\{.*\})\s*$", spec.description, re.DOTALL)
    assert match, f"{spec.name}: the description ends with no `Example: {{...}}`"
    parsed: dict[str, Any] = json.loads(match.group(1))
    return parsed


def walk(node: Any) -> list[dict[str, Any]]:
    """Every object in a schema."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += walk(value)
    elif isinstance(node, list):
        for value in node:
            found += walk(value)
    return found


# ----------------------------------------------------------------------------- definitions


def test_the_tools_are_exactly_the_twenty_one_in_order() -> None:
    assert [spec.name for spec in SPECS] == EXPECTED_NAMES
    assert list(TOOL_NAMES) == EXPECTED_NAMES
    assert all(TOOL_OPS[spec.name] == spec.op for spec in SPECS)
    assert all(spec.op in REQUEST_TYPES for spec in SPECS)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_schema_accepts_the_example_shown_in_the_description(spec: ToolSpec) -> None:
    shown = example_in_description(spec)

    assert shown == spec.example == EXAMPLES[spec.name]
    validator(spec).validate(shown)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_schema_rejects_the_example_with_an_unknown_field(spec: ToolSpec) -> None:
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        validator(spec).validate({**spec.example, "colour": "blue"})


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("hidden", HIDDEN_FIELDS)
def test_the_schema_rejects_identity_fields_a_model_might_add(spec: ToolSpec, hidden: str) -> None:
    assert not validator(spec).is_valid({**spec.example, hidden: "wf_x"})


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_example_decodes_into_the_contract_request_with_the_executors_identity(
    spec: ToolSpec,
) -> None:
    prepared = executor(**FULL).prepare(spec.name, spec.example)
    req = prepared.request

    assert type(req) is REQUEST_TYPES[spec.op]
    assert req.context == Context(session_id="sess-1")
    fields = type(req).__struct_fields__
    if "workflow_id" in fields:
        assert req.workflow_id == "wf_tools"  # type: ignore[attr-defined]
    if "agent_id" in fields:
        assert req.agent_id == "tool-agent"  # type: ignore[attr-defined]
    # What is sent is what the handler decodes to the same request.
    assert msgspec.json.decode(prepared.body, type=type(req)) == req


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_no_schema_has_refs_python_regex_or_identity_fields(spec: ToolSpec) -> None:
    text = json.dumps(spec.parameters)

    assert "$ref" not in text and "$defs" not in text
    assert "\\Z" not in text and "\\\\Z" not in text
    for node in walk(spec.parameters):
        assert not set(node.get("properties", {})) & set(HIDDEN_FIELDS)
    assert spec.parameters["type"] == "object"
    assert spec.parameters["additionalProperties"] is False


def test_the_contract_schemas_do_have_what_the_tools_take_out() -> None:
    # Guards the test above: without rewriting, the contract's schemas would fail it.
    raw = json.dumps(msgspec.json.schema(REQUEST_TYPES["create_state"]))
    assert "$ref" in raw and "\\\\Z" in raw
    assert {"context", "agent_id"} <= set(request_schema("create_state")["properties"])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_parameter_has_a_description_and_no_text_is_stale(spec: ToolSpec) -> None:
    props = spec.parameters["properties"]

    assert all(p.get("description", "").strip() for p in props.values())
    assert set(FIELD_TEXTS[spec.name]) == set(props)


def test_limits_and_enums_come_from_the_contracts() -> None:
    search = BY_NAME["memory_search"].parameters["properties"]
    add = BY_NAME["memory_add"].parameters["properties"]
    assert search["limit"]["maximum"] == limits.MAX_SEARCH_LIMIT
    assert search["scope"]["enum"] == ["both", "general", "workflow"]
    assert add["tags"]["maxItems"] == limits.MAX_TAGS
    assert add["supersedes"]["maxItems"] == limits.MAX_SUPERSEDES
    assert add["type"]["pattern"] == "^[a-z0-9_]{1,64}$"
    assert BY_NAME["memory_list"].parameters["properties"]["limit"]["maximum"] == (
        limits.MAX_LIST_LIMIT
    )
    # Optional fields are given or left out, not null.
    assert add["importance"]["type"] == "number" and "anyOf" not in add["importance"]


def test_required_fields_follow_the_contract_adjusted_for_what_the_executor_fills() -> None:
    def required(name: str) -> set[str]:
        return set(BY_NAME[name].parameters["required"])

    assert required("memory_add") == {"type"}
    # `embedding` is hidden, so a search needs its `query`.
    assert required("memory_search") == {"query"}
    # v4: `ids` or `keys` (the request checks that one is given).
    assert required("memory_get") == set()
    assert required("create_workspace") == {"name", "description", "root_folder", "purpose"}
    assert required("create_state") == {
        "name",
        "conversation_context",
        "active_task",
        "active_files",
        "next_steps",
    }
    for name in STATE_TOOLS:
        assert "workspace" in BY_NAME[name].parameters["properties"]
        assert "workspace" not in required(name)
        assert "workspace" in REQUEST_TYPES[TOOL_OPS[name]].__struct_fields__


def test_the_search_schema_refuses_a_search_without_a_query() -> None:
    assert not validator(BY_NAME["memory_search"]).is_valid({"types": ["fact"]})


def test_openai_format() -> None:
    tools = openai_tools()

    assert [t["function"]["name"] for t in tools] == EXPECTED_NAMES
    for tool, spec in zip(tools, SPECS, strict=True):
        assert set(tool) == {"type", "function"} and tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}
        assert tool["function"]["parameters"] == spec.parameters
        assert tool["function"]["description"] == spec.description
    json.dumps(tools)  # plain JSON


def test_mcp_format() -> None:
    tools = mcp_tools()

    assert [t["name"] for t in tools] == EXPECTED_NAMES
    for tool, spec in zip(tools, SPECS, strict=True):
        assert set(tool) == {"name", "description", "inputSchema"}
        assert tool["inputSchema"] == spec.parameters
        assert tool["inputSchema"]["type"] == "object"


def test_the_formats_hand_out_copies() -> None:
    spec = tool_specs()[0]
    spec.openai()["function"]["parameters"]["properties"].clear()
    spec.mcp()["inputSchema"]["properties"].clear()
    assert spec.parameters["properties"]


# ----------------------------------------------------------------------------- type table


def test_memory_add_lists_every_type_it_may_add_with_its_scope() -> None:
    spec = BY_NAME["memory_add"]
    for name, config in DEFAULT_TYPES.items():
        if name == STATE_TYPE:
            continue
        where = "general" if config.scope == "general" else "this workflow"
        assert re.search(rf"`{name}` \({where}", spec.description), name
        assert name in spec.parameters["properties"]["type"]["description"]
    assert f"`{STATE_TYPE}`" not in spec.description


def test_the_type_text_follows_a_configured_table() -> None:
    table = {
        "runbook": TypeConfig(importance=0.9, scope="general"),
        "scratch": TypeConfig(importance=0.1, scope="workflow", ttl_s=7200),
    }
    spec = next(s for s in tool_specs(table) if s.name == "memory_add")

    assert "`runbook` (general)" in spec.description
    assert "`scratch` (this workflow, forgotten after 2 h)" in spec.description
    assert "user_pref" not in spec.parameters["properties"]["type"]["description"]
    assert "`runbook`" in system_prompt(types=table)


# ----------------------------------------------------------------------------- system prompt


def test_the_system_prompt_names_every_type() -> None:
    prompt = system_prompt()
    for name in DEFAULT_TYPES:
        assert f"`{name}`" in prompt, name


def test_the_system_prompt_refers_only_to_tools_that_exist() -> None:
    prompt = system_prompt()
    tool_like = re.compile(r"^(memory_\w+|\w+_(workspace|workspaces|state|states))$")
    named = {word for word in re.findall(r"`([a-z_]+)`", prompt) if tool_like.match(word)}

    assert named <= set(TOOL_NAMES), named - set(TOOL_NAMES)
    assert {"memory_search", "memory_add", "memory_update", "create_state", "load_state"} <= named


def test_the_system_prompt_has_the_four_parts_and_the_workspace() -> None:
    prompt = system_prompt(workspace="Project Alpha")
    for heading in (
        "## Memory & Knowledge Management",
        "### When to search memory",
        "### When to save to memory",
        "### How to write good notes",
        "### Maintaining memory",
        "### Scopes",
        "### Workspaces and states",
    ):
        assert heading in prompt
    assert '"Project Alpha"' in prompt
    assert "supersedes" in prompt
    assert "Project Alpha" not in system_prompt()


# ----------------------------------------------------------------------------- executor


def errors_of(name: str, arguments: Any, **identity: str) -> ToolCallError:
    with pytest.raises(ToolCallError) as caught:
        executor(**identity).prepare(name, arguments)
    return caught.value


def test_an_unknown_tool_lists_the_tools() -> None:
    err = errors_of("memory_serch", {"query": "x"})
    assert err.code == "invalid_request"
    assert 'Did you mean "memory_search"' in err.message
    assert all(name in err.message for name in EXPECTED_NAMES)


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "42", [1, 2]])
def test_arguments_that_are_not_an_object_are_refused(arguments: Any) -> None:
    err = errors_of("memory_search", arguments)
    assert err.code == "invalid_request" and "JSON object" in err.message


def test_arguments_that_are_not_json_are_refused() -> None:
    err = errors_of("memory_search", '{"query": "x"')
    assert err.code == "invalid_request" and "not valid JSON" in err.message


def test_arguments_may_come_as_json_text_or_nothing() -> None:
    ex = executor(**FULL)
    assert ex.prepare("memory_search", '{"query": "db"}').request.query == "db"  # type: ignore[attr-defined]
    assert ex.prepare("list_workspaces", None).op == "list_workspaces"
    assert ex.prepare("memory_describe", "").op == "describe"


@pytest.mark.parametrize("hidden", HIDDEN_FIELDS)
def test_a_model_cannot_set_the_identity(hidden: str) -> None:
    err = errors_of("memory_add", {"type": "fact", "content": "x", hidden: "wf_other"}, **FULL)
    assert f'"{hidden}"' in err.message and "sets it itself" in err.message


def test_an_unknown_field_is_named_with_a_suggestion() -> None:
    err = errors_of("memory_add", {"type": "fact", "content": "x", "tag": ["a"]})
    assert 'Unknown field "tag"' in err.message and 'Did you mean "tags"' in err.message


def test_an_invalid_value_names_the_field() -> None:
    err = errors_of("memory_search", {"query": "x", "limit": 0})
    assert err.code == "invalid_request"
    assert "$.limit" in err.message and "memory_search" in err.message


def test_an_invalid_enum_value_lists_the_allowed_ones() -> None:
    err = errors_of("memory_search", {"query": "x", "scope": "everything"})
    assert "both, general, workflow" in err.message


def test_the_contracts_own_rules_come_back_as_text() -> None:
    err = errors_of("memory_add", {"type": "fact"})
    assert "`content`" in err.message and "`title`" in err.message
    err = errors_of("memory_update", {"id": "01J"})
    assert "changes nothing" in err.message


def test_state_tools_need_a_workspace_from_the_model_or_the_configuration() -> None:
    args = {k: v for k, v in EXAMPLES["load_state"].items() if k != "workspace"}
    err = errors_of("load_state", args)
    assert "workspace" in err.message and "list_workspaces" in err.message

    configured = executor(workspace="Ops").prepare("load_state", args).request
    assert configured.workspace == "Ops"  # type: ignore[attr-defined]
    explicit = executor(workspace="Ops").prepare("load_state", EXAMPLES["load_state"]).request
    assert explicit.workspace == "Project Alpha"  # type: ignore[attr-defined]


def test_reads_and_adds_default_to_the_configured_workspace() -> None:
    ex = executor(workspace="Ops")
    assert ex.prepare("memory_add", EXAMPLES["memory_add"]).request.workspace == "Ops"  # type: ignore[attr-defined]
    assert ex.prepare("memory_search", {"query": "x"}).request.workspace == "Ops"  # type: ignore[attr-defined]
    assert ex.prepare("memory_list", {}).request.workspace == "Ops"  # type: ignore[attr-defined]
    assert ex.prepare("memory_describe", {}).request.workspace == "Ops"  # type: ignore[attr-defined]
    chosen = ex.prepare("memory_list", {"workspace": "Dev"}).request
    assert chosen.workspace == "Dev"  # type: ignore[attr-defined]
    assert executor().prepare("memory_list", {}).request.workspace is None  # type: ignore[attr-defined]


def test_without_identity_nothing_is_added() -> None:
    prepared = executor().prepare("memory_add", EXAMPLES["memory_add"])
    sent = json.loads(prepared.body)
    assert not set(sent) & set(HIDDEN_FIELDS)


def test_too_large_arguments_are_refused_before_sending() -> None:
    err = errors_of("memory_add", {"type": "fact", "content": "x" * (limits.MAX_BODY_BYTES + 1)})
    assert err.code == "too_large"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workflow_id", "wf 1"),
        ("workspace", " padded "),
        ("agent_id", ""),
        ("session_id", "a/b"),
    ],
)
def test_a_bad_configured_identity_fails_at_construction(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field):
        executor(**{field: value})
    with pytest.raises(ValueError, match=field):
        check_identity(field, value)


async def test_run_turns_every_refusal_into_text_without_touching_the_bus() -> None:
    ex = executor()
    calls: list[tuple[str, Any]] = [
        ("nope", {}),
        ("memory_search", "not json"),
        ("memory_search", {"query": "x", "workflow_id": "wf"}),
        ("load_state", {"name": "x"}),
    ]
    for name, arguments in calls:
        result = await ex.run(name, arguments)
        text = await ex.call(name, arguments)
        assert json.loads(text) == result.data
        assert result.ok is False and result.code == "invalid_request"
        assert result.data["error"]


def test_replies_drop_nulls_and_nested_empties_but_keep_answers() -> None:
    reply = {
        "success": True,
        "results": [],
        "missing": [],
        "truncated": False,
        "count": 0,
        "data": {"name": "x", "workflows": [], "preferences": {}, "description": None},
        "memories": [{"id": "1", "facts": [], "title": None, "importance": 0.0, "tags": ["a"]}],
    }

    assert _compact(reply) == {
        "success": True,
        "results": [],
        "missing": [],
        "truncated": False,
        "count": 0,
        "data": {"name": "x"},
        "memories": [{"id": "1", "importance": 0.0, "tags": ["a"]}],
    }
