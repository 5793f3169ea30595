"""`python -m deploy up` (what `make up` runs) as a user meets it: its ports and its children.

Each test starts the real command as a process, with its own data directory.
"""

from __future__ import annotations

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

from deploy.embedded import EmbeddedError, claim_port, free_port

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


class Up:
    """One `deploy up` process; its output lines as they come."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deploy", "up", "--data-dir", str(tmp_path), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "MEMBUS_EMBEDDER": "hash", "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
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

    def wait(self) -> list[str]:
        """Wait for the end; every line not yet read."""
        self.proc.wait(60)
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
    from deploy.embedded import EmbeddedStack, jemalloc

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
