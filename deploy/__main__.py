"""`python -m deploy up`: start NATS, Redis Stack and N handlers locally, run the demo, and
keep serving until Ctrl-C or SIGTERM (or exit after the demo with `--demo-only`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from bus.errors import BusError
from deploy.demo import run_demo
from deploy.embedded import EmbeddedError, EmbeddedStack, claim_port, wait_for_handlers

T = TypeVar("T")

# More restarts than this within the window is a crash loop: stop rather than spin.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: stop the bus, every child of it, wherever `up` is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Signals:
    """SIGINT and SIGTERM alike stop `up`: Stopped is raised where it is (a start-up wait,
    the supervision loop), or, inside `run`, its coroutine is cancelled first (the demo
    closes its connections and its MCP server process) and Stopped raised after.

    SIGINT is set even when `up` started with it ignored (a background job of a script):
    Python then installs no KeyboardInterrupt for it, and Ctrl-C did nothing, while the
    children, which set their own handlers, stopped and were restarted. Set before any
    child starts, so none inherits "ignored"."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    @staticmethod
    def ignore() -> None:
        """Once stopping: a second Ctrl-C must not cut the stop short (it is bounded)."""
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return  # stopping already: let the stop finish
        self.received = signum
        task = self._task
        if task is not None and not task.done() and self._loop is not None:
            task.cancel()
            self._loop.call_soon_threadsafe(lambda: None)  # wake a loop blocked in select()
            return
        raise Stopped(signum)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """asyncio.run(coro), stopped (cancelled, then Stopped) by SIGINT or SIGTERM."""

        async def main() -> T:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            try:
                out = await coro
            except asyncio.CancelledError:
                if self.received is None:
                    raise
                raise Stopped(self.received) from None
            finally:
                self._task = None
            if self.received is not None:  # it ended by itself, as the signal came
                raise Stopped(self.received)
            return out

        return asyncio.run(main())


def stray_children() -> list[int]:
    """This process's children still running (Linux: from /proc; elsewhere none known)."""
    me = os.getpid()
    found = []
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def end_strays(grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, any child `stack.stop()` did not know of: one whose start a
    signal cut short before the stack recorded it, or the demo's MCP server process."""
    strays = stray_children()
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while strays and time.monotonic() < deadline:
        time.sleep(0.05)
        strays = stray_children()
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def supervise(stack: EmbeddedStack, every_s: float = 1.0) -> None:
    """Until Ctrl-C or SIGTERM (Stopped): restart any child that exits, saying which and
    where its log is (`stack.say`); an EmbeddedError when they keep exiting."""
    restarts: deque[float] = deque()
    while True:
        time.sleep(every_s)
        for line in stack.revive():
            if stack.say is None:
                print(line, flush=True)
            restarts.append(time.monotonic())
        while restarts and restarts[0] < time.monotonic() - RESTART_WINDOW_S:
            restarts.popleft()
        if len(restarts) > MAX_RESTARTS:
            raise EmbeddedError(
                f"{len(restarts)} restarts within {RESTART_WINDOW_S:.0f}s: stopping the bus"
                f" (logs in {stack.log_dir})"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the embedded bus")
    up.add_argument("--handlers", type=int, default=2, help="handler processes (default 2)")
    up.add_argument("--data-dir", type=Path, default=Path(".membus"), help="data and logs")
    up.add_argument("--nats-port", type=int, default=4222, help="0: any free port")
    up.add_argument("--redis-port", type=int, default=6379, help="0: any free port")
    up.add_argument(
        "--cluster",
        action="store_true",
        help="3 NATS servers (JetStream R3) and a Redis Cluster of 3 primaries with a replica"
        " each, on ports from --redis-port up",
    )
    up.add_argument("--no-demo", action="store_true", help="skip the demo")
    up.add_argument("--demo-only", action="store_true", help="stop everything after the demo")
    args = parser.parse_args(argv)

    signals = Signals()
    signals.install()
    try:
        stack = EmbeddedStack(
            data_dir=args.data_dir.resolve(),
            nats_port=claim_port(args.nats_port, "--nats-port"),
            # A cluster's nodes take ports in a row from --redis-port (0: any free ones).
            redis_port=0
            if args.cluster and args.redis_port == 0
            else claim_port(args.redis_port, "--redis-port"),
            persist=True,
            log_dir=args.data_dir.resolve() / "logs",
            nats_nodes=3 if args.cluster else 1,
            redis_primaries=3 if args.cluster else 0,
            say=lambda line: print(line, flush=True),
        )
    except EmbeddedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Stopped as stopped:
        return 128 + stopped.signum
    serving = False
    try:
        stack.start_servers()
        print(f"NATS        {stack.nats_url}  (JetStream on, fsync per write)")
        print(
            "            open: no users or permissions, reachable from this machine only"
            " (loopback). For per-agent users and trust levels see deploy/nats/README.md."
        )
        if stack.redis_primaries:
            ports = ", ".join(str(p) for p in stack.redis_cluster_ports)
            print(
                f"Redis Cluster {stack.redis_url}  ({stack.redis_primaries} primaries with a"
                f" replica each, ports {ports}; RediSearch + RedisJSON on every node)"
            )
        else:
            print(f"Redis Stack {stack.redis_url}  (RediSearch + RedisJSON)")
        procs = stack.start_handlers(args.handlers)
        print(f"starting {args.handlers} handler processes (logs in {stack.log_dir}) ...")
        signals.run(wait_for_handlers(stack.nats_url, args.handlers, procs))
        print(f"{args.handlers} handlers serve mem.*.<op> in queue group 'memory'")
        if not args.no_demo:
            try:
                signals.run(run_demo(stack.nats_url))
            except BusError as exc:
                # The bus itself is up: say what the demo met, not a traceback, and serve.
                print(f"the demo stopped: ({exc.code}) {exc.message}", file=sys.stderr)
                if args.demo_only:
                    return 1
        if args.demo_only:
            return 0
        serving = True  # from here on a signal is how `up` ends
        print(f"The bus is up: MEMBUS_NATS_URL={stack.nats_url}. Ctrl-C stops it.")
        # Where to look next (the demo wrote to namespace "demo").
        print(
            f"Look inside (with MEMBUS_NATS_URL={stack.nats_url} set): membus describe -n demo,"
            " membus tail -n demo, membus ui -n demo (then http://127.0.0.1:8484/)"
        )
        print("Watching NATS, Redis Stack and the handlers: any that exits is restarted.")
        supervise(stack)
        return 0
    except Stopped as stopped:
        # Before serving, the start or the demo did not finish.
        name = signal.Signals(stopped.signum).name
        print(f"{name}: stopping the bus", flush=True)
        return 0 if serving else 128 + stopped.signum
    except EmbeddedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signals.ignore()
        stack.stop()
        end_strays()
        print("stopped: handlers, Redis Stack, NATS", flush=True)


if __name__ == "__main__":
    sys.exit(main())
