"""The executor: a model's tool call (name and JSON arguments) in, JSON text out. It never
raises for what a model sends: every outcome is text the model can read and recover from."""

from __future__ import annotations

import difflib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from nats.errors import Error as NatsError

from bus.client import MemoryBus
from bus.errors import BusTimeout, Unavailable
from bus.tools.names import HIDDEN_FIELDS, STATE_OPS
from bus.tools.schemas import ToolSpec, tool_specs
from contracts import limits
from contracts.messages import NAME_PATTERN, SESSION_ID_PATTERN, Request
from contracts.operations import REQUEST_TYPES
from contracts.subjects import WORKFLOW_ID_PATTERN
from contracts.types import DEFAULT_TYPES, TypeTable

log = structlog.get_logger("membus.tools")

# ----------------------------------------------------------------------------- executor


class ToolCallError(Exception):
    """A tool call that cannot be sent: carries the reply the model gets instead."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def reply(self) -> dict[str, Any]:
        return {"success": False, "code": self.code, "error": self.message}


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A validated tool call: the operation, its request, and the body to send."""

    tool: str
    op: str
    request: Request
    body: bytes


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gave: `data` is the reply as the model sees it (null and empty
    fields left out), `text` its JSON."""

    tool: str
    data: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.data.get("success") is True

    @property
    def code(self) -> str | None:
        code = self.data.get("code")
        return code if isinstance(code, str) else None

    @property
    def text(self) -> str:
        return msgspec.json.encode(self.data).decode()


def _compact(value: Any, top: bool = True) -> Any:
    """Leave out nulls everywhere, and empty strings, lists and objects below the top level
    (a top-level `results: []` is an answer; a record's `facts: []` is noise)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _compact(item, top=False)
            if item is None or (not top and isinstance(item, str | list | dict) and not item):
                continue
            out[key] = item
        return out
    if isinstance(value, list):
        return [_compact(item, top=False) for item in value]
    return value


_UNKNOWN_FIELD_RE = re.compile(r"unknown field `([^`]*)`")
_FIELD_PATH_RE = re.compile(r"at `\$\.(\w+)")
_encoder = msgspec.json.Encoder()
_WORKFLOW_RE = re.compile(WORKFLOW_ID_PATTERN)
_NAME_RE = re.compile(NAME_PATTERN)
_SESSION_RE = re.compile(SESSION_ID_PATTERN)


def check_identity(field: str, value: str) -> None:
    """Raise `ValueError` when `value` is not a valid `workflow_id`, `workspace`,
    `agent_id` or `session_id` (the message starts with the field's name)."""
    if field == "workflow_id":
        ok, rule = bool(_WORKFLOW_RE.match(value)), f"match {WORKFLOW_ID_PATTERN}"
    elif field == "workspace":
        ok = len(value) <= limits.MAX_NAME_CHARS and bool(_NAME_RE.match(value))
        rule = f"be a workspace name (1..{limits.MAX_NAME_CHARS} printable characters)"
    elif field == "agent_id":
        ok = 1 <= len(value) <= limits.MAX_AGENT_ID_CHARS
        rule = f"be 1..{limits.MAX_AGENT_ID_CHARS} characters"
    elif field == "session_id":
        ok, rule = bool(_SESSION_RE.match(value)), f"match {SESSION_ID_PATTERN}"
    else:
        raise ValueError(f"{field} is not an identity field")
    if not ok:
        raise ValueError(f"{field} {value!r} must {rule}")


class ToolExecutor:
    """Runs a model's tool calls over the bus, as one agent: the identity given here
    (workflow, agent, session, default workspace) goes on every request, never the model's.

    `call` returns the JSON text for the model and never raises for anything the model
    sent or the bus answered: errors come back as `{"success": false, "code", "error"}`.
    """

    def __init__(
        self,
        bus: MemoryBus,
        *,
        workflow_id: str | None = None,
        workspace: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        types: TypeTable = DEFAULT_TYPES,
    ) -> None:
        # A bad identity is the developer's mistake, so it fails here, loudly.
        for field, value in (
            ("workflow_id", workflow_id),
            ("workspace", workspace),
            ("agent_id", agent_id),
            ("session_id", session_id),
        ):
            if value is not None:
                check_identity(field, value)
        self.bus = bus
        self.workflow_id = workflow_id
        self.workspace = workspace
        self.agent_id = agent_id
        self.session_id = session_id
        self.specs: dict[str, ToolSpec] = {spec.name: spec for spec in tool_specs(types)}

    # -- preparing -------------------------------------------------------------------------

    def prepare(self, name: str, arguments: Mapping[str, Any] | str | bytes | None) -> PreparedCall:
        """Validate a model's arguments and build the request with this executor's identity.
        Raises `ToolCallError` (with the text for the model) when that is not possible."""
        spec = self.specs.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(self.specs), n=1)
            hint = f' Did you mean "{close[0]}"?' if close else ""
            raise ToolCallError(
                "invalid_request",
                f'Unknown tool "{name}".{hint} The memory tools are: {", ".join(self.specs)}.',
            )
        args = self._arguments(name, arguments)
        self._check_fields(spec, args)
        body = self._with_identity(spec, args)
        cls = REQUEST_TYPES[spec.op]
        try:
            data = _encoder.encode(body)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise ToolCallError(
                "invalid_request", f"Arguments of {name} are not plain JSON values ({exc})."
            ) from None
        if len(data) > limits.MAX_BODY_BYTES:
            raise ToolCallError(
                "too_large",
                f"Arguments of {name} are {len(data)} bytes; the limit is"
                f" {limits.MAX_BODY_BYTES} (content up to 32 KiB). Send less.",
            )
        try:
            request = msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as exc:
            raise ToolCallError("invalid_request", self._explain(spec, str(exc))) from None
        except RecursionError:
            raise ToolCallError(
                "invalid_request", f"Arguments of {name} nest too deeply."
            ) from None
        return PreparedCall(tool=name, op=spec.op, request=request, body=data)

    @staticmethod
    def _arguments(name: str, arguments: Mapping[str, Any] | str | bytes | None) -> dict[str, Any]:
        if arguments is None:
            return {}
        if isinstance(arguments, str | bytes):
            if not arguments.strip():
                return {}
            if len(arguments) > limits.MAX_BODY_BYTES:
                raise ToolCallError(
                    "too_large",
                    f"Arguments of {name} are over {limits.MAX_BODY_BYTES} bytes. Send less.",
                )
            try:
                arguments = msgspec.json.decode(arguments)
            except (msgspec.DecodeError, RecursionError) as exc:
                raise ToolCallError(
                    "invalid_request",
                    f"Arguments of {name} are not valid JSON ({exc}). Send one JSON object.",
                ) from None
        if not isinstance(arguments, Mapping):
            raise ToolCallError(
                "invalid_request",
                f"Arguments of {name} must be a JSON object of named fields, not"
                f" {type(arguments).__name__}.",
            )
        if not all(isinstance(key, str) for key in arguments):
            raise ToolCallError("invalid_request", f"Field names of {name} must be strings.")
        return dict(arguments)

    @staticmethod
    def _check_fields(spec: ToolSpec, args: Mapping[str, Any]) -> None:
        # The request structs know the hidden fields, so msgspec alone would let a model
        # set its own identity: check against the tool's schema first.
        known = list(spec.parameters["properties"])
        for action in args.get("actions", []) if spec.op == "apply" else ():
            hidden = [f for f in HIDDEN_FIELDS if isinstance(action, dict) and f in action]
            if hidden:
                raise ToolCallError(
                    "invalid_request",
                    f'Leave out "{hidden[0]}" from the actions of {spec.name}: the memory tool'
                    " sets it itself.",
                )
        for field in args:
            if field in known:
                continue
            if field in HIDDEN_FIELDS:
                raise ToolCallError(
                    "invalid_request",
                    f'Leave out "{field}" from {spec.name}: the memory tool sets it itself.',
                )
            close = difflib.get_close_matches(field, known, n=1)
            hint = f' Did you mean "{close[0]}"?' if close else ""
            raise ToolCallError(
                "invalid_request",
                f'Unknown field "{field}" for {spec.name}.{hint} Known fields: {", ".join(known)}.',
            )

    def _with_identity(self, spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
        fields = REQUEST_TYPES[spec.op].__struct_fields__
        body = dict(args)
        if "workflow_id" in fields and self.workflow_id is not None:
            body["workflow_id"] = self.workflow_id
        if "agent_id" in fields and self.agent_id is not None:
            body["agent_id"] = self.agent_id
        if "workspace" in fields and body.get("workspace") is None:
            if self.workspace is not None:
                body["workspace"] = self.workspace
            elif spec.op in STATE_OPS:
                raise ToolCallError(
                    "invalid_request",
                    f"{spec.name} needs `workspace`: no default workspace is configured."
                    " Pass the workspace's name (list_workspaces shows them).",
                )
            else:
                body.pop("workspace", None)
        if self.session_id is not None:
            body["context"] = {"session_id": self.session_id}
        return body

    @staticmethod
    def _explain(spec: ToolSpec, text: str) -> str:
        message = f"Invalid arguments for {spec.name}: {text}."
        if match := _UNKNOWN_FIELD_RE.search(text):  # defensive: `_check_fields` runs first
            return f'Unknown field "{match.group(1)}" for {spec.name}.'
        if match := _FIELD_PATH_RE.search(text):
            prop = spec.parameters["properties"].get(match.group(1), {})
            if isinstance(prop.get("enum"), list):
                message += f" {match.group(1)} must be one of: {', '.join(prop['enum'])}."
            elif prop.get("description"):
                message += f" {match.group(1)}: {prop['description']}"
        return message

    # -- running ---------------------------------------------------------------------------

    async def run(self, name: str, arguments: Mapping[str, Any] | str | bytes | None) -> ToolResult:
        """Run one tool call; the result's `data` is what the model should see."""
        try:
            prepared = self.prepare(name, arguments)
            reply = await self._send(prepared)
        except ToolCallError as exc:
            reply = exc.reply()
        except Exception:
            # Never let a model's call take the agent down; the id ties the text to the log.
            ref = uuid.uuid4().hex[:12]
            log.exception("tool.failed", tool=name, ref=ref)
            reply = {
                "success": False,
                "code": "internal",
                "error": f"The memory tool failed unexpectedly (ref {ref}). Retry once; if it"
                " fails again, go on without memory.",
            }
        return ToolResult(tool=name, data=_compact(reply))

    async def call(self, name: str, arguments: Mapping[str, Any] | str | bytes | None) -> str:
        """Run one tool call and return the JSON text a model should see."""
        return (await self.run(name, arguments)).text

    async def _send(self, prepared: PreparedCall) -> dict[str, Any]:
        # The bus's own send path: its trust's subjects and the request's trace.
        try:
            data = await self.bus.request_raw(prepared.op, prepared.body)
        except BusTimeout:
            raise ToolCallError(
                "unavailable",
                f"No reply from the memory service within {self.bus.timeout:g}s. Retry the"
                " same call in a moment.",
            ) from None
        except Unavailable:
            raise ToolCallError(
                "unavailable",
                "The memory service is not running (no responders). Retry in a moment;"
                " if it keeps failing, go on without memory.",
            ) from None
        except NatsError as exc:
            raise ToolCallError(
                "unavailable",
                f"Cannot reach the memory bus ({type(exc).__name__}). Retry in a moment.",
            ) from None
        try:
            reply = msgspec.json.decode(data)
        except msgspec.DecodeError:
            reply = None
        if not isinstance(reply, dict):
            raise ToolCallError(
                "internal", f"The memory service sent an unreadable reply to {prepared.op}."
            )
        return reply
