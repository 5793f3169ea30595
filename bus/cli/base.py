"""What every `membus` command shares: the Typer app, the connection options, sending a
request and printing its reply (a table, or with `--json` the reply as it came), and the
escaping that keeps stored text from driving the terminal."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, cast

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bus.client import MemoryBus
from bus.errors import BusError, Conflict
from contracts import limits
from contracts.messages import Memory, Request, ScoredMemory
from contracts.operations import BY_REQUEST
from contracts.subjects import DEFAULT_NAMESPACE

app = typer.Typer(
    name="membus",
    help="Look inside and operate a memory bus: its memories, workspaces, events, handlers."
    " Every command takes --json (the reply as it came); an error reply exits 1 with its code.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# Command function -> the operation it sends (`bus.cli.COMMANDS` is read from it).
SENDS: dict[Callable[..., Any], str] = {}


def sends(request: type[Request]) -> Callable[[F], F]:
    """Mark a command as the one that sends the operation of `request` (placed below its
    `@app.command`)."""
    op = BY_REQUEST[request].name

    def mark(fn: F) -> F:
        SENDS[fn] = op
        return fn

    return mark


DEFAULT_URL = "nats://127.0.0.1:4222"
NatsUrl = Annotated[
    str,
    typer.Option("--nats-url", envvar="MEMBUS_NATS_URL", metavar="URL", help="The bus's NATS."),
]
Namespace = Annotated[
    str,
    typer.Option(
        "--namespace", "-n", envvar="MEMBUS_NAMESPACE", metavar="NS", help="Namespace to use."
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the reply as JSON, as it came.")]
Workflow = Annotated[
    str | None, typer.Option("--workflow", "-w", metavar="WF", help="Workflow id.")
]
Agent = Annotated[str | None, typer.Option("--agent", "-a", metavar="AGENT", help="Agent id.")]
WorkspaceOpt = Annotated[
    str | None,
    typer.Option("--workspace", metavar="NAME", help="Only this workspace's memories."),
]
Types = Annotated[
    list[str] | None,
    typer.Option("--type", "-t", metavar="TYPE", help="Memory type (repeat for several)."),
]
TagsOpt = Annotated[
    list[str] | None, typer.Option("--tag", metavar="TAG", help="Tag (repeat for several).")
]
Scope = Annotated[str, typer.Option("--scope", metavar="SCOPE", help="both, workflow or general.")]
AsOf = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        metavar="TIME",
        help="What held at this instant (ISO 8601, e.g. 2026-11-01T09:00:00Z; no zone: local"
        " time), memories superseded or ended since included.",
    ),
]
IncludeSuperseded = Annotated[
    bool, typer.Option("--include-superseded", help="Also memories a newer one replaced.")
]
DEFAULT_NS = DEFAULT_NAMESPACE


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


# ---------------------------------------------------------------------------- parsing


def read_scope(value: str) -> Literal["both", "workflow", "general"]:
    if value in ("both", "workflow", "general"):
        return cast(Literal["both", "workflow", "general"], value)
    raise typer.BadParameter("scope is one of: both, workflow, general", param_hint="--scope")


def write_scope(value: str | None) -> Literal["general", "workflow"] | None:
    if value is None or value in ("general", "workflow"):
        return cast(Literal["general", "workflow"] | None, value)
    raise typer.BadParameter("scope is general or workflow", param_hint="--scope")


def instant(value: str | None, option: str = "--as-of") -> datetime | None:
    """An ISO 8601 time from the command line; one without a zone is local time."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a time: write ISO 8601, e.g. 2026-11-01T09:00:00Z",
            param_hint=option,
        ) from None
    return when if when.tzinfo else when.astimezone()


def one_of(value: str, choices: tuple[str, ...], option: str) -> str:
    if value not in choices:
        raise typer.BadParameter(f"one of: {', '.join(choices)}", param_hint=option)
    return value


# ---------------------------------------------------------------------------- sending


class _Recording(MemoryBus):
    """The SDK's connection, keeping each reply as it came, so that `--json` prints the
    bus's own bytes (error replies too) rather than a re-encoding of what the SDK decoded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replies: list[bytes] = []

    async def _send(
        self, op: str, subject: str, body: Any, headers: dict[str, str] | None
    ) -> bytes:
        data = await super()._send(op, subject, body, headers)
        self.replies.append(data)
        return data


@contextlib.asynccontextmanager
async def connected(url: str, namespace: str, timeout: float = 10.0) -> AsyncIterator[_Recording]:
    bus = await _Recording.connect(url, namespace=namespace, timeout=timeout, connect_within=5.0)
    try:
        yield bus
    finally:
        await bus.close()


def run(
    work: Callable[[], Coroutine[Any, Any, T]], on_error: Callable[[], None] | None = None
) -> T:
    """Run one command's coroutine; a bus error ends the command with its message, exit 1
    (after `on_error`)."""
    stop_on_signals()
    try:
        return asyncio.run(work())
    except BusError as exc:
        if on_error is not None:
            on_error()
        err.print(f"[red]error[/] ({shown(exc.code)}): {shown(exc.message)}", soft_wrap=True)
        if isinstance(exc, Conflict) and exc.current_version is not None:
            err.print(conflict_line(exc.id, exc.current_version), soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def conflict_line(memory_id: str | None, current_version: int) -> str:
    """A version conflict's state now, with the CLI's option (the message names the wire
    field)."""
    if memory_id is None:
        return "current version: 0 (no current memory holds the key; --expected-version 0 adds it)"
    return (
        f"current version: {current_version} of {shown(memory_id)} (membus get reads it;"
        f" --expected-version {current_version} writes over it)"
    )


def ask(
    url: str,
    namespace: str,
    call: Callable[[MemoryBus], Coroutine[Any, Any, T]],
    *,
    as_json: bool = False,
    timeout: float = 10.0,
) -> T:
    """One command's requests: connect, `call`, close. With `as_json` the reply is printed
    as it came (one request), or as the SDK summed it (a call of several requests, such as
    `compact`'s bounded rounds, or a durable write's JetStream acknowledgement)."""
    replies: list[bytes] = []

    async def work() -> T:
        async with connected(url, namespace, timeout) as bus:
            try:
                return await call(bus)
            finally:
                replies.extend(bus.replies)

    def error_reply() -> None:
        if as_json and replies:
            print_raw(replies[-1])  # the error reply, as it came

    result = run(work, error_reply)
    if as_json:
        if len(replies) == 1:
            print_raw(replies[0])
        else:
            print_json(result)
    return result


def print_raw(data: bytes) -> None:
    # Written as it is, not through Rich: Rich would decode and re-encode it, writing
    # control and bidi characters raw again.
    out.file.write(json_text(msgspec.json.format(data, indent=2)) + "\n")
    out.file.flush()


def print_json(value: Any) -> None:
    print_raw(msgspec.json.encode(value))


def request_body(source: str, what: str) -> dict[str, Any]:
    """A request's JSON body from a file, or standard input for `-`; capped before decoding."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read(limits.MAX_BODY_BYTES + 1)
        else:
            with open(source, "rb") as f:
                data = f.read(limits.MAX_BODY_BYTES + 1)
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {source}: {exc.strerror}") from None
    if len(data) > limits.MAX_BODY_BYTES:
        raise typer.BadParameter(
            f"{source} is over the {limits.MAX_BODY_BYTES // 1024} KiB request limit:"
            f" split the {what} into several requests"
        )
    return json_object(data, f"{source}: the {what} request")


def json_object(data: str | bytes, what: str, option: str | None = None) -> dict[str, Any]:
    """A JSON object given on the command line or in a file, or a usage error saying why."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"{what} is not JSON: {exc}", param_hint=option) from None
    except RecursionError:
        raise typer.BadParameter(
            f"{what} nests too deep (the bus takes {limits.MAX_NESTING} levels)", param_hint=option
        ) from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{what} is a JSON object, {{...}}", param_hint=option)
    return value


def stop_on_signals() -> None:
    """Ctrl-C stops a command even when the shell started it with SIGINT ignored (in the
    background of a script), and SIGTERM stops it the same way."""
    with contextlib.suppress(ValueError):  # not the main thread (a test's runner)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# ---------------------------------------------------------------------------- printing


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def short(text: str, width: int = 70) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def marks(m: Memory, now: datetime | None = None) -> str:
    """What a reader should know of a memory it may not take as current."""
    now = now or datetime.now().astimezone()
    # A supersede also ends the old memory's validity: "superseded" says both.
    if m.superseded_by:
        return "[superseded] "
    if m.valid_until is not None and m.valid_until <= now:
        return "[ended] "
    return ""


def memory_table(memories: Iterable[Memory], title: str) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    rows = list(memories)
    scored = bool(rows) and isinstance(rows[0], ScoredMemory)
    # The key column only when a memory has one: most never do.
    keyed = any(m.key is not None for m in rows)
    if scored:
        table.add_column("score", justify="right")
    names = ("id", "version", *(("key",) if keyed else ()), "type", "content", "tags")
    for name in (*names, "workflow", "created"):
        table.add_column(
            name,
            overflow="fold" if name in ("id", "key") else "ellipsis",
            justify="right" if name == "version" else "left",
        )
    for m in rows:
        cells = [
            shown(m.id),
            str(m.version),
            *((shown(m.key or "-"),) if keyed else ()),
            shown(m.type),
            shown(marks(m) + short(m.content)),
            shown(", ".join(m.tags)),
            shown(m.workflow_id or "(general)"),
            when(m.created_at),
        ]
        if isinstance(m, ScoredMemory):
            cells.insert(0, f"{m.score:.3f}")
        table.add_row(*cells)
    return table


def record_table(m: Memory) -> Table:
    table = Table(show_header=False, title=f"memory {shown(m.id)}", title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in msgspec.structs.asdict(m).items():
        if value in (None, [], {}):
            continue
        if isinstance(value, datetime):
            value = when(value)
        elif isinstance(value, list | dict):
            value = json.dumps(value, ensure_ascii=False)
        table.add_row(name, shown(value))
    return table
