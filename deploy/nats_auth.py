"""`python -m deploy.nats_auth`: a nats-server configuration with one user per agent, so that
the server itself decides what each agent may touch (PROTOCOL.md, "Transport", "Trust and
stores", "Durable writes").

Each agent NAME in namespace NS at trust T may publish only its own namespace at its own
trust, and subscribe only its private inbox prefix `_INBOX_<NAME>` (never `_INBOX.>`, so no
agent can read another's replies):

- full: publish `mem.NS.*` and `memq.NS.<op>` (op: add, update, delete, capture);
  subscribe `_INBOX_NAME.>` and `mem.NS.events.>`.
- inner, familiar, public: publish `mem.NS.*.T` and `memq.NS.<op>.T`; subscribe
  `_INBOX_NAME.>`.

Everything else is denied. One `handlers` user serves every namespace: it subscribes `mem.>`,
`memq.>`, `$SRV.>` and `_INBOX.>`, publishes events, service and JetStream API subjects, and
replies to the agents' private inboxes through `allow_responses`.

    python -m deploy.nats_auth --agent alice:acme:full --agent bob:acme:inner \
        -o membus.conf --credentials membus-credentials.json
    nats-server -c membus.conf -js -sd DIR

The credentials file (mode 0600) holds every user's password, connect URL and inbox prefix.
Passwords in the configuration are bcrypt hashes when the `bcrypt` package is installed (or
`--hash bcrypt`), plain text otherwise (`--hash plain`; the configuration is then 0600 too).
Re-running keeps the passwords of users already in the credentials file unless `--rotate`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contracts.operations import DURABLE_OPERATIONS, FULL_TRUST_OPERATIONS

TRUSTS = ("full", "inner", "familiar", "public")
# A namespace is `[A-Za-z0-9_-]{1,64}` (PROTOCOL.md, "Transport"); agent and user names are held
# to the same alphabet, so that `_INBOX_<name>` is one plain subject token with no wildcard.
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_HANDLERS_USER = "handlers"
DEFAULT_LISTEN = "127.0.0.1:4222"
DEFAULT_BCRYPT_COST = 11  # as nats-server's own mkpasswd


class AuthConfigError(ValueError):
    """Bad input to the generator: a name, namespace or trust that cannot be used."""


@dataclass(frozen=True)
class Agent:
    name: str
    namespace: str
    trust: str

    def __post_init__(self) -> None:
        _check_token(self.name, "agent name")
        _check_token(self.namespace, f"namespace of agent {self.name!r}")
        if self.trust not in TRUSTS:
            raise AuthConfigError(
                f"agent {self.name!r}: unknown trust {self.trust!r}; one of {', '.join(TRUSTS)}"
            )

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.name)


def _check_token(value: object, what: str) -> None:
    if not isinstance(value, str) or not TOKEN.fullmatch(value):
        raise AuthConfigError(
            f"{what} {value!r} is not a plain subject token: use 1-64 of A-Z a-z 0-9 _ - "
            "(no '.', '*', '>' or spaces)"
        )


def inbox_prefix(name: str) -> str:
    """An agent's private inbox prefix; connect with `inbox_prefix=` set to it."""
    return f"_INBOX_{name}"


def agent_permissions(agent: Agent) -> dict[str, Any]:
    ns, trust = agent.namespace, agent.trust
    # Durable writes only for the operations the stream takes: anything else would sit in
    # the stream until a handler rejected it.
    if trust == "full":
        publish = [f"mem.{ns}.*", *(f"memq.{ns}.{op}" for op in DURABLE_OPERATIONS)]
        subscribe = [f"{agent.inbox_prefix}.>", f"mem.{ns}.events.>"]
    else:
        publish = [f"mem.{ns}.*.{trust}"]
        # Export and import need full trust: no durable import below it.
        publish += [
            f"memq.{ns}.{op}.{trust}"
            for op in DURABLE_OPERATIONS
            if op not in FULL_TRUST_OPERATIONS
        ]
        subscribe = [f"{agent.inbox_prefix}.>"]
    return {"publish": {"allow": publish}, "subscribe": {"allow": subscribe}}


def handlers_permissions() -> dict[str, Any]:
    return {
        "publish": {
            "allow": ["mem.*.events.>", "$SRV.>", "_INBOX.>", "$JS.API.>", "$JS.ACK.>"],
        },
        "subscribe": {"allow": ["mem.>", "memq.>", "$SRV.>", "_INBOX.>"]},
        # Replies to requests it received, on the agents' private inboxes: one reply each,
        # within nats-server's default window (2 minutes).
        "allow_responses": True,
    }


@dataclass
class User:
    name: str
    password: str
    permissions: dict[str, Any]
    comment: str
    inbox_prefix: str
    agent: Agent | None = None


@dataclass
class Generated:
    config: str
    credentials: dict[str, Any]
    hashed: bool
    users: list[User] = field(default_factory=list)


def parse_agent(spec: str) -> Agent:
    """`NAME:NAMESPACE:TRUST`."""
    parts = spec.split(":")
    if len(parts) != 3:
        raise AuthConfigError(f"--agent {spec!r}: expected NAME:NAMESPACE:TRUST")
    return Agent(*parts)


def load_agents_file(path: Path) -> list[Agent]:
    """A JSON or TOML file: `{"agents": [{"name", "namespace", "trust"}, ...]}` (TOML:
    `[[agents]]` tables); JSON may also be the bare list."""
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise AuthConfigError(f"{path}: cannot parse: {exc}") from None
    entries = data.get("agents") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise AuthConfigError(f"{path}: expected a list of agents under 'agents'")
    agents = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"name", "namespace", "trust"}:
            raise AuthConfigError(
                f"{path}: agent #{i + 1} must have exactly 'name', 'namespace', 'trust'"
            )
        agents.append(Agent(entry["name"], entry["namespace"], entry["trust"]))
    return agents


def _quote(value: str) -> str:
    # Every value written is a token, a subject, a path, a URL-safe password or a bcrypt hash;
    # JSON quoting is nats-server's quoted string. Quoted, a `$` is not a variable reference.
    return json.dumps(value)


def _render_permissions(perms: dict[str, Any], indent: str) -> list[str]:
    lines = [f"{indent}permissions: {{"]
    for kind in ("publish", "subscribe"):
        allow = ", ".join(_quote(s) for s in perms[kind]["allow"])
        lines.append(f"{indent}  {kind}: {{ allow: [{allow}] }}")
    if perms.get("allow_responses"):
        lines.append(f"{indent}  allow_responses: true")
    lines.append(f"{indent}}}")
    return lines


def _hash_password(password: str, cost: int) -> str:
    import bcrypt

    return str(bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode())


def bcrypt_available() -> bool:
    try:
        import bcrypt  # noqa: F401
    except ImportError:
        return False
    return True


def server_url_for(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    if not host or host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"nats://{host}:{port or 4222}"


def generate(
    agents: Sequence[Agent],
    *,
    handlers_user: str = DEFAULT_HANDLERS_USER,
    listen: str = DEFAULT_LISTEN,
    server_url: str | None = None,
    store_dir: Path | None = None,
    hash_passwords: bool | None = None,
    bcrypt_cost: int = DEFAULT_BCRYPT_COST,
    passwords: dict[str, str] | None = None,
) -> Generated:
    """The configuration text and the credentials (a JSON-ready dict). `hash_passwords` None
    hashes when `bcrypt` is importable; `passwords` are kept for the users they name."""
    _check_token(handlers_user, "handlers user name")
    if not agents:
        raise AuthConfigError("no agents: give --agent NAME:NAMESPACE:TRUST or --agents-file")
    seen = {handlers_user}
    for agent in agents:
        if agent.name in seen:
            raise AuthConfigError(f"user name {agent.name!r} is given twice")
        seen.add(agent.name)
    if hash_passwords is None:
        hash_passwords = bcrypt_available()
    elif hash_passwords and not bcrypt_available():
        raise AuthConfigError("--hash bcrypt needs the bcrypt package: pip install bcrypt")
    if not 4 <= bcrypt_cost <= 31:
        raise AuthConfigError(f"bcrypt cost {bcrypt_cost} is out of range 4..31")
    passwords = passwords or {}
    url = server_url or server_url_for(listen)

    def password(name: str) -> str:
        return passwords.get(name) or secrets.token_urlsafe(24)

    users = [
        User(
            handlers_user,
            password(handlers_user),
            handlers_permissions(),
            "the handlers: every namespace, events, the micro service, JetStream",
            "_INBOX",
        )
    ]
    users += [
        User(
            a.name,
            password(a.name),
            agent_permissions(a),
            f"agent {a.name}: namespace {a.namespace}, trust {a.trust}",
            a.inbox_prefix,
            a,
        )
        for a in agents
    ]

    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"# memory-bus NATS configuration, generated by `python -m deploy.nats_auth` ({stamp}).",
        "# One user per agent; see deploy/nats/README.md. Run: nats-server -c <this> -js -sd DIR",
        '# An agent connects with its user, password and inbox_prefix "_INBOX_<name>".',
    ]
    if hash_passwords:
        lines.append(f"# Passwords are bcrypt hashes (cost {bcrypt_cost}); the plain ones are in")
        lines.append("# the credentials file written alongside.")
    else:
        lines += [
            "# WARNING: passwords are in PLAIN TEXT (the bcrypt package was not available or",
            "# --hash plain was given). Keep this file private (mode 0600), or install bcrypt",
            "# and generate it again.",
        ]
    lines += [
        "",
        f"listen: {listen}",
        "",
        "# PROTOCOL.md caps a request body at 256 KiB; keep the NATS limit above it.",
        "max_payload: 1MB",
        "",
        "# JetStream carries the durable writes (stream MEMBUS_WRITES on memq.>).",
    ]
    # fsync every write before acknowledging it: with the default (every 2 minutes) a
    # power loss or kernel crash loses acknowledged writes (Jepsen, NATS 2.12, 2025).
    lines += ["jetstream {", "  sync_interval: always"]
    if store_dir is not None:
        lines += [f"  store_dir: {_quote(str(store_dir))}"]
    else:
        lines += ["  # The store directory comes from the command line: -sd DIR."]
    lines += ["}"]
    lines += ["", "authorization {", "  users = ["]
    for user in users:
        secret = _hash_password(user.password, bcrypt_cost) if hash_passwords else user.password
        lines += [
            f"    # {user.comment}",
            "    {",
            f"      user: {_quote(user.name)}",
            f"      password: {_quote(secret)}",
            *_render_permissions(user.permissions, "      "),
            "    }",
        ]
    lines += ["  ]", "}", ""]

    host = url.removeprefix("nats://")
    credentials: dict[str, Any] = {"server": url, "generated": stamp, "users": {}}
    for user in users:
        entry: dict[str, Any] = {
            "user": user.name,
            "password": user.password,
            "url": f"nats://{user.name}:{user.password}@{host}",
            "inbox_prefix": user.inbox_prefix,
            "permissions": user.permissions,
        }
        if user.agent is not None:
            entry["namespace"] = user.agent.namespace
            entry["trust"] = user.agent.trust
        else:
            entry["role"] = "handlers"
        credentials["users"][user.name] = entry
    return Generated("\n".join(lines), credentials, hash_passwords, users)


def _write_private(path: Path, text: str, mode: int) -> None:
    """Written with `mode` from the start (no moment with wider permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write(generated: Generated, config_path: Path, credentials_path: Path) -> None:
    _write_private(credentials_path, json.dumps(generated.credentials, indent=2) + "\n", 0o600)
    _write_private(config_path, generated.config, 0o644 if generated.hashed else 0o600)


def existing_passwords(credentials_path: Path) -> dict[str, str]:
    if not credentials_path.exists():
        return {}
    try:
        users = json.loads(credentials_path.read_text(encoding="utf-8"))["users"]
        return {name: str(u["password"]) for name, u in users.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AuthConfigError(
            f"{credentials_path} is not a credentials file of this command ({exc}); "
            "move it away or pass --rotate"
        ) from None


def collect_agents(specs: Iterable[str], files: Iterable[Path]) -> list[Agent]:
    agents = [parse_agent(spec) for spec in specs]
    for path in files:
        agents += load_agents_file(path)
    return agents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.nats_auth",
        description="Generate a nats-server configuration with one user per agent.",
        epilog="Then: nats-server -c CONFIG -js -sd DIR. See deploy/nats/README.md.",
    )
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME:NAMESPACE:TRUST",
        help=f"an agent (repeatable); TRUST is one of {', '.join(TRUSTS)}",
    )
    parser.add_argument(
        "--agents-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help='JSON or TOML (.toml): {"agents": [{"name", "namespace", "trust"}, ...]}',
    )
    parser.add_argument(
        "-o", "--out", type=Path, default=Path("membus.conf"), help="configuration file"
    )
    parser.add_argument(
        "--credentials",
        type=Path,
        help="credentials file, mode 0600 (default: <out stem>-credentials.json)",
    )
    parser.add_argument("--handlers-user", default=DEFAULT_HANDLERS_USER)
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help=f"default {DEFAULT_LISTEN}")
    parser.add_argument("--server-url", help="the URL agents connect to (default: from --listen)")
    parser.add_argument(
        "--store-dir",
        type=Path,
        help="JetStream store_dir in the file; then start nats-server without -sd (it refuses "
        "both). Default: none, give -sd DIR on the command line",
    )
    parser.add_argument(
        "--hash",
        choices=("auto", "bcrypt", "plain"),
        default="auto",
        help="passwords in the configuration: bcrypt hashes (auto: when bcrypt is installed)",
    )
    parser.add_argument("--bcrypt-cost", type=int, default=DEFAULT_BCRYPT_COST)
    parser.add_argument(
        "--rotate", action="store_true", help="new passwords for every user, even known ones"
    )
    args = parser.parse_args(argv)

    credentials_path = args.credentials or args.out.with_name(f"{args.out.stem}-credentials.json")
    try:
        agents = collect_agents(args.agent, args.agents_file)
        generated = generate(
            agents,
            handlers_user=args.handlers_user,
            listen=args.listen,
            server_url=args.server_url,
            store_dir=args.store_dir,
            hash_passwords={"auto": None, "bcrypt": True, "plain": False}[args.hash],
            bcrypt_cost=args.bcrypt_cost,
            passwords={} if args.rotate else existing_passwords(credentials_path),
        )
        write(generated, args.out, credentials_path)
    except (AuthConfigError, OSError) as exc:
        parser.error(str(exc))
    how = "bcrypt-hashed" if generated.hashed else "PLAIN TEXT (install bcrypt to hash them)"
    print(f"wrote {args.out}: {len(agents)} agents + {args.handlers_user!r}; passwords {how}")
    print(f"wrote {credentials_path} (mode 0600): passwords, URLs, inbox prefixes")
    print(f"run:  nats-server -c {args.out} -js -sd DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
