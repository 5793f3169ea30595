"""`membus`: the operator's and developer's console (Typer for commands, Rich for output).

Every command talks to a running bus through the SDK, like any agent: `--nats-url`
(default `MEMBUS_NATS_URL`) and `--namespace` (default `MEMBUS_NAMESPACE`, else `default`).
Commands print tables, or with `--json` the reply as it came; an error reply prints the
bus's message (it says how to recover) with its code and exits 1.
"""

from __future__ import annotations

import os

import typer
from typer.main import get_command_name

from bus.cli import live, reads, spaces, transfer, writes
from bus.cli.base import SENDS, app, json_text, out, shown
from bus.cli.live import event_line, service_stats
from bus.cli.transfer import read_export


def _commands(typer_app: typer.Typer, prefix: str = "") -> dict[str, str]:
    """Operation -> the command (its words) marked as sending it with `@sends`."""
    found: dict[str, str] = {}
    for info in typer_app.registered_commands:
        if info.callback in SENDS:
            word = info.name or get_command_name(info.callback.__name__)
            found[SENDS[info.callback]] = prefix + word
    for group in typer_app.registered_groups:
        sub = group.typer_instance
        if sub is not None:
            found |= _commands(sub, f"{prefix}{group.name or sub.info.name} ")
    return found


# The command that sends each operation of the protocol (tests check it covers them all).
COMMANDS: dict[str, str] = _commands(app)

__all__ = [
    "COMMANDS",
    "app",
    "event_line",
    "json_text",
    "live",
    "main",
    "read_export",
    "reads",
    "service_stats",
    "shown",
    "spaces",
    "transfer",
    "writes",
]


@app.callback()
def _every_command() -> None:
    # Rich wraps at 80 columns when stdout is not a terminal (a pipe, a test): tables with
    # ids need more, unless COLUMNS says otherwise.
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 160


def main() -> None:
    app()
