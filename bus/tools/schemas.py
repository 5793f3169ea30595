"""Each tool as a model sees it: its operation's request schema (`$ref`s inlined, `\\Z` as
`$`, the executor's own fields left out) with its texts, as `ToolSpec`s in OpenAI and MCP
form."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from bus.tools.names import HIDDEN_FIELDS, STATE_OPS, TOOL_OPS
from bus.tools.texts import EXAMPLES, FIELD_TEXTS, tool_descriptions, type_field_text
from contracts.operations import REQUEST_TYPES
from contracts.types import DEFAULT_TYPES, TypeTable

# Fields the schema requires although the request struct does not: a search without an
# `embedding` (hidden from models) needs its `query`.
_MORE_REQUIRED: dict[str, tuple[str, ...]] = {"search": ("query",)}


# ----------------------------------------------------------------------------- schemas


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if name in seen:
                raise ValueError(f"recursive schema through {name}: cannot inline it")
            target = _inline_refs(defs[name], defs, (*seen, name))
            rest = {k: _inline_refs(v, defs, seen) for k, v in node.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline_refs(v, defs, seen) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(v, defs, seen) for v in node]
    return node


def _ecma_patterns(node: Any) -> Any:
    """`\\Z` (Python: the very end) as `$`: ECMAScript regexes have no `\\Z`, and without the
    multiline flag their `$` matches only at the end."""
    if isinstance(node, dict):
        out = {k: _ecma_patterns(v) for k, v in node.items()}
        if isinstance(out.get("pattern"), str):
            out["pattern"] = re.sub(r"\\Z", "$", out["pattern"])
        return out
    if isinstance(node, list):
        return [_ecma_patterns(v) for v in node]
    return node


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional property as the model should give it: left out rather than null, so
    `anyOf [X, null]` becomes X (the executor still accepts a null)."""
    options = prop.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        merged = {k: v for k, v in prop.items() if k != "anyOf"}
        if "default" in merged and merged["default"] is None:
            del merged["default"]
        prop = {**rest[0], **merged} if len(rest) == 1 else {**merged, "anyOf": rest}
    enum = prop.get("enum")
    # Some function-calling back ends need a `type` beside an `enum`.
    if isinstance(enum, list) and "type" not in prop and all(isinstance(v, str) for v in enum):
        prop = {"type": "string", **prop}
    return prop


def _without_hidden(node: Any) -> Any:
    """A nested schema without the executor's own fields (`HIDDEN_FIELDS`) anywhere."""
    if isinstance(node, list):
        return [_without_hidden(v) for v in node]
    if not isinstance(node, dict):
        return node
    # A tagged union's `discriminator` maps tags to `$ref`s: each option's `action` enum
    # says the same, in the form function-calling schemas take.
    out = {k: _without_hidden(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {
            k: _not_null(v) for k, v in out["properties"].items() if k not in HIDDEN_FIELDS
        }
    if isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r not in HIDDEN_FIELDS]
    return out


def request_schema(op: str) -> dict[str, Any]:
    """The operation's request schema as msgspec generates it, `$ref`s inlined and patterns
    in ECMAScript syntax: a plain `type: object` schema."""
    raw = msgspec.json.schema(REQUEST_TYPES[op])
    schema: dict[str, Any] = _ecma_patterns(_inline_refs(raw, raw.get("$defs", {})))
    return schema


def tool_schema(name: str) -> dict[str, Any]:
    """The parameter schema of one tool (without per-field descriptions)."""
    op = TOOL_OPS[name]
    full = request_schema(op)
    hidden = set(HIDDEN_FIELDS)
    props = {k: _not_null(v) for k, v in full["properties"].items() if k not in hidden}
    if "actions" in props:
        # `apply`'s actions are requests of their own: their identity is the executor's too.
        props["actions"] = _without_hidden(props["actions"])
    required = [r for r in full.get("required", []) if r not in hidden]
    required += [r for r in _MORE_REQUIRED.get(op, ()) if r not in required]
    if op in STATE_OPS:
        # The executor fills it from its configured workspace.
        required = [r for r in required if r != "workspace"]
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


# ----------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its name, the operation it runs, a description for a model, its JSON
    schema (a plain `type: object`), and the example its description shows."""

    name: str
    op: str
    description: str
    parameters: dict[str, Any]
    example: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """OpenAI function calling (Chat Completions `tools`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def mcp(self) -> dict[str, Any]:
        """An MCP tool definition (`tools/list`)."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": copy.deepcopy(self.parameters),
        }


def tool_specs(types: TypeTable = DEFAULT_TYPES) -> list[ToolSpec]:
    """The 21 tools; `types` is the handlers' type table when it is not the default."""
    descriptions = tool_descriptions(types)
    specs = []
    for name, op in TOOL_OPS.items():
        schema = tool_schema(name)
        texts = dict(FIELD_TEXTS[name])
        if name == "memory_add":
            texts["type"] = type_field_text(types)
        for field, prop in schema["properties"].items():
            # A field new in the contracts still works undescribed (a unit test flags it).
            if field in texts:
                prop["description"] = texts[field]
        specs.append(
            ToolSpec(
                name=name,
                op=op,
                description=descriptions[name],
                parameters=schema,
                example=copy.deepcopy(EXAMPLES[name]),
            )
        )
    return specs


def openai_tools(types: TypeTable = DEFAULT_TYPES) -> list[dict[str, Any]]:
    return [spec.openai() for spec in tool_specs(types)]


def mcp_tools(types: TypeTable = DEFAULT_TYPES) -> list[dict[str, Any]]:
    return [spec.mcp() for spec in tool_specs(types)]
