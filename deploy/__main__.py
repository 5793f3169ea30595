"""`python -m deploy up`: start NATS, Redis Stack and N handlers locally, run the demo, and
keep serving until Ctrl-C (or exit after the demo with `--demo-only`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections import deque
from pathlib import Path

from deploy.demo import run_demo
from deploy.embedded import EmbeddedError, EmbeddedStack, claim_port, wait_for_handlers

# More restarts than this within the window is a crash loop: stop rather than spin.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0


def supervise(stack: EmbeddedStack, every_s: float = 1.0) -> None:
    """Until Ctrl-C or SIGTERM: restart any child that exits, saying which and where its log
    is; an EmbeddedError when they keep exiting."""
    restarts: deque[float] = deque()
    while True:
        time.sleep(every_s)
        for line in stack.revive():
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
        )
    except EmbeddedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
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
        asyncio.run(wait_for_handlers(stack.nats_url, args.handlers, procs))
        print(f"{args.handlers} handlers serve mem.*.<op> in queue group 'memory'")
        if not args.no_demo:
            asyncio.run(run_demo(stack.nats_url))
        if args.demo_only:
            return 0
        print(f"The bus is up: MEMBUS_NATS_URL={stack.nats_url}. Ctrl-C stops it.")
        # Where to look next (the demo wrote to namespace "demo").
        print(
            f"Look inside (with MEMBUS_NATS_URL={stack.nats_url} set): membus describe -n demo,"
            " membus tail -n demo, membus ui -n demo (then http://127.0.0.1:8484/)"
        )
        print("Watching NATS, Redis Stack and the handlers: any that exits is restarted.")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            supervise(stack)
        return 0
    except EmbeddedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        print("stopped: handlers, Redis Stack, NATS")


if __name__ == "__main__":
    sys.exit(main())
