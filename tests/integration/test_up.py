"""`python -m deploy up` (what `make up` runs) as a user meets it: its ports and its children.

Each test starts the real command as a process, with its own data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from procs import alive
from slow_loading import LOAD_SLOWLY, fill_for_slow_loading

from bus import MemoryBus, Unavailable
from deploy.embedded import EmbeddedError, EmbeddedStack, claim_port, free_port

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


class Up:
    """One `deploy up` process; its output lines as they come."""

    def __init__(
        self,
        tmp_path: Path,
        *args: str,
        env: dict[str, str] | None = None,
        sigint_ignored: bool = False,
    ) -> None:
        """`sigint_ignored`: start it with SIGINT ignored, as a script's background job is."""
        previous = signal.getsignal(signal.SIGINT)
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through fork and exec
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "deploy", "up", "--data-dir", str(tmp_path), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={
                    **os.environ,
                    "MEMBUS_EMBEDDER": "hash",
                    "PYTHONUNBUFFERED": "1",
                    **(env or {}),
                },
                start_new_session=True,
            )
        finally:
            if sigint_ignored:
                signal.signal(signal.SIGINT, previous or signal.SIG_DFL)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 90.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found
        raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.seen)}")

    def stop(self) -> list[str]:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait()

    def wait(self, timeout: float = 60) -> list[str]:
        """Wait for the end; every line not yet read."""
        self.proc.wait(timeout)
        self.reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return [self.lines.get() for _ in range(self.lines.qsize())]

    def children(self, marker: str) -> list[int]:
        """Pids of this process's children whose command line holds `marker`."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and marker in cmdline:
                found.append(int(entry.name))
        return found


def test_a_taken_port_stops_up_with_its_number(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = Up(tmp_path, "--nats-port", str(port), "--redis-port", "0", "--no-demo")
        said = " ".join(up.wait())
    assert up.proc.returncode == 1, said
    assert f"port {port} is taken" in said and "--nats-port" in said, said


def test_a_port_whose_connections_are_still_closing_is_reused() -> None:
    port = free_port()
    # A connection the server side closes first leaves the server's port in TIME_WAIT, as a
    # server stopped by Ctrl-C does.
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()
        time.sleep(0.05)
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the check `deploy up` used to make
    assert claim_port(port, "--nats-port") == port


def test_claim_port_zero_is_any_free_port_and_a_listening_port_is_an_error() -> None:
    assert claim_port(0, "--redis-port") > 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(EmbeddedError, match="--redis-port"):
            claim_port(taken.getsockname()[1], "--redis-port")


def test_up_restarts_a_server_or_handler_that_exits_and_says_so(tmp_path: Path) -> None:
    up = Up(tmp_path, "--handlers", "1", "--nats-port", "0", "--redis-port", "0", "--no-demo")
    closing: list[redis.Redis] = []
    rest: list[str] = []
    try:
        redis_url = up.wait_for(r"Redis Stack (redis://\S+)").group(1)
        up.wait_for(r"Watching NATS, Redis Stack and the handlers")
        client = redis.Redis.from_url(redis_url)
        closing.append(client)
        with contextlib.suppress(redis.ConnectionError):  # it closes the connection as it goes
            client.shutdown(nosave=True)
        said = up.wait_for(r"Redis Stack exited with code (\S+) \(log: (\S+)\); restarting it")
        assert Path(said.group(2)).name == "redis.log"
        deadline = time.monotonic() + 30
        while True:
            try:
                assert client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "Redis was not restarted"
                time.sleep(0.2)

        (handler,) = up.children("-m handlers")
        os.kill(handler, signal.SIGKILL)
        said = up.wait_for(r"handler 1 exited with code (-?\d+) \(log: (\S+)\); restarting it")
        assert said.group(1) == "-9" and Path(said.group(2)).name == "handler-1.log"
        deadline = time.monotonic() + 30
        while not (again := up.children("-m handlers")):
            assert time.monotonic() < deadline, "the handler was not restarted"
            time.sleep(0.2)
        assert again != [handler]
        assert up.proc.poll() is None  # still serving
    finally:
        for c in closing:
            c.close()
        rest = up.stop()
    assert up.proc.returncode == 0
    assert any("stopped: handlers, Redis Stack, NATS" in line for line in rest), rest


def test_the_embedded_redis_runs_on_jemalloc_and_libc_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # glibc's heap fragments under the bus's churn (RSS grew where `used_memory` did not):
    # the embedded Redis preloads Debian's jemalloc, which `make system-tools` installs.
    from deploy.embedded import jemalloc

    def mapped(allocator: str) -> bool:
        monkeypatch.setenv("MEMBUS_REDIS_ALLOCATOR", allocator)
        jemalloc.cache_clear()
        stack = EmbeddedStack.temporary()
        stack.redis_port = free_port()
        try:
            proc = stack.start_redis()
            assert redis.Redis(port=stack.redis_port).ping()
            return "libjemalloc" in Path(f"/proc/{proc.pid}/maps").read_text()
        finally:
            stack.stop()
            jemalloc.cache_clear()

    assert jemalloc() is not None, "no libjemalloc.so.2: install Debian's libjemalloc2"
    assert mapped("jemalloc")
    assert not mapped("libc")


def _ignores(pid: int, sig: int) -> bool:
    """Whether process `pid` ignores `sig` (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigIgn for {pid}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("when", ["serving", "starting"])
def test_up_started_with_sigint_ignored_stops_on_either_signal_with_every_child(
    tmp_path: Path, sig: signal.Signals, when: str
) -> None:
    # A background job of a script starts with SIGINT ignored (and Python then installs no
    # KeyboardInterrupt): `up` still stops on SIGINT, and on SIGTERM alike, sent to it
    # alone, while it serves or while it starts, and takes NATS, Redis and every handler
    # down with it.
    up = Up(tmp_path, "--nats-port", "0", "--redis-port", "0", "--no-demo", sigint_ignored=True)
    children: list[int] = []
    took = float("inf")
    try:
        up.wait_for(r"Watching NATS" if when == "serving" else r"starting 2 handler processes")
        children = up.children("")
        assert len(children) == 4, children  # nats-server, valkey-server, 2 handlers
        assert not any(_ignores(pid, signal.SIGINT) for pid in children)
        sent = time.monotonic()
        os.kill(up.proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.proc.wait(30)
            took = time.monotonic() - sent
    finally:
        if up.proc.poll() is None:
            os.killpg(up.proc.pid, signal.SIGKILL)
        rest = up.wait()
        left = [pid for pid in children if alive(pid)]
        for pid in left:  # orphans of a failed run: not to outlive the test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    said = "".join(up.seen + rest)
    assert took < 20, said
    assert up.proc.returncode == (0 if when == "serving" else 128 + sig), said
    assert f"{sig.name}: stopping the bus" in said, said
    assert "stopped: handlers, Redis Stack, NATS" in said, said
    assert not left, said


def _slow_loading_data_dir(data_dir: Path, keys: int) -> None:
    """A data directory as `up` leaves it, whose Redis takes about `keys` ms to load (with
    LOAD_SLOWLY)."""
    stack = EmbeddedStack(data_dir=data_dir, redis_port=free_port(), persist=True)
    try:
        stack.start_redis()
        fill_for_slow_loading(stack.redis_port, keys)
    finally:
        stack.stop()


def test_up_waits_for_redis_to_load_its_data_then_runs_the_demo(tmp_path: Path) -> None:
    # A data directory that holds data: Redis answers LOADING until it has read it, so `up`
    # waits for that before the handlers and the demo, and says so.
    _slow_loading_data_dir(tmp_path, 5000)
    up = Up(
        tmp_path,
        *("--handlers", "1", "--nats-port", "0", "--redis-port", "0", "--demo-only"),
        env={"MEMBUS_REDIS_OPTIONS": LOAD_SLOWLY},
    )
    lines = up.wait(timeout=110)
    said = "".join(lines)
    assert up.proc.returncode == 0, said
    assert re.search(r"Redis Stack \(port \d+\) is loading \d+ MB of data from disk", said), said
    took = re.search(r"Redis Stack loaded its data in (\d+\.\d)s", said)
    assert took is not None and float(took.group(1)) >= 3, said
    loaded = next(i for i, line in enumerate(lines) if "loaded its data" in line)
    serving = next(i for i, line in enumerate(lines) if "handlers serve" in line)
    assert loaded < serving, said
    assert "== observer saw" in said, said
    assert "unavailable" not in said, said  # the demo never had to retry


def test_up_restarts_a_redis_that_loads_slowly_and_the_handlers_serve_again(
    tmp_path: Path,
) -> None:
    # Redis exits mid-run on a data directory that takes seconds to load: `up` restarts it
    # and waits for it while the handler, not restarted, answers `unavailable`, then serves.
    _slow_loading_data_dir(tmp_path, 5000)
    up = Up(
        tmp_path,
        *("--handlers", "1", "--nats-port", "0", "--redis-port", "0", "--no-demo"),
        env={"MEMBUS_REDIS_OPTIONS": LOAD_SLOWLY},
    )
    rest: list[str] = []
    try:
        redis_url = up.wait_for(r"Redis Stack (redis://\S+)").group(1)
        nats_url = up.wait_for(r"MEMBUS_NATS_URL=(nats://[\d.:]+)\.").group(1)
        up.wait_for(r"Watching NATS, Redis Stack and the handlers")
        (handler,) = up.children("-m handlers")
        client = redis.Redis.from_url(redis_url)
        with contextlib.suppress(redis.ConnectionError):  # it closes the connection as it goes
            client.shutdown(nosave=True)
        client.close()
        up.wait_for(r"Redis Stack exited with code \S+ \(log: \S+\); restarting it")
        up.wait_for(r"Redis Stack \(port \d+\) is loading \d+ MB of data from disk")
        refused, added = asyncio.run(_while_loading(up, nats_url))
        assert any("loading its data from disk" in m for m in refused), refused
        assert added
        assert up.children("-m handlers") == [handler]
    finally:
        rest = up.stop()
    assert up.proc.returncode == 0, rest


async def _while_loading(up: Up, nats_url: str) -> tuple[list[str], bool]:
    """Ask the bus to add a memory every 0.2 s until `up` says Redis has loaded, then once
    more: the `unavailable` messages meanwhile, and whether the last add succeeded."""
    refused: list[str] = []
    async with await MemoryBus.connect(nats_url, namespace="reload", timeout=10) as bus:
        mem = bus.agent()
        loaded = asyncio.ensure_future(
            asyncio.to_thread(up.wait_for, r"Redis Stack loaded its data in")
        )
        while not loaded.done():
            try:
                await mem.add("knowledge", "written while Redis loads")
            except Unavailable as exc:
                refused.append(exc.message)
            await asyncio.sleep(0.2)
        await loaded
        for _ in range(50):  # the handler's first request after the load reconnects
            try:
                added = await mem.add("knowledge", "written once Redis has loaded")
                return refused, added.id is not None
            except Unavailable:
                await asyncio.sleep(0.2)
    return refused, False


def test_a_demo_the_bus_refuses_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    # The demo's namespace written with 384-dimension vectors, then handlers that embed with
    # 256: the bus answers `unavailable` with what to do, and `up` says it in one line.
    ports = ("--handlers", "1", "--nats-port", "0", "--redis-port", "0", "--demo-only")
    first = Up(tmp_path, *ports)
    done = "".join(first.wait(timeout=110))
    assert first.proc.returncode == 0, done
    again = Up(tmp_path, *ports, env={"MEMBUS_HASH_DIMENSION": "256"})
    said = "".join(again.wait(timeout=110))
    assert again.proc.returncode == 1, said
    assert re.search(r"the demo stopped: \(unavailable\) Namespace 'demo' holds hash", said), said
    assert "Traceback" not in said
    assert "stopped: handlers, Redis Stack, NATS" in said
