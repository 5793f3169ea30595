"""docs/asyncapi.yaml is generated from the contracts, is current, says what the protocol
says, and is valid for the official AsyncAPI parser; the TypeScript SDK's types come from
the same schemas and are current too."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType

import pytest
import yaml
from node_client import CLIENT, ensure_node_modules, missing_tools, run

from contracts import asyncapi
from contracts.messages import ERROR_CODES
from contracts.operations import TABLE


def test_docs_asyncapi_yaml_is_current() -> None:
    assert asyncapi.DOC.read_text(encoding="utf-8") == asyncapi.render(), (
        "run: python -m contracts.asyncapi"
    )


def test_the_yaml_reads_back_as_the_document() -> None:
    assert yaml.safe_load(asyncapi.render()) == asyncapi.document()


def test_every_operation_has_its_channels_its_reply_and_its_schemas() -> None:
    doc = asyncapi.document()
    channels, operations = doc["channels"], doc["operations"]
    schemas, messages = doc["components"]["schemas"], doc["components"]["messages"]
    for op in TABLE:
        replies = [r.__name__ for r in op.replies] + ["ErrorReply"]
        assert channels[op.name]["address"] == f"mem.{{ns}}.{op.name}"
        assert channels[f"{op.name}.reduced"]["address"] == f"mem.{{ns}}.{op.name}.{{trust}}"
        assert list(channels[f"{op.name}.reply"]["messages"]) == replies
        for name in (op.name, f"{op.name}.reduced"):
            assert operations[name]["action"] == "receive"
            assert operations[name]["reply"]["channel"] == {"$ref": f"#/channels/{op.name}.reply"}
        assert messages[op.request.__name__]["payload"] == {
            "$ref": f"#/components/schemas/{op.request.__name__}"
        }
        for name in (op.request.__name__, *replies):
            assert schemas[name]["type"] == "object"
        durable = {f"memq.{op.name}", f"memq.{op.name}.reduced"} & set(channels)
        assert bool(durable) == op.durable
        if op.durable:
            assert channels[f"memq.{op.name}"]["address"] == f"memq.{{ns}}.{op.name}"
            assert "reply" not in operations[f"memq.{op.name}"]
    assert channels["events"]["address"] == "mem.{ns}.events.{scope}.{type}.{action}"
    assert operations["events"]["action"] == "send"
    assert channels["events.rejected"]["address"] == "mem.{ns}.events._rejected.{op}.rejected"


def test_the_error_shape_lists_every_code_with_its_meaning() -> None:
    schemas = asyncapi.document()["components"]["schemas"]
    assert schemas["ErrorCode"]["enum"] == list(ERROR_CODES)
    assert schemas["ErrorReply"]["properties"]["code"] == {"$ref": "#/components/schemas/ErrorCode"}
    assert set(schemas["ErrorReply"]["required"]) == {"code", "error"}
    for code, status, _ in asyncapi.error_codes():
        assert f"- `{code}` ({status}): " in schemas["ErrorCode"]["description"]


def test_a_version_conflicts_reply_names_the_memory_and_its_current_version() -> None:
    schemas = asyncapi.document()["components"]["schemas"]
    reply = schemas["ErrorReply"]["properties"]
    assert reply["id"]["type"] == "string" and "conflict" in reply["id"]["description"]
    assert reply["current_version"]["type"] == "integer"
    assert "`expected_version`" in reply["current_version"]["description"]
    conflict = next(
        line for line in schemas["ErrorCode"]["description"].splitlines() if "`conflict`" in line
    )
    assert "current_version" in conflict
    # The write requests that take it, and the replies and records that report it.
    for name in ("AddRequest", "UpdateRequest", "ApplyUpdate", "ApplySupersede", "ApplyDelete"):
        assert "expected_version" in schemas[name]["properties"], name
    for name in ("AddReply", "UpdateReply", "Memory", "Event"):
        assert "version" in schemas[name]["properties"], name
    assert {"key", "expected_version"} <= set(schemas["AddRequest"]["properties"])
    assert "replaced" in schemas["AddReply"]["properties"]
    assert "keys" in schemas["GetRequest"]["properties"]
    assert "missing_keys" in schemas["GetReply"]["properties"]
    assert "erase" in schemas["DeleteRequest"]["properties"]


def test_schemas_use_ecmascript_patterns_and_mark_times() -> None:
    text = json.dumps(asyncapi.schemas())
    assert "\\\\Z" not in text and "discriminator" not in text
    memory = asyncapi.schemas()["Memory"]["properties"]
    assert memory["created_at"] == {"type": "string", "format": "date-time"}
    assert {"type": "string", "format": "date-time"} in memory["expires_at"]["anyOf"]


def _gen_types() -> ModuleType:
    path = CLIENT / "scripts" / "gen_types.py"
    spec = importlib.util.spec_from_file_location("gen_types", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_typescript_types_are_generated_from_the_same_schemas_and_current() -> None:
    for path, text in _gen_types().rendered().items():
        assert path.read_text(encoding="utf-8") == text, (
            "run: python clients/typescript/scripts/gen_types.py"
        )


@pytest.mark.processes
@pytest.mark.timeout(900)
def test_the_official_asyncapi_parser_finds_no_error() -> None:
    if why := missing_tools():
        pytest.skip(why)
    ensure_node_modules()
    code, out = run(["node", "scripts/validate-asyncapi.mjs", str(asyncapi.DOC)], timeout=120)
    assert code == 0, out
    assert "valid AsyncAPI 3.0.0" in out, out
