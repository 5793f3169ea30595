"""Generate the TypeScript SDK's types and wire tables from the contracts' JSON Schemas (the
ones docs/asyncapi.yaml holds, from `contracts.asyncapi.schemas()`):

- `src/types.ts`: one interface per message and record, fields in camelCase. Request-side
  fields are optional where the server has a default; reply-side ones are present where the
  schema has a default, because the SDK fills it in on reading, as msgspec does in Python.
- `src/protocol.ts`: what the SDK needs at run time: each struct's wire and TypeScript field
  names, the nested struct each field holds and its default (so that keys of free JSON such
  as `metadata`, or of `by_type`, are never renamed), the operation table and the subject
  constants.

    python clients/typescript/scripts/gen_types.py          # rewrite both files
    python clients/typescript/scripts/gen_types.py --check  # exit 1 when either is stale
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from contracts.asyncapi import SCHEMAS, event_types, schemas  # noqa: E402
from contracts.messages import ERROR_CODES, ErrorReply  # noqa: E402
from contracts.operations import TABLE  # noqa: E402
from contracts.subjects import (  # noqa: E402
    DEFAULT_NAMESPACE,
    DURABLE_PREFIX,
    DURABLE_STREAM,
    FULL_TRUST,
    GENERAL_SCOPE_TOKEN,
    NAMESPACE_PATTERN,
    PREFIX,
    REDUCED_TRUST,
    TRUST_LEVELS,
)

SRC = HERE.parent / "src"
TYPES = SRC / "types.ts"
PROTOCOL = SRC / "protocol.ts"
BANNER = (
    "// Generated from contracts/ by clients/typescript/scripts/gen_types.py: do not edit by"
    " hand.\n"
)
Schema = dict[str, Any]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def ecma(pattern: str) -> str:
    return re.sub(r"\\Z", "$", pattern)


def refs(node: Any) -> set[str]:
    """Names of the components a schema refers to, directly."""
    if isinstance(node, list):
        return set().union(*(refs(x) for x in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["$ref"].removeprefix(SCHEMAS)} if "$ref" in node else set()
    return found.union(*(refs(v) for k, v in node.items() if k != "$ref"))


def reachable(roots: list[str], comps: dict[str, Schema]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(refs(comps[name]))
    return seen


def sides(comps: dict[str, Schema]) -> dict[str, str]:
    """ "request" or "reply" for each component: what a client writes, or what it reads."""
    requests = reachable([op.request.__name__ for op in TABLE], comps)
    read = [r.__name__ for op in TABLE for r in op.replies]
    read += [ErrorReply.__name__, *(e.__name__ for e in event_types())]
    replies = reachable(read, comps)
    both = requests & replies
    if both:
        raise ValueError(f"{sorted(both)} are both written and read: give each side its own type")
    return {name: "request" if name in requests else "reply" for name in comps}


# ----------------------------------------------------------------------------- types.ts


def ts_type(s: Schema, side: str) -> str:
    if "$ref" in s:
        return str(s["$ref"]).removeprefix(SCHEMAS)
    if "anyOf" in s:
        parts = list(dict.fromkeys(ts_type(b, side) for b in s["anyOf"]))
        return " | ".join(parts)
    if "enum" in s:
        return " | ".join(json.dumps(v) for v in s["enum"])
    kind = s.get("type")
    if kind == "string":
        # A request's time may be a Date: JSON.stringify writes it as RFC 3339.
        return "string | Date" if s.get("format") == "date-time" and side == "request" else "string"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        item = ts_type(s.get("items", {}), side)
        return f"Array<{item}>" if "|" in item else f"{item}[]"
    if kind == "object":
        extra = s.get("additionalProperties")
        return f"Record<string, {ts_type(extra, side) if isinstance(extra, dict) else 'unknown'}>"
    return "unknown"


def _bounds(lo: Any, hi: Any, unit: str) -> str | None:
    if lo is None and hi is None:
        return None
    if hi is None:
        return "not empty" if lo == 1 and unit else f"at least {lo}{unit}"
    if lo is None:
        return f"at most {hi}{unit}"
    return f"{lo}..{hi}{unit}"


def constraints(s: Schema) -> list[str]:
    """What a field's schema requires, in words, from every branch that is not null."""
    out: list[str] = []
    for b in s.get("anyOf", [s]):
        lo = b.get("minimum", b.get("exclusiveMinimum"))
        hi = b.get("maximum", b.get("exclusiveMaximum"))
        said = [
            _bounds(b.get("minLength"), b.get("maxLength"), " characters"),
            _bounds(lo, hi, ""),
            _bounds(b.get("minItems"), b.get("maxItems"), " items"),
            # Long patterns (names) say less than the words around them.
            f"pattern `{b['pattern']}`" if len(b.get("pattern", "")) in range(1, 61) else None,
            "RFC 3339 date-time" if b.get("format") == "date-time" else None,
        ]
        if "exclusiveMinimum" in b:
            said[1] = f"> {b['exclusiveMinimum']}" + (f", <= {hi}" if hi is not None else "")
        out += [x for x in said if x]
    return out


def _sentence(parts: list[str]) -> str:
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def jsdoc(lines: list[str], indent: str) -> list[str]:
    text = [line.replace("*/", "*\\/") for line in lines if line]
    if not text:
        return []
    if len(text) == 1:
        return [f"{indent}/** {text[0]} */"]
    return [f"{indent}/**", *(f"{indent} * {line}" for line in text), f"{indent} */"]


def interface(name: str, s: Schema, side: str) -> list[str]:
    if "enum" in s:  # ErrorCode
        return [
            *jsdoc(s.get("description", "").split("\n"), ""),
            f"export type {name} = {ts_type(s, side)};",
        ]
    out = jsdoc(s.get("description", "").split("\n"), "")
    out.append(f"export interface {name} {{")
    required = set(s.get("required", []))
    for wire, prop in s.get("properties", {}).items():
        present = wire in required or (side == "reply" and "default" in prop)
        said = constraints(prop)
        notes = [_sentence(said)] if said else []
        if "default" in prop:
            notes.append(f"Default: `{json.dumps(prop['default'])}`.")
        if camel(wire) != wire:
            notes.append(f"Wire: `{wire}`.")
        out += jsdoc([" ".join(notes)] if notes else [], "  ")
        out.append(f"  {camel(wire)}{'' if present else '?'}: {ts_type(prop, side)};")
    out.append("}")
    return out


def render_types(comps: dict[str, Schema], side_of: dict[str, str]) -> str:
    out = [
        BANNER.rstrip(),
        "// The messages of the wire protocol, with fields in camelCase (snake_case on the wire).",
        "// Request types are what a client writes (server defaults optional); reply types are",
        "// what the SDK returns (fields with a default always present).",
        "",
    ]
    for name in sorted(comps):
        out += [*interface(name, comps[name], side_of[name]), ""]
    out += [
        "/** Each operation's request and reply (`mem.<ns>.<operation>`). */",
        "export interface Operations {",
    ]
    for op in TABLE:
        replies = " | ".join(r.__name__ for r in op.replies)
        out.append(f"  {op.name}: {{ request: {op.request.__name__}; reply: {replies} }};")
    out += ["}", "", "export type OperationName = keyof Operations;"]
    durable = " | ".join(json.dumps(op.name) for op in TABLE if op.durable)
    out += [
        "/** Operations that may also be sent through JetStream (`memq.<ns>.<operation>`). */",
        f"export type DurableOperationName = {durable};",
        "",
    ]
    return "\n".join(out)


# ----------------------------------------------------------------------------- protocol.ts


def spec(s: Schema) -> Any:
    """What a value of this schema holds that the SDK converts: 0 nothing (scalars, free
    JSON), a struct's name, ["a", spec] a list, ["m", spec] a map whose keys are data, or
    ["u", names] one of several structs, told apart by their tags."""
    if "$ref" in s:
        return str(s["$ref"]).removeprefix(SCHEMAS)
    if "anyOf" in s:
        found = [spec(b) for b in s["anyOf"] if b.get("type") != "null"]
        structs = [x for x in found if isinstance(x, str)]
        if structs and len(structs) == len(found):
            return structs[0] if len(structs) == 1 else ["u", structs]
        held = [x for x in found if x != 0]
        if len(held) > 1:
            raise ValueError(f"cannot tell apart the branches of {s}")
        return held[0] if held else 0
    if s.get("type") == "array":
        inner = spec(s.get("items", {}))
        return ["a", inner] if inner != 0 else 0
    if s.get("type") == "object" and isinstance(s.get("additionalProperties"), dict):
        inner = spec(s["additionalProperties"])
        return ["m", inner] if inner != 0 else 0
    return 0


def shape(s: Schema, side: str) -> dict[str, Any]:
    fields: dict[str, list[Any]] = {}
    tag: list[str] | None = None
    for wire, prop in s.get("properties", {}).items():
        field: list[Any] = [camel(wire), spec(prop)]
        if side == "reply" and "default" in prop:
            field.append(prop["default"])
        fields[wire] = field
        if len(prop.get("enum", [])) == 1:
            tag = [wire, prop["enum"][0]]
    out: dict[str, Any] = {"fields": fields}
    if tag is not None:
        out["tag"] = tag
    return out


def render_protocol(comps: dict[str, Schema], side_of: dict[str, str]) -> str:
    shapes = {
        name: shape(comps[name], side_of[name])
        for name in sorted(comps)
        if "properties" in comps[name]
    }
    constants = {
        "PREFIX": PREFIX,
        "DURABLE_PREFIX": DURABLE_PREFIX,
        "DURABLE_STREAM": DURABLE_STREAM,
        "DEFAULT_NAMESPACE": DEFAULT_NAMESPACE,
        "GENERAL_SCOPE_TOKEN": GENERAL_SCOPE_TOKEN,
        "FULL_TRUST": FULL_TRUST,
    }
    out = [
        BANNER.rstrip(),
        "// The wire tables the SDK reads at run time (src/wire.ts); their format: src/shape.ts.",
        'import type { Shape } from "./shape.js";',
        'import type { OperationName } from "./types.js";',
        "",
    ]
    out += [f"export const {k} = {json.dumps(v)};" for k, v in constants.items()]
    out += [
        f"export const NAMESPACE_PATTERN = /{ecma(NAMESPACE_PATTERN)}/;",
        f"export const TRUST_LEVELS = {json.dumps(list(TRUST_LEVELS))} as const;",
        f"export const REDUCED_TRUST = {json.dumps(list(REDUCED_TRUST))} as const;",
        "export type Trust = (typeof TRUST_LEVELS)[number];",
        f"export const ERROR_CODES = {json.dumps(list(ERROR_CODES))} as const;",
        "",
        "export interface OperationInfo {",
        "  request: string;",
        "  replies: readonly string[];",
        "  durable: boolean;",
        "  fullTrustOnly: boolean;",
        "}",
        "",
        "export const OPERATIONS: Readonly<Record<OperationName, OperationInfo>> = {",
    ]
    for op in TABLE:
        replies = json.dumps([r.__name__ for r in op.replies])
        flags = (
            f"durable: {json.dumps(op.durable)}, fullTrustOnly: {json.dumps(op.full_trust_only)}"
        )
        out.append(
            f"  {op.name}: {{ request: {json.dumps(op.request.__name__)}, replies: {replies},"
            f" {flags} }},"
        )
    out.append("};")
    out += ["", "export const SHAPES: Readonly<Record<string, Shape>> = {"]
    for name, sh in shapes.items():
        out.append(f"  {name}: {{")
        if "tag" in sh:
            out.append(f"    tag: {json.dumps(sh['tag'])},")
        out.append("    fields: {")
        out += [f"      {k}: {json.dumps(v)}," for k, v in sh["fields"].items()]
        out += ["    },", "  },"]
    out.append("};")
    return "\n".join(out) + "\n"


def rendered() -> dict[Path, str]:
    comps = schemas()
    side_of = sides(comps)
    return {TYPES: render_types(comps, side_of), PROTOCOL: render_protocol(comps, side_of)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    stale = []
    for path, text in rendered().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if "--check" in args:
            stale.append(path)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"{names} out of date: run python clients/typescript/scripts/gen_types.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
