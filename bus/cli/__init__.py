"""`membus`: the operator's and developer's console (Typer for commands, Rich for output).

Every command talks to a running bus through the SDK, like any agent: `--nats-url`
(default `MEMBUS_NATS_URL`) and `--namespace` (default `MEMBUS_NAMESPACE`, else `default`).
Commands print tables, or with `--json` the reply as it came; an error reply prints the
bus's message (it says how to recover) with its code and exits 1.
"""

from __future__ import annotations

import os

from bus.cli import live, reads, spaces, transfer, writes
from bus.cli.base import app, json_text, out, shown
from bus.cli.live import event_line, service_stats
from bus.cli.transfer import read_export

# The command that sends each operation of the protocol (tests check it covers them all).
COMMANDS: dict[str, str] = {
    "add": "add",
    "search": "search",
    "describe": "describe",
    "list": "list",
    "get": "get",
    "delete": "delete",
    "clear_by_type": "clear",
    "compact": "compact",
    "update": "update",
    "apply": "apply",
    "history": "history",
    "recall": "recall",
    "timeline": "timeline",
    "people": "people",
    "create_workspace": "workspace create",
    "list_workspaces": "workspace list",
    "load_workspace": "workspace show",
    "update_workspace": "workspace update",
    "archive_workspace": "workspace archive",
    "create_state": "state save",
    "list_states": "state list",
    "load_state": "state load",
    "archive_state": "state archive",
    "capture": "capture",
    "reconcile": "reconcile",
    "export": "export",
    "import": "import",
}

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
