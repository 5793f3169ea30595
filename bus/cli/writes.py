"""Writing commands: add, update, delete, clear, compact, capture, and the extractor's pair
`reconcile` (what to do with proposed facts) and `apply` (do it, all or nothing)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import msgspec
import typer
from rich.table import Table

from bus.cli.base import (
    DEFAULT_NS,
    DEFAULT_URL,
    Agent,
    AsJson,
    Namespace,
    NatsUrl,
    TagsOpt,
    Workflow,
    app,
    ask,
    err,
    instant,
    json_object,
    one_of,
    out,
    request_body,
    sends,
    short,
    shown,
    when,
    write_scope,
)
from bus.client import MemoryBus
from bus.jetstream import Accepted
from contracts.messages import (
    AddReply,
    AddRequest,
    ApplyReply,
    ApplyRequest,
    CaptureRequest,
    ClearByTypeRequest,
    CompactRequest,
    DeleteRequest,
    ReconcileReply,
    ReconcileRequest,
    UpdateRequest,
)

Durable = Annotated[
    bool,
    typer.Option(
        "--durable",
        help="Through JetStream: acknowledged once stored, applied at most once; the outcome"
        " is the write's event.",
    ),
]
Importance = Annotated[float | None, typer.Option(metavar="0..1", help="How much it matters.")]
Ttl = Annotated[
    int | None, typer.Option("--ttl", metavar="SECONDS", help="Forget after; 0: never.")
]
WorkspaceWrite = Annotated[
    str | None, typer.Option("--workspace", metavar="NAME", help="The workspace it belongs to.")
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only the memory's id (for scripts).")
]
ExpectedVersion = Annotated[
    int | None,
    typer.Option(
        "--expected-version",
        metavar="N",
        min=0,
        help="Write only if the memory is still at this version (else a conflict naming its"
        " version now, exit 1).",
    ),
]
OPEN = "open"


def _bound(value: str | None, option: str) -> datetime | msgspec.UnsetType | None:
    """An update's validity bound: unset when not given, None (open) for `open`."""
    if value is None:
        return msgspec.UNSET
    if value.strip().lower() == OPEN:
        return None
    return instant(value, option)


def accepted_line(reply: Accepted) -> str:
    return f"accepted by JetStream: request {shown(reply.request_id)} (seq {reply.seq})"


def _added_lines(
    reply: AddReply, workflow: str | None, type_: str, key: str | None = None
) -> list[str]:
    if reply.duplicate_of:
        lines = [
            f"repeat of {shown(reply.id)}: mentioned {reply.mention_count} times"
            f" (version {reply.version})"
        ]
    else:
        expiry = when(reply.expires_at) if reply.expires_at else "never"
        held = f"key {shown(key)}, " if key is not None else ""
        verb = "replaced" if reply.replaced else "added"
        lines = [
            f"{verb} {shown(reply.id)} ({held}version {reply.version},"
            f" importance {reply.importance}, expires {expiry})"
        ]
    if workflow and reply.workflow_id is None:
        lines.append(
            f"stored as general: {shown(type_)} is general-scoped (--scope workflow keeps it"
            f" in {shown(workflow)})"
        )
    if reply.redacted:
        kinds = ", ".join(reply.redacted)
        lines.append(f"redacted before storing: {shown(kinds)} (stored as [redacted:<kind>])")
    if reply.superseded:
        lines.append(f"supersedes {shown(', '.join(reply.superseded))}")
    if reply.missing:
        lines.append(f"[yellow]not found to supersede:[/] {shown(', '.join(reply.missing))}")
    return lines


@app.command(rich_help_panel="Write")
@sends(AddRequest)
def add(
    type: Annotated[
        str, typer.Argument(metavar="TYPE", help="Memory type, e.g. user_pref, knowledge.")
    ],
    content: Annotated[str, typer.Argument(metavar="CONTENT", help="What to remember.")],
    tag: TagsOpt = None,
    importance: Importance = None,
    ttl: Ttl = None,
    idle_ttl: Annotated[
        int | None,
        typer.Option(metavar="SECONDS", help="Forget once no read returned it for this long."),
    ] = None,
    valid_from: Annotated[
        str | None, typer.Option(metavar="TIME", help="When it started to hold (ISO 8601).")
    ] = None,
    valid_until: Annotated[
        str | None, typer.Option(metavar="TIME", help="When it stopped holding (ISO 8601).")
    ] = None,
    supersedes: Annotated[
        list[str] | None,
        typer.Option(metavar="ID", help="A memory this one replaces (repeat for several)."),
    ] = None,
    title: Annotated[str | None, typer.Option(metavar="TEXT", help="A short title.")] = None,
    scope: Annotated[
        str | None, typer.Option(metavar="SCOPE", help="general or workflow (default: the type's).")
    ] = None,
    workflow: Workflow = None,
    agent: Agent = None,
    workspace: WorkspaceWrite = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            metavar="KEY",
            help="A name for it: the current memory of its store holding this key is"
            " replaced in place (same id, version + 1).",
        ),
    ] = None,
    expected_version: Annotated[
        int | None,
        typer.Option(
            "--expected-version",
            metavar="N",
            min=0,
            help="With --key: replace only the memory at this version; 0: only if no memory"
            " holds the key yet (else a conflict, exit 1).",
        ),
    ] = None,
    durable: Durable = False,
    quiet: Quiet = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Store a memory (a repeat of live content counts a mention instead; with --key, it
    replaces the memory holding that key)."""
    fields: dict[str, Any] = {
        "tags": tag or (),
        "importance": importance,
        "ttl_s": ttl,
        "idle_ttl_s": idle_ttl,
        "scope": write_scope(scope),
        "valid_from": instant(valid_from, "--valid-from"),
        "valid_until": instant(valid_until, "--valid-until"),
        "supersedes": supersedes or (),
        "title": title,
        "workspace": workspace,
        "key": key,
        "expected_version": expected_version,
    }

    async def send(bus: MemoryBus) -> AddReply | Accepted:
        mem = bus.agent(workflow_id=workflow, agent_id=agent)
        if durable:
            return await mem.durable.add(type, content, **fields)
        return await mem.add(type, content, **fields)

    reply = ask(nats_url, namespace, send, as_json=as_json)
    _print_added(reply, as_json, quiet, workflow, type, key)


def _print_added(
    reply: AddReply | Accepted,
    as_json: bool,
    quiet: bool,
    workflow: str | None,
    type_: str,
    key: str | None = None,
) -> None:
    if as_json:
        return
    if quiet:  # a durable write's id is its request's: the memory's comes with its event
        print(reply.request_id if isinstance(reply, Accepted) else reply.id)
    elif isinstance(reply, Accepted):
        out.print(accepted_line(reply))
    else:
        for line in _added_lines(reply, workflow, type_, key):
            out.print(line)


@app.command(rich_help_panel="Write")
@sends(UpdateRequest)
def update(
    id: Annotated[str, typer.Argument(metavar="ID", help="The memory to change.")],
    content: Annotated[str | None, typer.Option(metavar="TEXT", help="New content.")] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option(metavar="TAG", help="The new tags, replacing the old (repeat)."),
    ] = None,
    importance: Importance = None,
    ttl: Ttl = None,
    valid_from: Annotated[
        str | None, typer.Option(metavar="TIME", help="New start of validity; `open` clears it.")
    ] = None,
    valid_until: Annotated[
        str | None, typer.Option(metavar="TIME", help="New end of validity; `open` clears it.")
    ] = None,
    expected_version: ExpectedVersion = None,
    agent: Agent = None,
    durable: Durable = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Change one memory: its content, tags, importance, TTL or validity window (with
    --expected-version, only if nobody changed it since that version)."""
    fields: dict[str, Any] = {
        "content": content,
        "tags": tag,
        "importance": importance,
        "ttl_s": ttl,
        "valid_from": _bound(valid_from, "--valid-from"),
        "valid_until": _bound(valid_until, "--valid-until"),
        "expected_version": expected_version,
    }

    async def send(bus: MemoryBus) -> Any:
        mem = bus.agent(agent_id=agent)
        if durable:
            return await mem.durable.update(id, **fields)
        return await mem.update(id, **fields)

    reply = ask(nats_url, namespace, send, as_json=as_json)
    if as_json:
        return
    if isinstance(reply, Accepted):
        out.print(accepted_line(reply))
        return
    expiry = when(reply.expires_at) if reply.expires_at else "never"
    out.print(
        f"updated {shown(reply.id)} (version {reply.version}, importance {reply.importance},"
        f" expires {expiry})"
    )
    if reply.redacted:
        out.print(f"redacted before storing: {shown(', '.join(reply.redacted))}")


@app.command(rich_help_panel="Write")
@sends(DeleteRequest)
def delete(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="The memories to delete.")],
    erase: Annotated[
        bool,
        typer.Option(
            "--erase",
            help="Also take their text out of everything the service keeps (history kept as"
            " tombstones, caches, sessions, the bus's streams). Full trust only.",
        ),
    ] = False,
    durable: Durable = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Delete memories (ids not found are named; deleting twice is not an error)."""

    async def send(bus: MemoryBus) -> Any:
        mem = bus.agent()
        target = mem.durable if durable else mem
        return await target.delete(ids, erase=erase)

    reply = ask(nats_url, namespace, send, as_json=as_json)
    if as_json:
        return
    if isinstance(reply, Accepted):
        out.print(accepted_line(reply))
        return
    out.print(f"deleted {reply.deleted}")
    if erase:
        out.print(
            f"erased {reply.erased or 0} (and {reply.erased_messages or 0} stream messages)"
            + ("" if reply.scan_complete is not False else "; the stream scan was bounded")
        )
    if reply.missing:
        err.print(f"[yellow]not found:[/] {shown(', '.join(reply.missing))}")


@app.command(rich_help_panel="Write")
@sends(ClearByTypeRequest)
def clear(
    type: Annotated[str, typer.Argument(metavar="TYPE", help="The type to delete.")],
    workflow: Workflow = None,
    general: Annotated[
        bool, typer.Option("--general", help="The general memories of the type, not a workflow's.")
    ] = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Delete every memory of a type in one workflow (-w), or the general ones (--general)."""
    if (workflow is None) == (not general):
        raise typer.BadParameter("name a workflow (-w WF) or --general", param_hint="-w")
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).clear_by_type(
            type, scope="general" if general else "workflow"
        ),
        as_json=as_json,
    )
    if not as_json:
        out.print(f"deleted {reply.deleted}")


@app.command(rich_help_panel="Write")
@sends(CompactRequest)
def compact(
    type: Annotated[str, typer.Argument(metavar="TYPE", help="The type to compact.")],
    keep: Annotated[int, typer.Option(metavar="N", help="How many to keep.")],
    by: Annotated[str, typer.Option(metavar="ORDER", help="importance, recency or accesses.")],
    workflow: Workflow = None,
    workspace: Annotated[
        str | None, typer.Option("--workspace", metavar="NAME", help="A workspace's memories.")
    ] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Keep the N best current memories of a type (in a workflow, a workspace, or the
    general ones) and delete the rest; each deletion is announced and in its history."""
    order = one_of(by, ("importance", "recency", "accesses"), "--by")
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow, workspace=workspace).compact(
            type,
            keep=keep,
            by=order,  # type: ignore[arg-type]  # checked by one_of
        ),
        as_json=as_json,
    )
    if not as_json:
        out.print(f"deleted {reply.deleted}, kept at most {keep}")


@app.command(rich_help_panel="Write")
@sends(CaptureRequest)
def capture(
    tool: Annotated[str, typer.Argument(metavar="TOOL", help="The tool's name.")],
    args: Annotated[
        str | None, typer.Option("--args", metavar="JSON", help="Its arguments, a JSON object.")
    ] = None,
    output: Annotated[str, typer.Option(metavar="TEXT", help="What it returned.")] = "",
    error: Annotated[bool, typer.Option("--error", help="The run failed.")] = False,
    duration_ms: Annotated[
        float | None, typer.Option(metavar="MS", help="How long it ran.")
    ] = None,
    workflow: Workflow = None,
    agent: Agent = None,
    workspace: WorkspaceWrite = None,
    durable: Durable = False,
    quiet: Quiet = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Record one tool run as a searchable `trace` memory."""
    arguments = json_object(args, "the arguments", "--args") if args else {}

    async def send(bus: MemoryBus) -> Any:
        mem = bus.agent(workflow_id=workflow, agent_id=agent, workspace=workspace)
        fields: dict[str, Any] = {"args": arguments, "output": output, "error": error}
        fields["duration_ms"] = duration_ms
        if durable:
            return await mem.durable.capture(tool, **fields)
        return await mem.capture(tool, **fields)

    reply = ask(nats_url, namespace, send, as_json=as_json)
    _print_added(reply, as_json, quiet, None, "trace")


def _with_defaults(body: dict[str, Any], defaults: dict[str, str | None]) -> bytes:
    """A request body with the options given filling what it leaves out, as sent."""
    for name, value in defaults.items():
        if value is not None:
            body.setdefault(name, value)
    return json.dumps(body).encode()


FileArg = Annotated[
    str | None,
    typer.Argument(metavar="[FILE|-]", help="The request's JSON body (-: standard input)."),
]


@app.command(rich_help_panel="Write")
@sends(ReconcileRequest)
def reconcile(
    file: FileArg = None,
    fact: Annotated[
        list[str] | None,
        typer.Option("--fact", metavar="TEXT", help="A proposed fact (repeat), instead of FILE."),
    ] = None,
    workflow: Workflow = None,
    workspace: Annotated[
        str | None, typer.Option("--workspace", metavar="NAME", help="Compare in a workspace.")
    ] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """For facts an extractor proposes: the nearest current memories and what to do with
    each (noop, supersede or add). Writes nothing; `membus apply` does it."""
    if (file is None) == (not fact):
        raise typer.BadParameter("give FILE (or - for standard input), or --fact")
    if file is not None:
        body = request_body(file, "reconcile")
    else:
        body = {"facts": [{"content": text} for text in fact or ()]}
    data = _with_defaults(body, {"workflow_id": workflow, "workspace": workspace})
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.request("reconcile", data, ReconcileReply),
        as_json=as_json,
    )
    if as_json:
        return
    table = Table(title=f"{len(reply.results)} facts", title_justify="left")
    for name in ("fact", "action", "target", "nearest"):
        table.add_column(name)
    for r in reply.results:
        near = r.neighbours[0] if r.neighbours else None
        nearest = f"{near.similarity:.2f} {short(near.content, 40)}" if near else "-"
        table.add_row(
            shown(short(r.content, 50)), shown(r.action), shown(r.target or "-"), shown(nearest)
        )
    out.print(table)


@app.command(rich_help_panel="Write")
@sends(ApplyRequest)
def apply(
    file: Annotated[
        str, typer.Argument(metavar="FILE|-", help="The request's JSON body (-: standard input).")
    ],
    workflow: Workflow = None,
    agent: Agent = None,
    workspace: Annotated[
        str | None, typer.Option("--workspace", metavar="NAME", help="The actions' workspace.")
    ] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Write several actions (add, update, supersede, delete) at once: all of them, or none
    when one is refused (the error names its index). FILE holds {"actions": [...]}."""
    defaults = {"workflow_id": workflow, "agent_id": agent, "workspace": workspace}
    data = _with_defaults(request_body(file, "apply"), defaults)
    reply = ask(
        nats_url,
        namespace,
        lambda bus: bus.request("apply", data, ApplyReply),
        as_json=as_json,
    )
    if as_json:
        return
    table = Table(title=f"{len(reply.results)} actions applied", title_justify="left")
    for name in ("#", "action", "id"):
        table.add_column(name)
    for a in reply.results:
        table.add_row(str(a.index), shown(a.action), shown(a.id))
    out.print(table)
