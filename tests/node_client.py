"""Node and npm for the tests of the TypeScript SDK (clients/typescript): its dependencies
installed from the npm registry with `npm ci` when they are missing or older than the lock,
and its scripts run in a process group of their own, ended whole on a timeout."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "typescript"


def missing_tools() -> str | None:
    """Why node and npm cannot run here, or None."""
    absent = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if absent:
        return (
            f"{' and '.join(absent)} not found: install Node.js 18+ (Debian: apt-get install"
            " nodejs npm)"
        )
    return None


def run(args: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a command in clients/typescript; its exit code and output (stdout and stderr).
    On a timeout its whole process group gets SIGTERM (the SDK's tests then stop the servers
    they started), then SIGKILL."""
    proc = subprocess.Popen(
        args,
        cwd=CLIENT,
        env={**os.environ, "MEMBUS_PYTHON": sys.executable, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return -1, f"{' '.join(args)} did not finish within {timeout}s\n{out}"
    return proc.returncode, out


def ensure_node_modules(timeout: float = 600) -> None:
    """`npm ci` (registry only, no install scripts) when node_modules is missing or older
    than package-lock.json."""
    installed = CLIENT / "node_modules" / ".package-lock.json"
    lock = CLIENT / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    code, out = run(
        ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        timeout,
        {"SCARF_ANALYTICS": "false"},
    )
    assert code == 0, f"npm ci failed in {CLIENT}:\n{out}"
