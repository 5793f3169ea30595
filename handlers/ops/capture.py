"""`capture`: the record of one tool run, published by an agent runtime after each tool call,
stored as its own `trace` memory (never folded by dedup; docs/protocol.md, "Capture of tool
runs").

The trace is an observation: title `Tool run: <tool>`, narrative the arguments and the
output (each cut), facts `tool: <tool>` and `error: <bool>`, tags `tool` and the tool's name,
source `auto`, and the files the arguments name. A plain publish is enough; a request with
a reply subject gets the `add` reply.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from contracts import limits
from contracts.messages import AddReply, AddRequest, CaptureRequest, clip
from contracts.types import TRACE_TYPE
from handlers.ops.deps import Deps
from handlers.ops.registry import handles
from handlers.ops.secrets import Secrets
from handlers.ops.writes import add

# Arguments whose values name files: they become the trace's `related_files`.
FILE_ARGS = ("path", "file", "target", "from", "to")
_NOT_TAG = re.compile(r"[^a-z0-9_:.-]+")
_encoder = msgspec.json.Encoder()


def tool_tag(tool: str) -> str:
    """The tool's name as a tag: lower-cased, other characters as `_`, at most 64."""
    return _NOT_TAG.sub("_", tool.lower()).strip("_")[:64] or "unnamed"


def files_named(args: dict[str, Any]) -> list[str]:
    """The paths the arguments name (a string, or a list of strings, under FILE_ARGS)."""
    out: list[str] = []
    for name in FILE_ARGS:
        value = args.get(name)
        values = value if isinstance(value, list) else [value]
        for item in values:
            path = item[: limits.MAX_FILE_CHARS] if isinstance(item, str) else ""
            if path and path not in out:
                out.append(path)
    return out[: limits.MAX_LIST_ITEMS]


def printable(text: str) -> str:
    """A tool's output or name is whatever it was; a NUL in it (which full-text search
    cannot index, so `add` refuses it) becomes a space instead of failing the capture, so
    the words on both sides of it are found."""
    return text.replace("\x00", " ")


def narrative(req: CaptureRequest, secrets: Secrets) -> str:
    """The trace's narrative: the arguments (as JSON) and the output, each scanned for
    secrets whole before it is cut to its size (a cut could leave half a key unfound)."""
    args = secrets.text("args", _encoder.encode(req.args).decode())
    output = secrets.text("output", printable(req.output))
    args = clip(args, limits.CAPTURE_ARGS_BYTES)
    return f"Arguments: {args}\nOutput: {clip(output, limits.CAPTURE_OUTPUT_BYTES)}"


@handles(CaptureRequest)
async def capture(ns: str, req: CaptureRequest, deps: Deps) -> AddReply:
    secrets = Secrets(deps.settings.secrets)
    # First: the title, facts, tags and metadata are all made from the tool's name.
    tool = secrets.text("tool", printable(req.tool))
    meta: dict[str, Any] = {"tool": tool, "error": req.error}
    if req.duration_ms is not None:
        meta["duration_ms"] = req.duration_ms
    trace = AddRequest(
        type=TRACE_TYPE,
        title=f"Tool run: {tool}",
        narrative=narrative(req, secrets),
        facts=[f"tool: {tool}", f"error: {'true' if req.error else 'false'}"],
        tags=["tool", tool_tag(tool)],
        source="auto",
        agent_id=req.agent_id,
        workflow_id=req.workflow_id,
        workspace=req.workspace,
        related_files=files_named(req.args),
        metadata=meta,
        dedup="none",
        context=req.context,
    )
    reply = await add(ns, trace, deps)
    if secrets.redacted:  # found in the name, arguments or output, before `add` saw them
        found = [] if isinstance(reply.redacted, msgspec.UnsetType) else reply.redacted
        kinds = list(dict.fromkeys([*secrets.redacted, *found]))
        reply = msgspec.structs.replace(reply, redacted=kinds)
    return reply
