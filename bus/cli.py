"""`membus`: the operator's and developer's console (Typer for commands, Rich for output).

Every command talks to a running bus through the SDK, like any agent: `--nats-url`
(default `MEMBUS_NATS_URL`) and `--namespace` (default `MEMBUS_NAMESPACE`, else `default`).
Reads print tables, or the reply's JSON with `--json`; errors print the bus's message (it
says how to recover) and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast

import msgspec
import nats
import typer
from nats.errors import TimeoutError as NatsTimeoutError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bus.client import Accepted, MemoryBus
from bus.errors import BusError
from contracts import limits
from contracts.messages import (
    AddReply,
    DescribeReply,
    Event,
    ImportedMemory,
    ImportRequest,
    Memory,
    RejectedEvent,
    ScoredMemory,
)
from contracts.subjects import DEFAULT_NAMESPACE, DURABLE_STREAM, SERVICE_NAME, rejected_subject

app = typer.Typer(
    name="membus",
    help="Look inside and operate a memory bus: its memories, events, handlers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)
T = TypeVar("T")

NatsUrl = Annotated[
    str,
    typer.Option("--nats-url", envvar="MEMBUS_NATS_URL", help="NATS server of the bus."),
]
Namespace = Annotated[
    str,
    typer.Option("--namespace", "-n", envvar="MEMBUS_NAMESPACE", help="Namespace to use."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the reply as JSON.")]
Workflow = Annotated[str | None, typer.Option("--workflow", "-w", help="Workflow id.")]
Agent = Annotated[str | None, typer.Option("--agent", "-a", help="Agent id.")]
Types = Annotated[list[str] | None, typer.Option("--type", "-t", help="Memory type (repeat).")]
TagsOpt = Annotated[list[str] | None, typer.Option("--tag", help="Tag (repeat).")]
Scope = Annotated[str, typer.Option("--scope", help="both, workflow or general.")]
DEFAULT_URL = "nats://127.0.0.1:4222"
# Import batches stay well under the 256 KiB request limit.
IMPORT_BATCH_BYTES = 192 * 1024


# What stored text must never send to a terminal: C0 controls but newline and tab (ESC
# starts CSI and OSC sequences: clear the screen, set the window title), DEL, the C1
# controls (0x9b is a one-byte CSI for some terminals), and the bidirectional overrides and
# isolates that make text read in another order than it is stored.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: object) -> str:
    """Any text from the bus as Rich prints it literally: control and bidi characters as
    visible escapes (`\\x1b`, `\\u202e`), Rich markup as plain brackets."""
    return escape(_UNSAFE.sub(_visible, str(value)))


def _json_unsafe(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(data: bytes) -> str:
    """JSON from the bus as a terminal may show it: the same JSON, with every character
    `shown` would escape written as a JSON escape (inside strings, the only place JSON
    holds them raw), so it decodes to the same values."""
    return _UNSAFE.sub(_json_unsafe, data.decode())


def _scope(value: str) -> Literal["both", "workflow", "general"]:
    if value not in ("both", "workflow", "general"):
        raise typer.BadParameter("scope is one of: both, workflow, general")
    return value  # type: ignore[return-value]


def _write_scope(value: str | None) -> Literal["general", "workflow"] | None:
    if value is None:
        return None
    if value == "general":
        return "general"
    if value == "workflow":
        return "workflow"
    raise typer.BadParameter("scope is general or workflow")


def _run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one command's coroutine; a bus error ends the command with its message."""
    try:
        return asyncio.run(work())
    except BusError as exc:
        err.print(f"[red]error[/] ({shown(exc.code)}): {shown(exc.message)}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _ask(url: str, namespace: str, call: Callable[[MemoryBus], Coroutine[Any, Any, T]]) -> T:
    """One request of a command: connect, `call`, close."""

    async def work() -> T:
        async with _bus(url, namespace) as bus:
            return await call(bus)

    return _run(work)


@contextlib.asynccontextmanager
async def _bus(url: str, namespace: str, timeout: float = 10.0) -> AsyncIterator[MemoryBus]:
    bus = await MemoryBus.connect(url, namespace=namespace, timeout=timeout, connect_within=5.0)
    try:
        yield bus
    finally:
        await bus.close()


def _print_json(reply: Any) -> None:
    # Written as it is, not through Rich: Rich would decode and re-encode it, writing
    # control and bidi characters raw again.
    out.file.write(json_text(msgspec.json.format(msgspec.json.encode(reply), indent=2)) + "\n")
    out.file.flush()


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(text: str, width: int = 70) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def _memory_table(memories: Iterable[Memory], title: str) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    scored = False
    rows = list(memories)
    if rows and isinstance(rows[0], ScoredMemory):
        scored = True
        table.add_column("score", justify="right")
    for name in ("id", "type", "content", "tags", "workflow", "created"):
        table.add_column(name, overflow="fold" if name == "id" else "ellipsis")
    for m in rows:
        cells = [
            shown(m.id),
            shown(m.type),
            shown(_short(m.content)),
            shown(", ".join(m.tags)),
            shown(m.workflow_id or "(general)"),
            _when(m.created_at),
        ]
        if scored:
            cells.insert(0, f"{m.score:.3f}")  # type: ignore[attr-defined]
        table.add_row(*cells)
    return table


def _record_table(m: Memory) -> Table:
    table = Table(show_header=False, title=f"memory {shown(m.id)}", title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in msgspec.structs.asdict(m).items():
        if value in (None, [], {}):
            continue
        if isinstance(value, datetime):
            value = _when(value)
        elif isinstance(value, list | dict):
            value = json.dumps(value, ensure_ascii=False)
        table.add_row(name, shown(value))
    return table


# ---------------------------------------------------------------------------- commands


@app.command()
def up(
    handlers: Annotated[int, typer.Option(help="Handler processes.")] = 2,
    demo: Annotated[bool, typer.Option(help="Run the short demo first.")] = True,
    data_dir: Annotated[Path, typer.Option(help="Data and logs.")] = Path(".membus"),
    nats_port: Annotated[int, typer.Option(help="0: any free port.")] = 4222,
    redis_port: Annotated[int, typer.Option(help="0: any free port.")] = 6379,
) -> None:
    """Start the embedded bus (NATS, Redis Stack, handlers), as `make up`; Ctrl-C stops it."""
    args = [sys.executable, "-m", "deploy", "up", "--handlers", str(handlers)]
    args += ["--nats-port", str(nats_port), "--redis-port", str(redis_port)]
    args += ["--data-dir", str(data_dir)] + ([] if demo else ["--no-demo"])
    child = subprocess.Popen(args)
    try:
        code = child.wait()
    except KeyboardInterrupt:
        # The stack got the same Ctrl-C: let it stop its servers rather than kill it.
        code = child.wait()
    raise typer.Exit(code)


@app.command()
def add(
    type: Annotated[str, typer.Argument(help="Memory type, e.g. user_pref, knowledge.")],
    content: Annotated[str, typer.Argument(help="What to remember.")],
    tag: TagsOpt = None,
    importance: Annotated[float | None, typer.Option(help="0..1")] = None,
    ttl: Annotated[int | None, typer.Option("--ttl", help="Seconds; 0 permanent.")] = None,
    scope: Annotated[str | None, typer.Option(help="general or workflow.")] = None,
    workflow: Workflow = None,
    agent: Agent = None,
    durable: Annotated[bool, typer.Option(help="Through JetStream.")] = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """Store a memory."""
    where = _write_scope(scope)

    async def send(bus: MemoryBus) -> AddReply | Accepted:
        mem = bus.agent(workflow_id=workflow, agent_id=agent)
        write = mem.durable.add if durable else mem.add
        return await write(
            type, content, tags=tag or (), importance=importance, ttl_s=ttl, scope=where
        )

    reply = _ask(nats_url, namespace, send)
    if as_json:
        _print_json(reply)
    elif isinstance(reply, Accepted):
        out.print(f"accepted by JetStream: request {shown(reply.request_id)} (seq {reply.seq})")
    elif reply.duplicate_of:
        out.print(f"repeat of {shown(reply.id)}: mentioned {reply.mention_count} times")
    else:
        expiry = _when(reply.expires_at) if reply.expires_at else "never"
        out.print(f"added {shown(reply.id)} (importance {reply.importance}, expires {expiry})")


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    workflow: Workflow = None,
    type: Types = None,
    tag: TagsOpt = None,
    limit: Annotated[int, typer.Option(help="Results.")] = 10,
    mode: Annotated[str | None, typer.Option(help="vector, text or hybrid.")] = None,
    scope: Scope = "both",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """Search memories by meaning and words, ranked."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).search(
            query,
            types=type,
            tags=tag,
            limit=limit,
            mode=mode,  # type: ignore[arg-type]
            scope=_scope(scope),
        ),
    )
    if as_json:
        _print_json(reply)
        return
    out.print(_memory_table(reply.results, f"{len(reply.results)} results ({shown(reply.mode)})"))


def _describe_table(d: DescribeReply) -> Table:
    table = Table(show_header=False, title="namespace overview", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("memories", str(d.total))
    # list and search leave these out: say so, or the two totals seem to disagree.
    table.add_row("superseded", f"{d.superseded_count} (left out of list and search)")
    by_type = ", ".join(f"{t}: {n}" for t, n in sorted(d.by_type.items()))
    table.add_row("by type", shown(by_type) or "-")
    table.add_row("workflow / general", f"{d.workflow_count} / {d.general_count}")
    tags = ", ".join(d.tags[:30]) + (" …" if len(d.tags) > 30 or d.tags_truncated else "")
    table.add_row("tags", shown(tags) or "-")
    table.add_row("oldest / newest", f"{_when(d.oldest)} / {_when(d.newest)}")
    table.add_row("embedder", f"{shown(d.embedder)} ({d.dimension} dims)")
    return table


@app.command()
def describe(
    workflow: Workflow = None,
    scope: Scope = "both",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """What the namespace holds: counts by type and scope, tags, oldest and newest."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).describe(scope=_scope(scope)),
    )
    _print_json(reply) if as_json else out.print(_describe_table(reply))


@app.command(name="list")
def list_(
    workflow: Workflow = None,
    type: Types = None,
    tag: TagsOpt = None,
    limit: Annotated[int, typer.Option(help="Memories per page.")] = 20,
    offset: Annotated[int, typer.Option(help="Skip this many.")] = 0,
    scope: Scope = "both",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """List memories, newest first, filtered by type, tag and workflow."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).list(
            types=type, tags=tag, limit=limit, offset=offset, scope=_scope(scope)
        ),
    )
    if as_json:
        _print_json(reply)
        return
    shown = f"{offset + 1}-{offset + reply.count}" if reply.count else "none"
    out.print(_memory_table(reply.memories, f"memories {shown} of {reply.total}"))


@app.command()
def get(
    ids: Annotated[list[str], typer.Argument(help="Memory ids.")],
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """Read memories whole, by id."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent().get(ids),
    )
    if as_json:
        _print_json(reply)
        return
    for m in reply.memories:
        out.print(_record_table(m))
    if reply.missing:
        err.print(f"[yellow]not found:[/] {shown(', '.join(reply.missing))}")
        raise typer.Exit(1)


@app.command()
def recall(
    message: Annotated[str, typer.Argument(help="The turn's text.")],
    session: Annotated[str, typer.Option("--session", "-s", help="Session id.")],
    workflow: Workflow = None,
    limit: Annotated[int, typer.Option(help="Memories at most.")] = 20,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """What an agent should have in mind before a model turn (pre-turn recall)."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow, session_id=session).recall(
            message, limit=limit
        ),
    )
    if as_json:
        _print_json(reply)
        return
    table = Table(title=f"turn {reply.turn}: {len(reply.results)} recalled", title_justify="left")
    for name in ("path", "score", "id", "type", "content"):
        table.add_column(name)
    for m in reply.results:
        content = shown(_short(m.content, 60))
        table.add_row(shown(m.path), f"{m.score:.3f}", shown(m.id), shown(m.type), content)
    out.print(table)
    left = reply.left_out_recalled + reply.left_out_similar
    if left:
        out.print(
            f"left out: {reply.left_out_recalled} recalled lately,"
            f" {reply.left_out_similar} too similar to one given"
        )


@app.command()
def history(
    id: Annotated[str, typer.Argument(help="Memory id.")],
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """What happened to one memory, oldest first."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent().history(id),
    )
    if as_json:
        _print_json(reply)
        return
    table = Table(title=f"history of {shown(reply.id)}", title_justify="left")
    for name in ("at", "event", "agent", "session", "changes"):
        table.add_column(name)
    for e in reply.entries:
        changes = "; ".join(f"{k}: {c.old!r} → {c.new!r}" for k, c in e.changes.items())
        who, session = shown(e.agent_id or "-"), shown(e.session_id or "-")
        table.add_row(_when(e.at), shown(e.event), who, session, shown(changes))
    out.print(table)


@app.command()
def timeline(
    id: Annotated[str, typer.Argument(help="The anchor memory's id.")],
    before: Annotated[int, typer.Option(help="Memories before it.")] = 5,
    after: Annotated[int, typer.Option(help="Memories after it.")] = 5,
    workflow: Workflow = None,
    scope: Scope = "both",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """The memories just before and after one, oldest first (the anchor marked)."""

    reply = _ask(
        nats_url,
        namespace,
        lambda bus: bus.agent(workflow_id=workflow).timeline(
            id, before=before, after=after, scope=_scope(scope), mode="full"
        ),
    )
    if as_json:
        _print_json(reply)
        return
    table = Table(title=f"timeline around {shown(id)}", title_justify="left")
    for name in ("", "created", "id", "type", "content"):
        table.add_column(name)
    for i, m in enumerate(reply.memories):
        mark = "▶" if i == reply.anchor_index else ""
        style = "bold" if i == reply.anchor_index else None
        content = shown(_short(m.content, 60))
        table.add_row(mark, _when(m.created_at), shown(m.id), shown(m.type), content, style=style)
    out.print(table)


_ACTION_STYLE = {"added": "green", "updated": "yellow", "deleted": "red"}


def event_line(event: Event) -> str:
    """One event as a line of Rich markup: time, action (coloured), type, where, preview."""
    style = _ACTION_STYLE.get(event.action, "cyan")
    where = event.workflow_id or "(general)"
    who = f" by {shown(event.agent_id)}" if event.agent_id else ""
    return (
        f"[dim]{event.at.strftime('%H:%M:%S')}[/] [{style}]{shown(event.action):<7}[/]"
        f" [bold]{shown(event.type)}[/] {shown(where)}{who} [dim]{shown(event.id)}[/]"
        f"  {shown(_short(event.preview, 80))}"
    )


@app.command()
def tail(
    workflow: Annotated[str | None, typer.Argument(help="Only this workflow's events.")] = None,
    general: Annotated[bool, typer.Option(help="Only general memories' events.")] = False,
    type: Annotated[str | None, typer.Option("--type", "-t", help="Only this type.")] = None,
    action: Annotated[str | None, typer.Option(help="added, updated or deleted.")] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
    as_json: AsJson = False,
) -> None:
    """Follow events live, one line each, until Ctrl-C."""

    async def work() -> None:
        async with _bus(nats_url, namespace) as bus:
            stream = await bus.subscribe(workflow, general=general, type=type, action=action)
            err.print(f"[dim]following {shown(stream.subject)} (Ctrl-C stops)[/]")
            async with stream:
                async for event in stream:
                    if as_json:
                        print(json_text(msgspec.json.encode(event)), flush=True)
                    else:
                        out.print(event_line(event))

    _run(work)


@app.command()
def webhook(
    url: Annotated[
        str,
        typer.Option(
            "--url", envvar="MEMBUS_WEBHOOK_URL", help="Where each event is POSTed (http/https)."
        ),
    ],
    workflow: Annotated[str | None, typer.Argument(help="Only this workflow's events.")] = None,
    secret: Annotated[
        str | None,
        typer.Option(
            "--secret",
            envvar="MEMBUS_WEBHOOK_SECRET",
            show_default=False,
            help="Sign each body: X-Membus-Signature: sha256=<hex HMAC-SHA256>. Prefer the"
            " environment variable: a command line is visible to other users.",
        ),
    ] = None,
    on_4xx: Annotated[
        str,
        typer.Option(
            "--on-4xx",
            help="An event the receiver refuses (3xx, 4xx but 408/425/429): retry it with"
            " backoff until it is taken, or skip it (logged).",
        ),
    ] = "retry",
    max_backoff: Annotated[
        float, typer.Option(help="Longest wait between two attempts, in seconds.")
    ] = 30.0,
    timeout: Annotated[float, typer.Option(help="Seconds a POST may take.")] = 10.0,
    log_level: Annotated[str, typer.Option(envvar="MEMBUS_LOG_LEVEL", help="Log level.")] = "info",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
) -> None:
    """POST each event to a URL, in order, until Ctrl-C; JetStream keeps the events while
    the receiver is down (up to 7 days), and a restart resumes where it stopped."""
    from bus.logs import configure_logging
    from bus.webhook import OnRefusal, SettingError, WebhookSettings, serve

    try:
        settings = WebhookSettings(
            url=url.strip(),
            namespace=namespace,
            workflow_id=workflow,
            secret=secret,
            timeout_s=timeout,
            max_backoff_s=max_backoff,
            on_4xx=cast(OnRefusal, on_4xx),  # checked by WebhookSettings
        )
    except SettingError as exc:
        raise typer.BadParameter(str(exc), param_hint=exc.option) from None
    configure_logging(log_level)
    _run(lambda: serve(nats_url, settings))


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )


@app.command(name="export")
def export_(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default: standard output).")
    ] = None,
    embeddings: Annotated[
        bool, typer.Option(help="Include vectors (import then needs no embedder).")
    ] = False,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
) -> None:
    """Write every live memory of the namespace as JSON lines (`membus export > file.jsonl`)."""

    async def work() -> int:
        async with _bus(nats_url, namespace, timeout=30.0) as bus:
            total = (await bus.agent().describe()).total
            sink = output.open("wb") if output else sys.stdout.buffer
            written = 0
            try:
                with _progress() as bar:
                    task = bar.add_task(f"export {namespace}", total=total)
                    async for page in bus.export(embeddings=embeddings):
                        lines = (json_text(msgspec.json.encode(m)) + "\n" for m in page)
                        sink.write("".join(lines).encode())
                        written += len(page)
                        bar.update(task, completed=written, total=max(total, written))
                sink.flush()
            finally:
                if output:
                    sink.close()
            return written

    written = _run(work)
    err.print(f"exported {written} memories of {namespace}")


def _batches(memories: list[ImportedMemory]) -> list[list[ImportedMemory]]:
    """Import requests under the request size limit and the per-request count."""
    batches: list[list[ImportedMemory]] = [[]]
    size = 0
    for m in memories:
        n = len(msgspec.json.encode(m))
        full = len(batches[-1]) >= limits.MAX_IMPORT or size + n > IMPORT_BATCH_BYTES
        if batches[-1] and full:
            batches.append([])
            size = 0
        batches[-1].append(m)
        size += n
    return [b for b in batches if b]


def read_export(path: Path) -> list[ImportedMemory]:
    """The memories of an export file; a bad line stops the import before anything is sent."""
    decoder = msgspec.json.Decoder(ImportedMemory)
    found: list[ImportedMemory] = []
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                found.append(decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                raise BusError(f"{path}:{number}: not a memory of an export ({exc})") from None
    return found


async def _has_stream(bus: MemoryBus) -> bool:
    try:
        await bus.nc.jetstream().stream_info(DURABLE_STREAM)
        return True
    except Exception:  # no JetStream, or no stream: request/reply then
        return False


async def _readable(bus: MemoryBus, ids: list[str]) -> set[str]:
    """Which of these memories are live now (read without counting an access)."""
    found: set[str] = set()
    for start in range(0, len(ids), limits.MAX_IDS):
        page = await bus.export_page(ids=ids[start : start + limits.MAX_IDS])
        found.update(m.id for m in page.memories)
        found.update(page.pending)
    return found


async def _applied(bus: MemoryBus, ids: list[str], timeout_s: float) -> list[str]:
    """Wait until these memories are readable (a durable import is applied shortly after
    JetStream has it); the ids still missing at the deadline."""
    deadline = time.monotonic() + timeout_s
    missing = ids
    while missing and time.monotonic() < deadline:
        found = await _readable(bus, missing)
        missing = [mid for mid in missing if mid not in found]
        if missing:
            await asyncio.sleep(0.2)
    return missing


@app.command(name="import")
def import_(
    file: Annotated[Path, typer.Argument(help="A file written by `membus export`.")],
    durable: Annotated[
        bool | None,
        typer.Option(help="Through JetStream (default: when the bus has its stream)."),
    ] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
) -> None:
    """Write an export back: same ids, times and TTLs. Running it twice changes nothing."""

    async def work() -> tuple[int, int, int, bool]:
        memories = read_export(file)
        batches = _batches(memories)
        created = existing = 0
        now = datetime.now().astimezone()
        live = [m.id for m in memories if m.expires_at is None or m.expires_at > now]
        async with _bus(nats_url, namespace, timeout=30.0) as bus:
            use_stream = await _has_stream(bus) if durable is None else durable
            if use_stream:  # JetStream's ack says nothing of them: count them before
                existing = len(await _readable(bus, live))
                created = len(live) - existing
            rejected: list[RejectedEvent] = []
            sub = None
            if use_stream:

                async def on_rejected(msg: Any) -> None:
                    rejected.append(msgspec.json.decode(msg.data, type=RejectedEvent))

                sub = await bus.nc.subscribe(rejected_subject(namespace, "import"), cb=on_rejected)
            with _progress() as bar:
                task = bar.add_task(f"import {namespace}", total=len(memories))
                for batch in batches:
                    if use_stream:
                        # The same batch always has the same id: JetStream drops a repeat.
                        digest = hashlib.sha256(msgspec.json.encode(batch)).hexdigest()[:32]
                        await bus.durable("import", ImportRequest(memories=batch), digest)
                    else:
                        reply = await bus.import_memories(batch)
                        created += len(reply.created)
                        existing += len(reply.existing)
                    bar.advance(task, len(batch))
                if use_stream:
                    bar.update(task, description="applying")
                    missing = await _applied(bus, live, timeout_s=60.0)
                    if sub is not None:
                        await sub.unsubscribe()
                    if rejected:
                        raise BusError(f"the bus rejected part of the import: {rejected[0].error}")
                    if missing:
                        raise BusError(
                            f"{len(missing)} memories were accepted but not applied within 60 s"
                            f" (first: {missing[0]}); check the handlers, then import again"
                            " (what is there already is left alone)."
                        )
        return created, existing, len(memories), use_stream

    created, existing, total, durable_used = _run(work)
    expired = total - created - existing
    how = " through JetStream" if durable_used else ""
    err.print(
        f"{created} imported into {shown(namespace)}{how}, {existing} already there"
        + (f", {expired} expired (left out)" if expired else "")
        + f" ({total} in the file)",
        soft_wrap=True,
    )


async def service_stats(nc: nats.NATS, wait_s: float = 0.5) -> list[dict[str, Any]]:
    """Every handler instance's `$SRV.STATS` reply (micro stats), gathered for `wait_s`."""
    inbox = nc.new_inbox()
    replies: list[dict[str, Any]] = []
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(f"$SRV.STATS.{SERVICE_NAME}", b"", reply=inbox)
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except NatsTimeoutError:
                break
            replies.append(json.loads(msg.data))
    finally:
        await sub.unsubscribe()
    return sorted(replies, key=lambda r: r.get("id", ""))


@app.command()
def stats(
    wait: Annotated[float, typer.Option(help="Seconds to gather replies.")] = 0.5,
    nats_url: NatsUrl = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Every handler instance's micro stats: requests and errors, the busiest endpoints."""

    async def work() -> list[dict[str, Any]]:
        # Through the bus's own connect: a server that is not there is one clear error.
        async with _bus(nats_url, DEFAULT_NAMESPACE) as bus:
            return await service_stats(bus.nc, wait)

    found = _run(work)
    if as_json:
        _print_json(found)
        return
    if not found:
        err.print("[yellow]no handler answered[/]: start them (membus up) or check --nats-url")
        raise typer.Exit(1)
    # Per endpoint, micro counts requests and errors; its processing time would only time
    # the hand-off to a task (see handlers.service), so latency is in the metrics instead.
    table = Table(title=f"{len(found)} handler instances", title_justify="left")
    for name in ("instance", "version", "started", "requests", "errors", "busiest endpoints"):
        numeric = name in ("requests", "errors")
        table.add_column(name, justify="right" if numeric else "left")
    for inst in found:
        endpoints = inst.get("endpoints") or []
        requests = sum(e.get("num_requests", 0) for e in endpoints)
        errors = sum(e.get("num_errors", 0) for e in endpoints)
        top = sorted(endpoints, key=lambda e: -e.get("num_requests", 0))[:3]
        busiest = ", ".join(f"{e['name']} {e['num_requests']}" for e in top if e["num_requests"])
        table.add_row(
            shown(inst.get("id", "?")),
            shown(inst.get("version", "?")),
            shown(str(inst.get("started", ""))[:19].replace("T", " ")),
            str(requests),
            str(errors),
            shown(busiest or "-"),
        )
    out.print(table)


@app.command()
def ui(
    port: Annotated[int, typer.Option(help="Port of the page.")] = 8484,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NAMESPACE,
) -> None:
    """Serve the inspection page: overview, memories, search, history, workspaces, events."""
    from bus.ui import serve

    err.print(f"inspection page of {namespace}: http://{host}:{port}/ (Ctrl-C stops)")
    _run(lambda: serve(nats_url, namespace, host=host, port=port))


@app.callback()
def _every_command() -> None:
    # Rich wraps at 80 columns when stdout is not a terminal (a pipe, a test): tables with
    # ids need more, unless COLUMNS says otherwise.
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 160


def main() -> None:
    app()
