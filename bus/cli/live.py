"""Running and watching a bus: `up` (the embedded stack), `tail` (events live), `webhook`
(events POSTed), `stats` (every handler instance) and `ui` (the inspection page)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, cast

import msgspec
import nats
import typer
from nats.errors import TimeoutError as NatsTimeoutError
from rich.table import Table

from bus.cli.base import (
    DEFAULT_NS,
    DEFAULT_URL,
    AsJson,
    Namespace,
    NatsUrl,
    app,
    connected,
    err,
    json_text,
    out,
    print_json,
    run,
    short,
    shown,
)
from contracts.messages import Event
from contracts.subjects import SERVICE_NAME


@app.command(rich_help_panel="Run")
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
    # Its own session: a Ctrl-C at the terminal reaches this process alone, which passes
    # it on once (the stack stops its servers and handlers on SIGINT and SIGTERM alike).
    child = subprocess.Popen(args, start_new_session=True, preexec_fn=_in_the_child)

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    raise typer.Exit(128 - code if code < 0 else code)


def _in_the_child() -> None:
    """Before the stack starts: SIGINT handled as usual even if this process was started
    with it ignored (Python then never makes it a KeyboardInterrupt), and SIGTERM when
    `membus up` dies without passing a signal on (SIGKILL), so the stack is never left
    running orphaned (Linux's PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


_ACTION_STYLE = {"added": "green", "updated": "yellow", "deleted": "red"}


def event_line(event: Event) -> str:
    """One event as a line of Rich markup: time, action (coloured), type, where, the
    memory's id and version after the change, preview."""
    style = _ACTION_STYLE.get(event.action, "cyan")
    where = event.workflow_id or "(general)"
    who = f" by {shown(event.agent_id)}" if event.agent_id else ""
    return (
        f"[dim]{event.at.strftime('%H:%M:%S')}[/] [{style}]{shown(event.action):<7}[/]"
        f" [bold]{shown(event.type)}[/] {shown(where)}{who}"
        f" [dim]{shown(event.id)} v{event.version}[/]"
        f"  {shown(short(event.preview, 80))}"
    )


@app.command(rich_help_panel="Run")
def tail(
    workflow: Annotated[str | None, typer.Argument(help="Only this workflow's events.")] = None,
    general: Annotated[bool, typer.Option(help="Only general memories' events.")] = False,
    type: Annotated[str | None, typer.Option("--type", "-t", help="Only this type.")] = None,
    action: Annotated[str | None, typer.Option(help="added, updated or deleted.")] = None,
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
    as_json: AsJson = False,
) -> None:
    """Follow events live, one line each, until Ctrl-C."""

    async def work() -> None:
        async with connected(nats_url, namespace) as bus:
            stream = await bus.subscribe(workflow, general=general, type=type, action=action)
            err.print(f"[dim]following {shown(stream.subject)} (Ctrl-C stops)[/]")
            async with stream:
                async for event in stream:
                    if as_json:
                        print(json_text(msgspec.json.encode(event)), flush=True)
                    else:
                        out.print(event_line(event))

    run(work)


@app.command(rich_help_panel="Run")
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
    namespace: Namespace = DEFAULT_NS,
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
    run(lambda: serve(nats_url, settings))


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


@app.command(rich_help_panel="Run")
def stats(
    wait: Annotated[float, typer.Option(help="Seconds to gather replies.")] = 0.5,
    nats_url: NatsUrl = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Every handler instance's micro stats: requests and errors, the busiest endpoints."""

    async def work() -> list[dict[str, Any]]:
        # Through the bus's own connect: a server that is not there is one clear error.
        async with connected(nats_url, DEFAULT_NS) as bus:
            return await service_stats(bus.nc, wait)

    found = run(work)
    if as_json:
        print_json(found)
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


@app.command(rich_help_panel="Run")
def ui(
    port: Annotated[int, typer.Option(help="Port of the page.")] = 8484,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    nats_url: NatsUrl = DEFAULT_URL,
    namespace: Namespace = DEFAULT_NS,
) -> None:
    """Serve the inspection page: overview, memories, search, history, workspaces, events."""
    from bus.ui import serve

    err.print(f"inspection page of {namespace}: http://{host}:{port}/ (Ctrl-C stops)")
    run(lambda: serve(nats_url, namespace, host=host, port=port))


@app.command(rich_help_panel="Run")
def migrate() -> None:
    """Bring Redis (MEMBUS_REDIS_URL) to this version's key layout, as a starting handler
    does, and count again any namespace whose counts were taken away. Runs the handler
    package installed beside this one, with the handlers' MEMBUS_* settings."""
    # A process of the service's own, not an import: the SDK does not depend on it.
    done = subprocess.run([sys.executable, "-m", "handlers", "migrate"], check=False)
    raise typer.Exit(done.returncode)
