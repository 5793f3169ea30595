"""The `membus` console script against the real bus: two handler processes over NATS.

Most commands run in this process through Typer's runner (fast, and a failure shows its
traceback); `tail` runs as the installed script in a real terminal under tmux, and `up` as
the installed script starting its own embedded stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Servers
from typer.testing import CliRunner

from bus import MemoryBus
from bus.cli import app

pytestmark = pytest.mark.usefixtures("handlers")
MEMBUS = str(Path(sys.executable).with_name("membus"))
ANY_PORTS = ("--nats-port", "0", "--redis-port", "0")


def cli(servers: Servers, ns: str, *args: str, code: int = 0) -> str:
    """Run one command; its standard output (errors are on standard error)."""
    result = CliRunner().invoke(
        app, [*args], env={"MEMBUS_NATS_URL": servers.nats_url, "MEMBUS_NAMESPACE": ns}
    )
    assert result.exit_code == code, (result.output, result.stderr, result.exception)
    return result.stdout


async def acli(servers: Servers, ns: str, *args: str, code: int = 0) -> str:
    """`cli` from an async test: asyncio.run needs a thread without a running loop."""
    return await asyncio.to_thread(cli, servers, ns, *args, code=code)


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, args, env=env)


def as_json(servers: Servers, ns: str, *args: str) -> Any:
    return json.loads(cli(servers, ns, *args, "--json"))


def test_add_then_every_read_command_shows_it(servers: Servers, ns: str) -> None:
    added = cli(servers, ns, "add", "user_pref", "The user prefers short answers", "--tag", "style")
    mid = re.search(r"added (\S+)", added).group(1)  # type: ignore[union-attr]
    cli(servers, ns, "add", "decision", "We chose Postgres for billing", "-w", "wf1", "-a", "bob")
    cli(servers, ns, "add", "knowledge", "Deploys happen on Tuesdays", "--tag", "ops")

    overview = as_json(servers, ns, "describe")
    assert overview["total"] == 2  # general memories: the decision lives in wf1
    assert overview["by_type"] == {"knowledge": 1, "user_pref": 1}
    assert as_json(servers, ns, "describe", "-w", "wf1")["total"] == 3
    table = cli(servers, ns, "describe")
    assert "knowledge: 1, user_pref: 1" in table and "hash (384 dims)" in table

    listed = as_json(servers, ns, "list", "--type", "knowledge")
    assert [m["content"] for m in listed["memories"]] == ["Deploys happen on Tuesdays"]
    assert "Deploys happen on Tuesdays" in cli(servers, ns, "list", "--tag", "ops")
    assert "Postgres" not in cli(servers, ns, "list", "--tag", "ops")

    found = as_json(servers, ns, "search", "short answers", "--limit", "1")
    assert found["results"][0]["id"] == mid
    assert "The user prefers short answers" in cli(servers, ns, "search", "short answers")

    got = as_json(servers, ns, "get", mid)
    assert got["memories"][0]["tags"] == ["style"]
    assert "prefers short answers" in cli(servers, ns, "get", mid)
    cli(servers, ns, "get", "no-such-id", code=1)

    cli(servers, ns, "add", "user_pref", "the user prefers SHORT answers")  # a repeat
    events = [e["event"] for e in as_json(servers, ns, "history", mid)["entries"]]
    assert events == ["added", "mentioned"]
    assert "mention_count" in cli(servers, ns, "history", mid)

    line = as_json(servers, ns, "timeline", mid, "-w", "wf1")
    assert line["memories"][line["anchor_index"]]["id"] == mid
    assert len(line["memories"]) == 3
    assert "▶" in cli(servers, ns, "timeline", mid)

    recalled = as_json(servers, ns, "recall", "how should I answer?", "--session", "s1")
    assert mid in [m["id"] for m in recalled["results"]]
    assert "important" in cli(servers, ns, "recall", "hello", "--session", "s2")


def test_a_bad_request_prints_the_bus_message_and_fails(servers: Servers, ns: str) -> None:
    result = CliRunner().invoke(app, ["add", "pref", "x", "--nats-url", servers.nats_url, "-n", ns])
    assert result.exit_code == 1
    assert 'Unknown memory type "pref"' in result.stderr
    assert "Known types" in result.stderr


async def _fill(servers: Servers, ns: str) -> list[str]:
    async with await MemoryBus.connect(servers.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf1", agent_id="alice", session_id="sess-1")
        ids = []
        for i in range(130):  # more than one import request (100) and one export page
            reply = await mem.add(
                "knowledge",
                f"fact number {i} about the billing system",
                tags=["billing", f"n{i % 3}"],
                ttl_s=3600 if i % 2 else None,
                metadata={"i": i},
                related_people=["Ada"] if i == 0 else (),
            )
            ids.append(reply.id)
        await mem.get(ids[:2])  # access counts travel too
        await mem.update(ids[0], importance=0.95)
        return ids


async def _exported(servers: Servers, ns: str, path: Path) -> dict[str, dict[str, Any]]:
    await acli(servers, ns, "export", "-o", str(path))
    rows = [json.loads(line) for line in (await asyncio.to_thread(path.read_text)).splitlines()]
    return {row["id"]: row for row in rows}


async def test_export_then_import_keeps_ids_times_and_ttls_and_twice_is_once(
    servers: Servers, ns: str, tmp_path: Path
) -> None:
    ids = await _fill(servers, ns)
    before = await _exported(servers, ns, tmp_path / "a.jsonl")
    assert sorted(before) == sorted(ids)
    assert before[ids[0]]["access_count"] == 1 and before[ids[0]]["importance"] == 0.95
    assert before[ids[1]]["expires_at"] is not None and before[ids[0]]["expires_at"] is None

    target = f"{ns}copy"
    for attempt, told in enumerate(("130 imported", "0 imported")):  # idempotent
        args = ["import", str(tmp_path / "a.jsonl"), "--nats-url", servers.nats_url, "-n", target]
        result = await asyncio.to_thread(invoke, args)
        assert result.exit_code == 0, (attempt, result.stderr, result.exception)
        assert f"{told} into {target} through JetStream" in result.stderr, result.stderr
        assert f"{130 - int(told.split()[0])} already there" in result.stderr
    after = await _exported(servers, target, tmp_path / "b.jsonl")
    assert after == before

    # Reads in the copy see what the original saw: search, history, people.
    async with await MemoryBus.connect(servers.nats_url, namespace=target) as bus:
        mem = bus.agent(workflow_id="wf1")
        assert (await mem.describe()).total == 130
        hits = await mem.search("fact number 7 billing", mode="text", limit=3)
        assert ids[7] in [m.id for m in hits.results]
        assert [e.event for e in (await mem.history(ids[5])).entries] == ["added"]
        assert [p.name for p in (await mem.people()).people] == ["Ada"]
        # Exact dedup works on imported memories as on added ones.
        again = await mem.add("knowledge", "fact number 3 about the billing system", tags=[])
        assert again.duplicate_of == ids[3]

    plain = f"{ns}plain"
    first = await acli(servers, plain, "import", str(tmp_path / "a.jsonl"), "--no-durable")
    second = await asyncio.to_thread(
        invoke,
        ["import", str(tmp_path / "a.jsonl"), "--no-durable"],
        {"MEMBUS_NATS_URL": servers.nats_url, "MEMBUS_NAMESPACE": plain},
    )
    assert first == "" and second.exit_code == 0
    assert "0 imported" in second.stderr and "130 already there" in second.stderr


# Stored text that would drive a terminal: set the window title, clear the screen, a C1 CSI,
# a bidi override that reverses what follows, and Rich markup.
HOSTILE = "x \x1b]0;pwned\x07\x1b[2J\x9b31m \u202egnp.exe [bold red]loud[/] [link=http://e]y[/link]"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def test_stored_text_never_drives_the_terminal(servers: Servers, ns: str) -> None:
    async with await MemoryBus.connect(servers.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf1", agent_id="evil\x1b[2J", session_id="s1")
        added = await mem.add("knowledge", HOSTILE, related_people=["Eve\x1b]0;t\x07"])
        await mem.update(added.id, content=HOSTILE + " again")
    mid = added.id
    outputs = [
        await acli(servers, ns, "list", "-w", "wf1"),
        await acli(servers, ns, "search", "pwned loud", "-w", "wf1"),
        await acli(servers, ns, "get", mid),
        await acli(servers, ns, "history", mid),
        await acli(servers, ns, "timeline", mid, "-w", "wf1"),
        await acli(servers, ns, "recall", "pwned loud", "-s", "s2", "-w", "wf1"),
        await acli(servers, ns, "describe", "-w", "wf1"),
    ]
    for args in (["list", "-w", "wf1"], ["get", mid], ["history", mid]):
        outputs.append(await acli(servers, ns, *args, "--json"))
    for text in outputs:
        assert not UNSAFE.search(text), repr(text)
    table = "\n".join(outputs[:6])
    # Shown, visibly escaped, never interpreted; markup printed as typed.
    assert "\\x1b]0;pwned\\x07" in table and "\\u202e" in table
    assert "[bold red]loud[/]" in outputs[2] and "evil\\x1b[2J" in outputs[3]
    # The JSON is the same JSON: the stored text comes back exactly.
    got = json.loads(outputs[8])
    assert got["memories"][0]["content"] == HOSTILE + " again"
    assert got["memories"][0]["related_people"] == ["Eve\x1b]0;t\x07"]


def test_import_refuses_a_broken_file_before_sending_anything(
    servers: Servers, ns: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    good = {"id": "m1", "type": "knowledge", "content": "ok", "created_at": "2026-01-01T00:00:00Z"}
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "m2", "colour": 1}) + "\n")
    result = CliRunner().invoke(
        app, ["import", str(bad), "--no-durable", "--nats-url", servers.nats_url, "-n", ns]
    )
    assert result.exit_code == 1
    assert "bad.jsonl:2" in result.stderr and "colour" in result.stderr
    assert as_json(servers, ns, "describe")["total"] == 0


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ({"id": "m40"}, "m40' is on line 41 too"),
        ({"content": "x" * 40_000}, "`content` is 40000 bytes"),
        ({"metadata": {"k": "v" * 9000}}, "`metadata` is 9008 bytes"),
        ({"content": "a\u0000b"}, "NUL"),
        ({"type": "state"}, "state without a `workspace`"),
    ],
)
def test_import_refuses_a_memory_the_service_would_refuse_before_sending_anything(
    servers: Servers, ns: str, tmp_path: Path, line: dict[str, object], words: str
) -> None:
    """The file goes in several requests (100 memories each): one the service refuses in a
    later request used to stop the import after the first 100 were written."""
    lines = [
        {
            "id": f"m{i}",
            "type": "knowledge",
            "content": f"line {i}",
            "created_at": "2026-01-01T00:00:00Z",
        }
        for i in range(150)
    ]
    lines[130].update(line)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = CliRunner().invoke(
        app, ["import", str(bad), "--no-durable", "--nats-url", servers.nats_url, "-n", ns]
    )
    assert result.exit_code == 1
    assert "bad.jsonl:131" in result.stderr and words in result.stderr
    assert "nothing was imported" in result.stderr
    assert as_json(servers, ns, "describe")["total"] == 0


def test_stats_lists_every_handler_instance(servers: Servers, ns: str) -> None:
    cli(servers, ns, "add", "knowledge", "counted by some handler")
    found = as_json(servers, ns, "stats")
    assert len(found) == 2
    assert all(inst["name"] == "memory" for inst in found)
    adds = sum(e["num_requests"] for inst in found for e in inst["endpoints"] if e["name"] == "add")
    assert adds >= 1
    table = cli(servers, ns, "stats")
    assert "2 handler instances" in table


async def _tmux(*args: str, env: dict[str, str] | None = None) -> str:
    done = await asyncio.to_thread(
        subprocess.run, ["tmux", *args], check=True, capture_output=True, text=True, env=env
    )
    return done.stdout


async def _wait_for_screen(session: str, pattern: str, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    screen = ""
    while time.monotonic() < deadline:
        screen = await _tmux("capture-pane", "-p", "-t", session)
        if re.search(pattern, screen):
            return screen
        await asyncio.sleep(0.1)
    raise AssertionError(f"{pattern!r} never appeared; the screen:\n{screen}")


async def test_tail_follows_events_live_in_a_terminal_until_ctrl_c(
    servers: Servers, ns: str
) -> None:
    session = f"membus-{uuid.uuid4().hex[:8]}"
    command = shlex.join([MEMBUS, "tail", "wf1", "--nats-url", servers.nats_url, "-n", ns])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    tail_then_wait = f"{command}; echo TAIL-EXITED-$?; sleep 60"
    await _tmux(
        "new-session", "-d", "-s", session, "-x", "200", "-y", "40", tail_then_wait, env=env
    )
    try:
        await _wait_for_screen(session, r"following mem\.\S+\.events\.wf1")
        async with await MemoryBus.connect(servers.nats_url, namespace=ns) as bus:
            mem = bus.agent(workflow_id="wf1", agent_id="alice")
            reply = await mem.add("decision", "Ship the tail command on Friday")
            await bus.agent(workflow_id="wf2").add("decision", "Not in the followed workflow")
            await mem.delete([reply.id])
            await mem.add("decision", HOSTILE)
        screen = await _wait_for_screen(session, r"pwned")
        assert re.search(rf"added\s+decision wf1 by alice {reply.id} v1\s+Ship the tail", screen)
        assert re.search(rf"deleted .*{reply.id}", screen)
        assert "Not in the followed workflow" not in screen
        # Stored text is shown escaped: the title is not set, the screen not cleared.
        assert "\\x1b]0;pwned\\x07" in screen and "[bold red]loud[/]" in screen
        title = await _tmux("display-message", "-p", "-t", session, "#{pane_title}")
        assert "pwned" not in title
        # Colours: the action is styled (Rich writes ANSI escapes in a terminal).
        coloured = await _tmux("capture-pane", "-p", "-e", "-t", session)
        assert "\x1b[32madded" in coloured or "\x1b[32m" in coloured
        await _tmux("send-keys", "-t", session, "C-c")
        await _wait_for_screen(session, r"TAIL-EXITED-130")
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            await _tmux("kill-session", "-t", session)


def test_up_starts_the_embedded_bus_and_stops_it_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [MEMBUS, "up", "--no-demo", "--handlers", "1", "--data-dir", str(tmp_path), *ANY_PORTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MEMBUS_EMBEDDER": "hash"},
        start_new_session=True,
    )
    assert proc.stdout is not None
    url = None
    try:
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            if found := re.search(r"MEMBUS_NATS_URL=(\S+)\.", line):
                url = found.group(1)
                break
            assert time.monotonic() < deadline, "membus up did not come up"
        assert url is not None
        result = CliRunner().invoke(app, ["stats", "--json", "--nats-url", url])
        assert result.exit_code == 0 and len(json.loads(result.stdout)) == 1
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
        rest = proc.communicate(timeout=60)[0]
    assert "stopped: handlers, Redis Stack, NATS" in rest


def test_a_wrong_nats_url_is_one_clear_line_not_a_traceback() -> None:
    # A port nothing listens on: bound, then closed.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"nats://127.0.0.1:{sock.getsockname()[1]}"
    commands = [["list"], ["stats"], ["tail"], ["add", "fact", "hello"]]
    procs = [
        subprocess.Popen(
            [MEMBUS, *args, "--nats-url", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    for args, proc in zip(commands, procs, strict=True):
        stdout, stderr = proc.communicate(timeout=60)
        said = " ".join(stderr.split())  # Rich wraps the line at the terminal's width
        assert proc.returncode == 1, (args, stdout, stderr)
        assert "Traceback" not in stderr and "Traceback" not in stdout, (args, stderr)
        assert f"NATS at {url} did not answer" in said, (args, stderr)
        assert "Connect call failed" in said, (args, stderr)  # the reason, once
        assert said.count("Connect call failed") == 1, (args, stderr)
