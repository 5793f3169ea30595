"""A network of our own for partition tests: a bridge in this (the root) namespace and a
network namespace per process of an embedded stack, each joined to the bridge by a veth pair
with an address of a private /24 that exists nowhere else on the machine. `cut` makes a node
deaf and mute to some peers with iptables inside the node's own namespace (both directions:
INPUT and OUTPUT), packets dropped or connections reset; `heal` lifts it. The test process
stays in the root namespace and reaches every node through the bridge.

Needs root, iproute2 and iptables (`make system-tools` installs iptables where missing).
Every name carries this process's id, and `close` removes all of it, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from deploy.embedded import Placement

How = Literal["drop", "reject"]
# Our /24 is 10.77.<n>.0/24 for the first <n> no route of this machine names yet.
PREFIX = "10.77"
BRIDGE_HOST = 1  # the bridge's address (this process's side): .1; nodes from .10
FIRST_NODE_HOST = 10


class NetlabError(RuntimeError):
    pass


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetlabError(f"{shlex.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def require() -> None:
    """A clear failure (not a skip: `make test` is meant to run these) where the lab cannot
    be built."""
    if os.geteuid() != 0:
        raise NetlabError(
            "the partition tests make network namespaces, a bridge and iptables rules: run"
            " them as root (CI does), or leave them out with -m 'not partitions'"
        )
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            raise NetlabError(f"{tool} not found: install {package} (make system-tools)")


def free_subnet() -> str:
    """The first 10.77.<n> that no address or route of this machine is in."""
    taken = _run("ip", "-4", "-o", "addr", "show") + _run("ip", "-4", "route", "show")
    used = {int(n) for n in re.findall(rf"\b{re.escape(PREFIX)}\.(\d+)\.", taken)}
    for n in range(256):
        if n not in used:
            return f"{PREFIX}.{n}"
    raise NetlabError(f"every {PREFIX}.<n>.0/24 is in use on this machine")


@dataclass(frozen=True)
class Node:
    name: str  # the stack's name for the process: "nats-2", "redis-node-1", "handler-1"
    netns: str
    address: str
    veth: str  # its pair's end on the bridge


@dataclass
class Netlab:
    tag: str
    subnet: str
    bridge: str
    nodes: dict[str, Node] = field(default_factory=dict)
    _cut: set[str] = field(default_factory=set)

    @classmethod
    @contextlib.contextmanager
    def up(cls, names: Iterable[str]) -> Iterator[Netlab]:
        """A namespace for each of `names` on a new bridge, removed when the `with` ends."""
        require()
        tag = f"mb{os.getpid()}"
        lab = cls(tag=tag, subnet=free_subnet(), bridge=f"{tag}br")
        try:
            lab._build(list(names))
            yield lab
        finally:
            lab.close()

    def _build(self, names: list[str]) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.subnet}.{BRIDGE_HOST}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, name in enumerate(names):
            node = Node(
                name,
                netns=f"{self.tag}-{name}",
                address=f"{self.subnet}.{FIRST_NODE_HOST + i}",
                veth=f"{self.tag}v{i}",
            )
            self.nodes[name] = node
            _run("ip", "netns", "add", node.netns)
            # Made with its other end already inside the namespace, named eth0 there.
            _run(
                "ip",
                "link",
                "add",
                node.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                node.netns,
            )
            _run("ip", "link", "set", node.veth, "master", self.bridge, "up")
            _run("ip", "-n", node.netns, "addr", "add", f"{node.address}/24", "dev", "eth0")
            _run("ip", "-n", node.netns, "link", "set", "eth0", "up")
            _run("ip", "-n", node.netns, "link", "set", "lo", "up")
        if len(names) >= 2:
            self._check_bridged(self.nodes[names[0]], self.nodes[names[1]])

    def _check_bridged(self, a: Node, b: Node) -> None:
        """One namespace reaches another across the bridge. A host whose firewall filters
        bridged traffic (br_netfilter with a FORWARD policy of DROP, as Docker sets it)
        would otherwise show up as servers that never meet."""
        with subprocess.Popen(
            [*self.placement(a.name).prefix, sys.executable, "-c", _LISTEN, a.address],
            stdout=subprocess.PIPE,
            text=True,
        ) as listener:
            assert listener.stdout is not None
            port = listener.stdout.readline().strip()
            try:
                reached = subprocess.run(
                    [
                        *self.placement(b.name).prefix,
                        sys.executable,
                        "-c",
                        _CONNECT,
                        a.address,
                        port,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=15,
                )
            finally:
                listener.kill()
        if reached.returncode != 0:
            raise NetlabError(
                f"{b.address} cannot reach {a.address} across bridge {self.bridge}: does this"
                " host's firewall filter bridged traffic (net.bridge.bridge-nf-call-iptables=1"
                f" and FORWARD dropping)? {reached.stderr.strip()[-300:]}"
            )

    def placement(self, name: str) -> Placement:
        node = self.nodes[name]
        return Placement(node.address, ("ip", "netns", "exec", node.netns))

    def placements(self) -> dict[str, Placement]:
        return {name: self.placement(name) for name in self.nodes}

    def address(self, name: str) -> str:
        return self.nodes[name].address

    def cut(self, name: str, peers: Iterable[str], how: How = "drop") -> None:
        """Cut `name` from each of `peers`, both ways, by rules in `name`'s namespace:
        "drop" (packets vanish: connections hang until a timeout) or "reject" (TCP answered
        with a reset: connections fail at once)."""
        node = self.nodes[name]
        for peer in peers:
            address = self.address(peer)
            for chain, side in (("INPUT", "-s"), ("OUTPUT", "-d")):
                if how == "drop":
                    self._iptables(node, "-A", chain, side, address, "-j", "DROP")
                    continue
                # The reset REJECT makes is itself a packet between the two: let it through
                # the other direction's rule, else that rule drops it and "reject" hangs
                # like "drop".
                tcp = (side, address, "-p", "tcp")
                self._iptables(node, "-A", chain, *tcp, "--tcp-flags", "RST", "RST", "-j", "ACCEPT")
                self._iptables(
                    node, "-A", chain, *tcp, "-j", "REJECT", "--reject-with", "tcp-reset"
                )
                self._iptables(node, "-A", chain, side, address, "-j", "REJECT")
        self._cut.add(name)

    def heal(self, name: str | None = None) -> None:
        """Lift every cut of `name` (of every node when None): its namespace's INPUT and
        OUTPUT chains hold nothing but our rules."""
        for cut in [name] if name else sorted(self._cut):
            for chain in ("INPUT", "OUTPUT"):
                self._iptables(self.nodes[cut], "-F", chain)
            self._cut.discard(cut)

    def rules(self, name: str) -> str:
        """The namespace's rules as `iptables -S` prints them (for a report)."""
        return self._iptables(self.nodes[name], "-S")

    def _iptables(self, node: Node, *args: str) -> str:
        # -w: wait for the xtables lock rather than fail while another rule is being added.
        return _run("ip", "netns", "exec", node.netns, "iptables", "-w", "5", *args)

    def close(self) -> None:
        """Remove the namespaces, veths and bridge (their rules go with the namespaces).
        Stop the processes in the namespaces first: a namespace lives on while one runs in
        it. Errors are collected and raised once everything was tried."""
        errors = []
        for node in self.nodes.values():
            for cmd in (("ip", "link", "del", node.veth), ("ip", "netns", "del", node.netns)):
                try:
                    _run(*cmd)
                except NetlabError as exc:
                    if "Cannot find device" not in str(exc):  # gone with the namespace
                        errors.append(str(exc))
        self.nodes.clear()
        self._cut.clear()
        try:
            _run("ip", "link", "del", self.bridge)
        except NetlabError as exc:
            if "Cannot find device" not in str(exc):
                errors.append(str(exc))
        if errors:
            raise NetlabError("; ".join(errors))


_LISTEN = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen()
print(s.getsockname()[1], flush=True)
s.accept()
"""
_CONNECT = """
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
"""
