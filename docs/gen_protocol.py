"""Regenerate the message tables of docs/protocol.md from the msgspec contracts.

python docs/gen_protocol.py          # rewrite the generated section
python docs/gen_protocol.py --check  # exit 1 when the file is stale (a unit test checks it)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec
import msgspec.inspect as mi

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from contracts import messages as m
from contracts.operations import TABLE

DOC = Path(__file__).with_name("protocol.md")
BEGIN = "<!-- generated from contracts/ by docs/gen_protocol.py: do not edit by hand -->"
END = "<!-- end of generated section -->"

SECTIONS: list[tuple[str, list[type[msgspec.Struct]]]] = [
    (
        "Requests (strict: unknown fields are `invalid_request`)",
        [*(op.request for op in TABLE), m.ImportedMemory, m.Context],
    ),
    (
        "Replies (read leniently: new fields may appear)",
        [*dict.fromkeys(reply for op in TABLE for reply in op.replies), m.ErrorReply],
    ),
    (
        "Records and events",
        [
            m.Memory,
            m.ScoredMemory,
            m.RecalledMemory,
            m.CompactMemory,
            m.ExportedMemory,
            m.HistoryEntry,
            m.Change,
            m.Person,
            m.NamedItem,
            m.Workspace,
            m.State,
            m.Event,
            m.RejectedEvent,
        ],
    ),
]


def render_type(t: mi.Type) -> str:
    if isinstance(t, mi.UnionType):
        return " or ".join(render_type(x) for x in t.types)
    if isinstance(t, mi.NoneType):
        return "null"
    if isinstance(t, mi.StrType):
        parts = []
        if t.pattern:
            parts.append(f"`{t.pattern.removeprefix('^').removesuffix(chr(92) + 'Z')}`")
        if t.min_length is not None or t.max_length is not None:
            parts.append(f"{t.min_length or 0}..{t.max_length or ''} chars")
        return "string" + (f" ({', '.join(parts)})" if parts else "")
    if isinstance(t, mi.IntType | mi.FloatType):
        name = "int" if isinstance(t, mi.IntType) else "float"
        lo = t.ge if t.ge is not None else t.gt
        hi = t.le if t.le is not None else t.lt
        if lo is None and hi is None:
            return name
        return f"{name} {'' if lo is None else lo}..{'' if hi is None else hi}"
    if isinstance(t, mi.BoolType):
        return "bool"
    if isinstance(t, mi.DateTimeType):
        return "ISO 8601 UTC"
    if isinstance(t, mi.LiteralType):
        return " \\| ".join(f'`"{v}"`' for v in t.values)
    if isinstance(t, mi.ListType):
        size = ""
        if t.min_length is not None or t.max_length is not None:
            size = f", {t.min_length or 0}..{t.max_length or ''} items"
        return f"list of {render_type(t.item_type)}{size}"
    if isinstance(t, mi.DictType):
        return f"object of {render_type(t.value_type)}"
    if isinstance(t, mi.AnyType):
        return "any JSON"
    if isinstance(t, mi.StructType):
        return t.cls.__name__
    return type(t).__name__


def render_default(f: mi.Field) -> str:
    if f.required:
        return "required"
    if f.default_factory is not mi.NODEFAULT:
        return f"`{msgspec.json.encode(f.default_factory()).decode()}`"
    if f.default in (mi.NODEFAULT, msgspec.UNSET):
        return "absent"
    return f"`{msgspec.json.encode(f.default).decode()}`"


def render_operations() -> list[str]:
    """One row per operation of contracts.operations.TABLE."""
    out = ["### Operations", ""]
    out += [
        "Subjects `mem.<ns>.<operation>[.<trust>]`; durable ones also `memq.<ns>.<operation>`"
        " (see Durable writes). Full trust only: refused as `forbidden` on a trust suffix.",
        "",
        "| operation | request | reply | durable | full trust only | trimmed to fit |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for op in TABLE:
        replies = " or ".join(f"`{r.__name__}`" for r in op.replies)
        durable, full = ("yes" if flag else "" for flag in (op.durable, op.full_trust_only))
        trimmed = f"`{op.trimmed}`" if op.trimmed else ""
        cells = [f"`{op.name}`", f"`{op.request.__name__}`", replies, durable, full, trimmed]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def render_examples() -> list[str]:
    """One valid request body per operation (`Operation.example`)."""
    out = ["### Example requests", ""]
    out += [
        "A valid body of each operation; the memories, workspaces and states it names need not"
        " exist (the reply is then `not_found`, or an empty result).",
        "",
    ]
    for op in TABLE:
        body = json.dumps(op.example, ensure_ascii=False)
        out += [f"`{op.name}`:", "", "```json", body, "```", ""]
    return out


def render() -> str:
    out = [BEGIN, "", *render_operations(), *render_examples()]
    for title, structs in SECTIONS:
        out += [f"### {title}", ""]
        for cls in structs:
            info = mi.type_info(cls)
            assert isinstance(info, mi.StructType)
            out += [f"#### `{cls.__name__}`", "", "| field | type | default |"]
            out.append("| --- | --- | --- |")
            for f in info.fields:
                out.append(f"| `{f.encode_name}` | {render_type(f.type)} | {render_default(f)} |")
            out.append("")
    out.append(END)
    return "\n".join(out)


def updated(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + render() + tail


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = updated(text)
    if "--check" in sys.argv:
        if new != text:
            print("docs/protocol.md is out of date: run python docs/gen_protocol.py")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
