"""The AsyncAPI 3.0 document of the wire protocol, `docs/asyncapi.yaml`, generated from the
contracts: msgspec's JSON Schema of every message, a channel per operation (full trust and
reduced trust) with its reply, the durable `memq.` channels, the event channels, and the
error shape with its codes (read from docs/protocol.md's table, the one place they are
described).

    python -m contracts.asyncapi          # rewrite docs/asyncapi.yaml
    python -m contracts.asyncapi --check  # exit 1 when the file is stale (a test checks it)

The document describes the memory service: it receives requests and durable writes, and
sends replies and events. Importing this module needs msgspec only (no NATS, no Redis).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from contracts import messages as m
from contracts.operations import DURABLE_OPERATIONS, TABLE, Operation
from contracts.subjects import (
    DEFAULT_NAMESPACE,
    DURABLE_CONSUMER,
    DURABLE_STREAM,
    GENERAL_SCOPE_TOKEN,
    NAMESPACE_PATTERN,
    QUEUE_GROUP,
    REDUCED_TRUST,
    SERVICE_NAME,
    VISIBLE_STORES,
)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "asyncapi.yaml"
PROTOCOL_DOC = ROOT / "docs" / "protocol.md"
HEADER = (
    "# Generated from contracts/ by `python -m contracts.asyncapi`: do not edit by hand.\n"
    "# The wire reference in prose is docs/protocol.md.\n"
)
SCHEMAS = "#/components/schemas/"
MESSAGES = "#/components/messages/"
# Events are `mem.<ns>.events.<scope>.<type>.<action>`; the actions the handlers publish.
EVENT_ACTIONS = ("added", "updated", "deleted")
NATS_BINDING_VERSION = "0.1.0"


# ----------------------------------------------------------------------------- schemas


def event_types() -> tuple[type[msgspec.Struct], ...]:
    return (m.Event, m.RejectedEvent)


def message_types() -> list[type[msgspec.Struct]]:
    """Every body that travels alone: requests, replies (the error reply too), events."""
    found: list[type[msgspec.Struct]] = [op.request for op in TABLE]
    found += [reply for op in TABLE for reply in op.replies]
    found += [m.ErrorReply, *event_types()]
    return list(dict.fromkeys(found))


def struct_classes() -> dict[str, type[msgspec.Struct]]:
    """Every Struct the messages hold, by the name its schema component has."""
    found: dict[str, type[msgspec.Struct]] = {}

    def visit(t: mi.Type) -> None:
        if isinstance(t, mi.StructType):
            if t.cls.__name__ in found:
                return
            found[t.cls.__name__] = t.cls
            for f in t.fields:
                visit(f.type)
        elif isinstance(t, mi.Metadata):
            visit(t.type)
        elif isinstance(t, mi.UnionType):
            for x in t.types:
                visit(x)
        elif isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
            visit(t.item_type)
        elif isinstance(t, mi.DictType):
            visit(t.value_type)

    for t in mi.multi_type_info(message_types()):
        visit(t)
    return found


def _is_datetime(t: mi.Type) -> bool:
    if isinstance(t, mi.Metadata):
        return _is_datetime(t.type)
    if isinstance(t, mi.UnionType):
        return any(_is_datetime(x) for x in t.types)
    return isinstance(t, mi.DateTimeType)


def _mark_datetime(prop: dict[str, Any]) -> None:
    """msgspec gives a datetime as a plain string: say that it is an RFC 3339 one."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "string":
            branch["format"] = "date-time"


def _ecma(node: Any) -> Any:
    """`\\Z` (Python: the very end) as `$`: ECMAScript regexes, which JSON Schema uses, have
    no `\\Z`, and without the multiline flag `$` means the same. And msgspec's OpenAPI-style
    `discriminator` object is left out: AsyncAPI's is a property name of a base schema, and
    each member of a tagged union says its tag (an `enum` of one value) anyway."""
    if isinstance(node, list):
        return [_ecma(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: _ecma(v)
        for k, v in node.items()
        if not (k == "discriminator" and isinstance(v, dict) and "propertyName" in v)
    }
    if isinstance(out.get("pattern"), str):
        out["pattern"] = re.sub(r"\\Z", "$", out["pattern"])
    return out


def _prose(doc: str) -> str:
    """A docstring as prose: each paragraph's lines joined into one."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def error_codes() -> list[tuple[str, str, str]]:
    """(code, header code, when) of each error code, from docs/protocol.md's table."""
    rows = re.findall(
        r"^\| `([a-z_]+)` \| (\d{3}) \| (.+?) \|$",
        PROTOCOL_DOC.read_text(encoding="utf-8"),
        re.M,
    )
    found = {code: (code, status, when) for code, status, when in rows}
    missing = [code for code in m.ERROR_CODES if code not in found]
    if missing:
        raise ValueError(f"docs/protocol.md's error table has no row for {missing}")
    return [found[code] for code in m.ERROR_CODES]


def schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of every message and record (components/schemas), by name, plus
    `ErrorCode`: the codes an error reply's `code` takes."""
    _, components = msgspec.json.schema_components(message_types(), ref_template=SCHEMAS + "{name}")
    classes = struct_classes()
    if set(components) != set(classes):
        raise ValueError(f"schema names differ from struct names: {set(components) ^ set(classes)}")
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(components):
        schema = _ecma(components[name])
        if "description" in schema:
            schema["description"] = _prose(schema["description"])
        info = mi.type_info(classes[name])
        assert isinstance(info, mi.StructType)
        for f in info.fields:
            if _is_datetime(f.type):
                _mark_datetime(schema["properties"][f.encode_name])
        out[name] = schema
    codes = "\n".join(f"- `{code}` ({status}): {when}" for code, status, when in error_codes())
    out["ErrorCode"] = {
        "title": "ErrorCode",
        "description": "Why a request failed; the error reply's `error` says how to recover."
        " Error replies carry the same as the NATS micro headers `Nats-Service-Error-Code`"
        " (the number) and `Nats-Service-Error` (the message). Codes are only ever added: a"
        " client reads one it does not know as a failure all the same.\n\n" + codes,
        "type": "string",
        "enum": list(m.ERROR_CODES),
    }
    reply = out["ErrorReply"]["properties"]
    reply["code"] = {"$ref": SCHEMAS + "ErrorCode"}
    # v4: what a version `conflict` says beside its code (msgspec writes no field docs).
    reply["id"]["description"] = (
        "On a `conflict` over a memory's version (v4): the memory (absent when no current"
        " memory holds the key a keyed add expected)."
    )
    reply["current_version"]["description"] = (
        "On a `conflict` over a memory's version (v4): its version now; 0 when no current"
        " memory holds the key a keyed add expected. Read it again and retry with this"
        " `expected_version` if the change still applies."
    )
    return out


# ----------------------------------------------------------------------------- document


def _ref(path: str) -> dict[str, str]:
    return {"$ref": path}


def _message(
    cls_name: str,
    summary: str,
    headers: dict[str, Any] | None = None,
    example: Operation | None = None,
) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "name": cls_name,
        "title": cls_name,
        "summary": summary,
        "contentType": "application/json",
        "payload": _ref(SCHEMAS + cls_name),
    }
    if headers is not None:
        msg["headers"] = headers
    if example is not None:
        shown = {"name": example.name, "payload": example.example_body()}
        msg["examples"] = [shown]
    return msg


DURABLE_HEADERS = {
    "type": "object",
    "properties": {
        "Nats-Msg-Id": {
            "type": "string",
            "description": "The write's request id: JetStream drops a copy published again"
            " within its duplicate window, the handlers apply it at most once (they remember"
            " it for 24 h), and the write's event carries it as `request_id`. Without it the"
            " id is `<stream>:<seq>`.",
        }
    },
}


def _error_headers() -> dict[str, Any]:
    statuses = ", ".join(f"{status} `{code}`" for code, status, _ in error_codes())
    return {
        "type": "object",
        "properties": {
            "Nats-Service-Error": {"type": "string", "description": "The error message."},
            "Nats-Service-Error-Code": {
                "type": "string",
                "description": f"The code as an HTTP-like status: {statuses}.",
            },
        },
    }


def _summary(cls: type[msgspec.Struct], fallback: str) -> str:
    doc = cls.__doc__
    if not doc or doc.startswith(cls.__name__ + "("):  # msgspec's generated signature
        return fallback
    return _prose(doc).split("\n\n")[0]


def _messages() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op in TABLE:
        out[op.request.__name__] = _message(
            op.request.__name__, _summary(op.request, f"The request of `{op.name}`."), example=op
        )
        if op.durable:
            out[f"Durable{op.request.__name__}"] = _message(
                op.request.__name__,
                f"A durable `{op.name}`: the same body as on `mem.<ns>.{op.name}`.",
                DURABLE_HEADERS,
                example=op,
            )
        for reply in op.replies:
            out.setdefault(
                reply.__name__,
                _message(reply.__name__, _summary(reply, f"A reply of `{op.name}`.")),
            )
    out["ErrorReply"] = _message(
        "ErrorReply",
        "The reply of a request that failed: `success` false, a `code`, an `error` that says"
        " how to recover.",
        _error_headers(),
    )
    out["Event"] = _message("Event", "One change to one memory (or workspace).")
    out["RejectedEvent"] = _message("RejectedEvent", _summary(m.RejectedEvent, ""))
    return dict(sorted(out.items()))


def _parameters() -> dict[str, Any]:
    trust = ", ".join(
        f"`{t}` sees {', '.join(VISIBLE_STORES[t]) or 'nothing'}" for t in REDUCED_TRUST
    )
    return {
        "ns": {
            "description": f"The namespace (tenant) token, `{NAMESPACE_PATTERN[1:-2]}`. It"
            " comes from the subject only, so NATS permissions alone decide who may use it.",
            "default": DEFAULT_NAMESPACE,
            "examples": [DEFAULT_NAMESPACE, "acme"],
        },
        "trust": {
            "description": "The caller's reduced trust (no suffix is `full`, which sees every"
            f" store): {trust}. At `public` every operation is `forbidden`. NATS permissions"
            " decide which user may publish which suffix.",
            "enum": list(REDUCED_TRUST),
        },
        "scope": {
            "description": f"The memory's `workflow_id`, or `{GENERAL_SCOPE_TOKEN}` for a"
            " memory of no workflow (and for workspace changes).",
            "examples": ["wf_123", GENERAL_SCOPE_TOKEN],
        },
        "type": {
            "description": "The memory's type (`workspace` for a workspace's changes).",
            "examples": ["user_pref", "decision", "workspace"],
        },
        "action": {
            "description": "What happened: " + ", ".join(f"`{a}`" for a in EVENT_ACTIONS) + ".",
            "examples": list(EVENT_ACTIONS),
        },
        "op": {
            "description": "The durable operation whose write was rejected.",
            "enum": list(DURABLE_OPERATIONS),
        },
    }


def _params(*names: str) -> dict[str, Any]:
    return {name: _ref(f"#/components/parameters/{name}") for name in names}


def _channel_messages(names: list[str], key: str | None = None) -> dict[str, Any]:
    return {name: _ref(MESSAGES + (key or name)) for name in names}


def _op_description(op: Operation) -> str:
    parts = [f"Request/reply; handlers serve it in the queue group `{QUEUE_GROUP}`."]
    if len(op.replies) > 1:
        parts.append(
            "The reply is one of "
            + " or ".join(f"`{r.__name__}`" for r in op.replies)
            + ", as the request's `mode` asks."
        )
    if op.trimmed:
        parts.append(
            f"A reply that would pass the server's max payload drops trailing `{op.trimmed}`"
            " and says `truncated: true`."
        )
    if op.durable:
        parts.append(f"Also durable: `memq.{{ns}}.{op.name}` (see that channel).")
    if op.full_trust_only:
        parts.append("Full trust only: with a trust suffix it is always `forbidden`.")
    return " ".join(parts)


def _channels_and_operations() -> tuple[dict[str, Any], dict[str, Any]]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    binding = {"nats": {"queue": QUEUE_GROUP, "bindingVersion": NATS_BINDING_VERSION}}
    for op in TABLE:
        request = op.request.__name__
        replies = [r.__name__ for r in op.replies] + ["ErrorReply"]
        reply_channel = f"{op.name}.reply"
        reply = {
            "channel": _ref(f"#/channels/{reply_channel}"),
            "messages": [_ref(f"#/channels/{reply_channel}/messages/{r}") for r in replies],
        }
        for suffix, address, params, trust_note in (
            ("", f"mem.{{ns}}.{op.name}", ("ns",), "at full trust"),
            (".reduced", f"mem.{{ns}}.{op.name}.{{trust}}", ("ns", "trust"), "at reduced trust"),
        ):
            name = op.name + suffix
            channels[name] = {
                "address": address,
                "title": f"{op.name} ({trust_note})",
                "description": _summary(op.request, f"The `{op.name}` operation."),
                "parameters": _params(*params),
                "messages": _channel_messages([request]),
            }
            operations[name] = {
                "action": "receive",
                "channel": _ref(f"#/channels/{name}"),
                "title": f"{op.name} ({trust_note})",
                "summary": f"`{op.name}` {trust_note}.",
                "description": _op_description(op),
                "bindings": binding,
                "messages": [_ref(f"#/channels/{name}/messages/{request}")],
                "reply": reply,
            }
        channels[reply_channel] = {
            "address": None,
            "title": f"{op.name} reply",
            "description": "The request's own reply subject (an inbox): exactly one reply per"
            " request that has one.",
            "messages": _channel_messages(replies),
        }
        if not op.durable:
            continue
        for suffix, address, params, trust_note in (
            ("", f"memq.{{ns}}.{op.name}", ("ns",), "at full trust"),
            (".reduced", f"memq.{{ns}}.{op.name}.{{trust}}", ("ns", "trust"), "at reduced trust"),
        ):
            name = f"memq.{op.name}{suffix}"
            channels[name] = {
                "address": address,
                "title": f"durable {op.name} ({trust_note})",
                "description": f"Taken by the JetStream stream `{DURABLE_STREAM}` (subjects"
                " `memq.>`, file storage, work-queue retention). Publish with JetStream: its"
                " acknowledgement (`stream`, `seq`, `duplicate`) means the write is stored and"
                " will be applied at most once, through handler crashes and restarts of NATS or"
                " Redis.",
                "parameters": _params(*params),
                "messages": _channel_messages([request], f"Durable{request}"),
            }
            operations[name] = {
                "action": "receive",
                "channel": _ref(f"#/channels/{name}"),
                "title": f"durable {op.name} ({trust_note})",
                "summary": f"`{op.name}` through JetStream, {trust_note}.",
                "description": f"Handlers pull from the durable consumer `{DURABLE_CONSUMER}`."
                " A write whose dependency is down (`unavailable`) is redelivered with backoff"
                " until it succeeds; one that can never succeed is not retried and a"
                " `rejected` event says why (channel `events.rejected`). The applied write's"
                " event carries its `request_id`. There is no reply.",
                "messages": [_ref(f"#/channels/{name}/messages/{request}")],
            }
    channels["events"] = {
        "address": "mem.{ns}.events.{scope}.{type}.{action}",
        "title": "events",
        "description": "One event per changed memory, after every change (core NATS). A"
        " subscriber to `mem.<ns>.events.<workflow_id>.>` follows one workflow.",
        "parameters": _params("ns", "scope", "type", "action"),
        "messages": _channel_messages(["Event"]),
    }
    operations["events"] = {
        "action": "send",
        "channel": _ref("#/channels/events"),
        "title": "events",
        "summary": "Every change, as it happens.",
        "messages": [_ref("#/channels/events/messages/Event")],
    }
    channels["events.rejected"] = {
        "address": "mem.{ns}.events._rejected.{op}.rejected",
        "title": "rejected durable writes",
        "description": "A durable write that can never succeed (bad input): it is"
        " acknowledged, not retried.",
        "parameters": _params("ns", "op"),
        "messages": _channel_messages(["RejectedEvent"]),
    }
    operations["events.rejected"] = {
        "action": "send",
        "channel": _ref("#/channels/events.rejected"),
        "title": "rejected durable writes",
        "summary": "Why a durable write was not applied.",
        "messages": [_ref("#/channels/events.rejected/messages/RejectedEvent")],
    }
    return channels, operations


_DURABLE = ", ".join(f"`{name}`" for name in DURABLE_OPERATIONS)
INFO_DESCRIPTION = f"""\
An event-driven memory bus for multi-agent LLM workflows: agents send JSON requests over NATS,
stateless handlers (the NATS micro service `{SERVICE_NAME}`, queue group `{QUEUE_GROUP}`) store
and search memories in Redis Stack, and every change is published as an event.

- Requests go to `mem.<ns>.<op>` (full trust) or `mem.<ns>.<op>.<trust>` (reduced trust);
  each request with a reply subject gets exactly one reply. Requests are strict (an unknown
  field is `invalid_request`); clients read replies leniently (new fields may appear).
- Success: `{{"success": true, ...}}`. Failure: `ErrorReply`, `{{"success": false, "code",
  "error"}}`, with `code` one of `ErrorCode`.
- Writes that must not be lost go through JetStream on `memq.<ns>.<op>` ({_DURABLE}).
- Changes are published on `mem.<ns>.events.<workflow_id or _general>.<type>.<action>`.

The schemas are msgspec's, generated from the project's `contracts/` (datetimes are RFC 3339
strings). docs/protocol.md is the reference in prose."""


def document() -> dict[str, Any]:
    channels, operations = _channels_and_operations()
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "memory-bus",
            "version": "3",
            "description": INFO_DESCRIPTION,
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "The embedded stack of `make up` (open: loopback only, no users).",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": schemas(),
            "messages": _messages(),
            "parameters": _parameters(),
        },
    }


# ----------------------------------------------------------------------------- YAML

# A plain (unquoted) scalar that every YAML 1.1 and 1.2 reader takes as this same string.
_PLAIN = re.compile(r"^[A-Za-z$][A-Za-z0-9_$./()-]*(?: [A-Za-z0-9_$./()-]+)*$")
_NOT_PLAIN = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text or "inf" in text or "nan" in text:
            raise ValueError(f"{value!r}: no YAML form read alike by YAML 1.1 and 1.2")
        return text
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _NOT_PLAIN:
            return value
        return json.dumps(value)  # JSON strings are YAML double-quoted scalars
    raise TypeError(f"no YAML form for {type(value).__name__}")


def _block(text: str, indent: str) -> str | None:
    """A multi-line string as a literal block (`|-`), when it reads back the same."""
    lines = text.split("\n")
    if (
        "\n" not in text
        or text != text.strip()
        or any(line != line.rstrip() for line in lines)
        or not all(c.isprintable() or c == "\n" for c in text)
    ):
        return None
    return "|-\n" + "\n".join(f"{indent}{line}" if line else "" for line in lines)


def _yaml(node: Any, indent: str) -> list[str]:
    """The lines of a mapping or list, block style, each starting with `indent`."""
    out: list[str] = []
    items = node.items() if isinstance(node, dict) else ((None, v) for v in node)
    for key, value in items:
        head = f"{indent}{_scalar(key)}:" if key is not None else f"{indent}-"
        inner = indent + "  "
        if isinstance(value, dict | list) and value:
            if key is None:  # a list item: its first line follows the dash
                lines = _yaml(value, inner)
                out.append(f"{head} {lines[0].lstrip()}")
                out.extend(lines[1:])
            else:
                out.append(head)
                out.extend(_yaml(value, inner))
        elif isinstance(value, dict | list):
            out.append(f"{head} {'{}' if isinstance(value, dict) else '[]'}")
        elif isinstance(value, str) and (block := _block(value, inner)) is not None:
            out.append(f"{head} {block}")
        else:
            out.append(f"{head} {_scalar(value)}")
    return out


def to_yaml(doc: dict[str, Any]) -> str:
    return "\n".join(_yaml(doc, "")) + "\n"


def render() -> str:
    return HEADER + to_yaml(document())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python -m contracts.asyncapi", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
