"""Every operation of the protocol from `membus`, against the real bus (two handler
processes over NATS): writes, v3 fields, workspaces and states, reconcile and apply, and
`--json` printing the reply as it came, error replies included."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Servers
from procs import alive, descendants
from typer.main import get_command
from typer.testing import CliRunner

from bus.cli import COMMANDS, app
from contracts.operations import BY_NAME, TABLE

pytestmark = pytest.mark.usefixtures("handlers")
MEMBUS = str(Path(sys.executable).with_name("membus"))
SECRET = "sk-" + "proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"


def run(
    servers: Servers, ns: str, *args: str, code: int | None = 0, stdin: str | None = None
) -> Any:
    """`membus args` in this process; `code`: the exit code it must have (None: any)."""
    result = CliRunner().invoke(
        app,
        [*args],
        input=stdin,
        env={"MEMBUS_NATS_URL": servers.nats_url, "MEMBUS_NAMESPACE": ns, "COLUMNS": "200"},
    )
    assert code is None or result.exit_code == code, (
        result.output,
        result.stderr,
        result.exception,
    )
    return result


def out(servers: Servers, ns: str, *args: str, code: int = 0) -> str:
    return str(run(servers, ns, *args, code=code).stdout)


def js(servers: Servers, ns: str, *args: str, code: int = 0, stdin: str | None = None) -> Any:
    return json.loads(run(servers, ns, *args, "--json", code=code, stdin=stdin).stdout)


def test_every_operation_has_a_command_with_json() -> None:
    assert set(COMMANDS) == {op.name for op in TABLE}
    assert len(set(COMMANDS.values())) == len(COMMANDS), "one command sends two operations"
    root = get_command(app)
    for op, path in COMMANDS.items():
        command: Any = root
        for word in path.split():
            found = getattr(command, "commands", {}).get(word)
            assert found is not None, f"{op}: no command {path!r}"
            command = found
        if op not in ("export", "import"):  # files of memories, not one reply
            flags = {opt for p in command.params for opt in getattr(p, "opts", [])}
            assert "--json" in flags, f"{path} has no --json"


# The commands that send a request's JSON body as given in FILE (or - for standard input).
BODY_FROM_FILE = ["apply", "reconcile"]


@pytest.mark.parametrize("op", BODY_FROM_FILE)
def test_a_command_reading_a_body_takes_its_operations_example(
    servers: Servers, ns: str, tmp_path: Path, op: str
) -> None:
    # From standard input and from a file, the reply as it came: what the example names
    # need not exist (not_found, exit 1), but the body is never refused.
    example = json.dumps(BY_NAME[op].example)
    path = tmp_path / "body.json"
    path.write_text(example)
    for source, stdin in (("-", example), (str(path), None)):
        result = run(servers, ns, *COMMANDS[op].split(), source, "--json", code=None, stdin=stdin)
        reply = json.loads(result.stdout)
        assert reply["success"] is True or reply["code"] == "not_found", reply
        assert result.exit_code == (0 if reply["success"] else 1)


def test_help_reads_like_a_click_cli() -> None:
    shown = CliRunner().invoke(app, ["add", "--help"], env={"COLUMNS": "120"}).stdout
    assert "Usage: membus add [OPTIONS] TYPE CONTENT" in shown
    assert "<bool>" not in shown and "{type}" not in shown and "<str>" not in shown
    for command in (["webhook", "--help"], ["state", "save", "--help"], ["--help"]):
        result = CliRunner().invoke(app, command, env={"COLUMNS": "120"})
        assert result.exit_code == 0 and "<bool>" not in result.stdout


def test_add_with_v3_fields_then_update_then_delete(servers: Servers, ns: str) -> None:
    start = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    end = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    added = js(
        servers,
        ns,
        "add",
        "fact",
        "The API lives at api.example.com",
        "--valid-from",
        start,
        "--valid-until",
        end,
        "--idle-ttl",
        "3600",
        "--title",
        "API host",
        "--tag",
        "infra",
    )
    assert added["success"] is True
    mid = added["id"]
    got = js(servers, ns, "get", mid)["memories"][0]
    assert got["idle_ttl_s"] == 3600 and got["title"] == "API host"
    assert js(servers, ns, "describe")["idle_count"] == 1
    assert re.search(r"idle-bounded\s+│ 1 ", out(servers, ns, "describe"))
    assert got["valid_from"].startswith(start[:16]) and got["valid_until"].startswith(end[:16])

    updated = js(
        servers,
        ns,
        "update",
        mid,
        "--content",
        "The API moved to api2.example.com",
        "--importance",
        "0.9",
        "--valid-until",
        "open",
        "--tag",
        "infra",
        "--tag",
        "moved",
    )
    assert updated["id"] == mid and updated["importance"] == 0.9
    got = js(servers, ns, "get", mid)["memories"][0]
    assert got["content"] == "The API moved to api2.example.com"
    assert got["tags"] == ["infra", "moved"] and got.get("valid_until") is None
    assert "updated" in out(servers, ns, "update", mid, "--importance", "0.5")

    table = run(servers, ns, "delete", mid, "01NOSUCHMEMORYID000000000")
    assert "deleted 1" in table.stdout and "01NOSUCHMEMORYID000000000" in table.stderr
    assert js(servers, ns, "get", mid, code=1)["missing"] == [mid]


def test_delete_erase_leaves_a_tombstone_history(servers: Servers, ns: str) -> None:
    mid = js(servers, ns, "add", "fact", "The vault code is 4711")["id"]

    shown = out(servers, ns, "delete", mid, "--erase")
    history = js(servers, ns, "history", mid)

    assert "deleted 1" in shown and "erased 1" in shown
    assert [e["event"] for e in history["entries"]] == ["added", "erased"]
    assert "4711" not in json.dumps(history)


def test_versions_and_a_stale_expected_version_is_a_conflict_naming_the_current_one(
    servers: Servers, ns: str
) -> None:
    mid = js(servers, ns, "add", "decision", "Ship on Friday")["id"]
    assert re.search(
        rf"updated {mid} \(version 2,", out(servers, ns, "update", mid, "--importance", "0.7")
    )

    stale = run(
        servers, ns, "update", mid, "--content", "Ship on Sunday", "--expected-version", "1", code=1
    )
    assert "(conflict)" in stale.stderr
    assert f"current version: 2 of {mid}" in stale.stderr
    assert "--expected-version 2" in stale.stderr
    reply = js(servers, ns, "update", mid, "--content", "x", "--expected-version", "1", code=1)
    assert (reply["code"], reply["id"], reply["current_version"]) == ("conflict", mid, 2)
    assert js(servers, ns, "get", mid)["memories"][0]["content"] == "Ship on Friday"

    done = js(servers, ns, "update", mid, "--content", "Ship on Monday", "--expected-version", "2")
    assert done["version"] == 3
    assert re.search(r"version\s+│ 3", out(servers, ns, "get", mid))
    assert re.search(rf"{mid}\s+│\s+3 │", out(servers, ns, "list"))
    run(servers, ns, "update", mid, "--importance", "0.1", "--expected-version", "-1", code=2)


def test_keyed_add_replaces_in_place_and_get_reads_by_key(servers: Servers, ns: str) -> None:
    first = out(servers, ns, "add", "context", "Plan: outline", "--key", "plan")
    mid = re.search(r"^added (\S+) \(key plan, version 1,", first, re.M).group(1)  # type: ignore[union-attr]
    second = out(servers, ns, "add", "context", "Plan: chapter one", "--key", "plan")
    assert re.search(rf"^replaced {mid} \(key plan, version 2,", second, re.M)
    replaced = js(servers, ns, "add", "context", "Plan: chapter two", "--key", "plan")
    assert (replaced["id"], replaced["version"], replaced["replaced"]) == (mid, 3, True)

    shown = out(servers, ns, "get", "--key", "plan")
    assert "Plan: chapter two" in shown
    assert re.search(r"key\s+│ plan", shown) and re.search(r"version\s+│ 3", shown)
    listed = out(servers, ns, "list")
    assert re.search(rf"{mid}\s+│\s+3 │ plan", listed)
    both = js(servers, ns, "get", mid, "--key", "plan", "--key", "nothing", code=1)
    assert both["missing_keys"] == ["nothing"] and {m["id"] for m in both["memories"]} == {mid}
    assert (
        "no memory holds key: nothing" in run(servers, ns, "get", "--key", "nothing", code=1).stderr
    )
    assert "--key" in run(servers, ns, "get", code=2).output

    # Create-if-absent: the key is taken, so nothing is written and the holder is named.
    taken = run(
        servers,
        ns,
        "add",
        "context",
        "Plan: redo",
        "--key",
        "plan",
        "--expected-version",
        "0",
        code=1,
    )
    assert "(conflict)" in taken.stderr and f"current version: 3 of {mid}" in taken.stderr
    free = run(
        servers,
        ns,
        "add",
        "context",
        "Budget",
        "--key",
        "budget",
        "--expected-version",
        "4",
        code=1,
    )
    assert "current version: 0 (no current memory holds the key;" in free.stderr
    assert js(servers, ns, "get", "--key", "budget", code=1)["missing_keys"] == ["budget"]
    made = js(servers, ns, "add", "context", "Budget", "--key", "budget", "--expected-version", "0")
    assert made["version"] == 1 and made["replaced"] is False


def test_an_error_reply_exits_1_with_its_code_and_json_prints_it_as_it_came(
    servers: Servers, ns: str
) -> None:
    result = run(servers, ns, "update", "01NOSUCHMEMORYID000000000", "--content", "x", code=1)
    assert "(not_found)" in result.stderr
    reply = js(servers, ns, "update", "01NOSUCHMEMORYID000000000", "--content", "x", code=1)
    assert reply["success"] is False and reply["code"] == "not_found" and reply["error"]
    bad = js(
        servers,
        ns,
        "compact",
        "fact",
        "--keep",
        "1",
        "--by",
        "recency",
        "--workspace",
        "Nowhere",
        code=1,
    )
    assert bad["code"] == "not_found" and "Nowhere" in bad["error"]
    assert run(servers, ns, "compact", "fact", "--keep", "1", "--by", "size", code=2)


def test_as_of_and_include_superseded_on_every_read(servers: Servers, ns: str) -> None:
    old = js(servers, ns, "add", "decision", "We use MySQL for billing", "-w", "wf1")["id"]
    time.sleep(0.05)
    between = datetime.now(UTC).isoformat()
    time.sleep(0.05)
    new = js(
        servers,
        ns,
        "add",
        "decision",
        "We use Postgres for billing",
        "-w",
        "wf1",
        "--supersedes",
        old,
    )
    assert new["superseded"] == [old]

    def ids(*args: str) -> list[str]:
        reply = js(servers, ns, *args, "-w", "wf1")
        return [m["id"] for m in reply.get("memories", reply.get("results", []))]

    assert ids("list") == [new["id"]]
    assert set(ids("list", "--include-superseded")) == {old, new["id"]}
    assert ids("list", "--as-of", between) == [old]
    assert old in ids("search", "billing database", "--as-of", between)
    assert old not in ids("search", "billing database")
    assert old in ids("search", "billing database", "--include-superseded")
    assert old in ids("timeline", new["id"], "--include-superseded")
    assert old not in ids("timeline", new["id"])
    recalled = js(
        servers,
        ns,
        "recall",
        "which database for billing?",
        "-s",
        "s1",
        "-w",
        "wf1",
        "--as-of",
        between,
    )
    assert old in [m["id"] for m in recalled["results"]]
    shown = out(servers, ns, "list", "-w", "wf1", "--include-superseded")
    assert "[superseded] We use MySQL" in shown, shown
    assert run(servers, ns, "list", "--as-of", "yesterday", code=2)


def test_add_says_when_a_type_is_general_and_what_was_redacted(servers: Servers, ns: str) -> None:
    said = out(servers, ns, "add", "knowledge", "Deploys happen on Tuesdays", "-w", "wf_t")
    assert "stored as general: knowledge is general-scoped" in said
    kept = out(servers, ns, "add", "knowledge", "Only here", "-w", "wf_t", "--scope", "workflow")
    assert "stored as general" not in kept
    redacted = out(servers, ns, "add", "fact", f"The key is {SECRET}")
    assert "redacted before storing: api_key" in redacted
    assert SECRET not in json.dumps(js(servers, ns, "list"))


def test_clear_and_compact(servers: Servers, ns: str) -> None:
    for i in range(4):
        js(servers, ns, "add", "todo", f"task {i}", "-w", "wf1", "--importance", str(i / 10))
    assert "deleted 2" in out(
        servers, ns, "compact", "todo", "--keep", "2", "--by", "importance", "-w", "wf1"
    )
    left = js(servers, ns, "list", "-w", "wf1", "--type", "todo")["memories"]
    assert sorted(m["content"] for m in left) == ["task 2", "task 3"]
    assert js(servers, ns, "clear", "todo", "-w", "wf1")["deleted"] == 2
    assert js(servers, ns, "list", "-w", "wf1", "--type", "todo")["total"] == 0
    assert run(servers, ns, "clear", "todo", code=2)  # neither a workflow nor --general


def test_workspaces_and_states(servers: Servers, ns: str) -> None:
    created = js(
        servers,
        ns,
        "workspace",
        "create",
        "Shop",
        "--description",
        "Checkout",
        "--root-folder",
        "shop/",
        "--purpose",
        "Rebuild the checkout",
        "-w",
        "wf9",
    )
    assert created["success"] is True
    js(
        servers,
        ns,
        "workspace",
        "create",
        "Shop",
        "--description",
        "again",
        "--root-folder",
        "x/",
        "--purpose",
        "x",
        code=1,
    )
    assert [w["name"] for w in js(servers, ns, "workspace", "list")["data"]] == ["Shop"]
    assert js(servers, ns, "workspace", "show", "Shop")["data"]["workflows"] == ["wf9"]
    js(servers, ns, "workspace", "update", "Shop", "--purpose", "Rebuild payments")
    assert "Rebuild payments" in out(servers, ns, "workspace", "show", "Shop")

    js(
        servers,
        ns,
        "state",
        "save",
        "Shop",
        "Monday",
        "--task",
        "Retry failed payments",
        "--context",
        "Gateway behind an interface",
        "--file",
        "shop/pay.py",
        "--file",
        "shop/retry.py",
        "--next-step",
        "Add an idempotency key",
        "-a",
        "coder",
    )
    state = js(servers, ns, "state", "load", "Shop", "Monday")["data"]
    assert state["active_files"] == ["shop/pay.py", "shop/retry.py"]
    assert state["next_steps"] == ["Add an idempotency key"] and state["agent_id"] == "coder"
    assert "Retry failed payments" in out(servers, ns, "state", "load", "Shop", "Monday")
    assert (
        js(servers, ns, "state", "save", "Shop", "Monday", "--task", "t", "--context", "c", code=1)[
            "code"
        ]
        == "conflict"
    )
    js(servers, ns, "state", "archive", "Shop", "Monday")
    assert js(servers, ns, "state", "list", "Shop")["data"] == []
    assert len(js(servers, ns, "state", "list", "Shop", "--archived")["data"]) == 1

    inside = js(servers, ns, "add", "fact", "In the shop", "--workspace", "Shop")["id"]
    js(servers, ns, "add", "fact", "Outside it")
    around = js(servers, ns, "timeline", inside, "--workspace", "Shop", "-t", "fact")
    assert [m["content"] for m in around["memories"]] == ["In the shop"]
    assert [
        m["content"]
        for m in js(servers, ns, "list", "--workspace", "Shop", "-t", "fact")["memories"]
    ] == ["In the shop"]
    js(servers, ns, "workspace", "archive", "Shop")
    assert js(servers, ns, "workspace", "list")["data"] == []
    js(servers, ns, "workspace", "update", "Shop", "--restore")
    assert len(js(servers, ns, "workspace", "list")["data"]) == 1


def test_reconcile_then_apply_from_a_file_and_standard_input(
    servers: Servers, ns: str, tmp_path: Path
) -> None:
    old = js(
        servers, ns, "add", "fact", "The office is in Lyon", "-w", "wf1", "--scope", "workflow"
    )["id"]
    suggested = js(servers, ns, "reconcile", "--fact", "The office is in Lyon", "-w", "wf1")
    assert suggested["results"][0]["action"] == "noop"
    assert suggested["results"][0]["target"] == old
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"facts": [{"content": "A brand new fact about llamas"}]}))
    assert js(servers, ns, "reconcile", str(facts), "-w", "wf1")["results"][0]["action"] == "add"

    actions = {
        "actions": [
            {"action": "supersede", "id": old, "type": "fact", "content": "The office is in Paris"},
            {"action": "add", "type": "fact", "content": "Llamas visit on Fridays"},
        ]
    }
    applied = js(servers, ns, "apply", "-", "-w", "wf1", stdin=json.dumps(actions))
    assert [a["action"] for a in applied["results"]] == ["supersede", "add"]
    listed = js(servers, ns, "list", "-w", "wf1")["memories"]
    assert sorted(m["content"] for m in listed) == [
        "Llamas visit on Fridays",
        "The office is in Paris",
    ]
    # All or none: a refused action leaves nothing written.
    refused = {
        "actions": [
            {"action": "add", "type": "fact", "content": "Never stored"},
            {"action": "delete", "id": "01NOSUCHMEMORYID000000000"},
        ]
    }
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(refused))
    reply = js(servers, ns, "apply", str(path), "-w", "wf1", code=1)
    assert reply["success"] is False and "1" in reply["error"]
    assert "Never stored" not in json.dumps(js(servers, ns, "list", "-w", "wf1"))
    path.write_text("[1, 2")
    assert "not JSON" in run(servers, ns, "apply", str(path), code=2).stderr


def test_capture_and_people(servers: Servers, ns: str) -> None:
    trace = js(
        servers,
        ns,
        "capture",
        "read_file",
        "--args",
        '{"path": "a.py"}',
        "--output",
        "print('hi')",
        "--duration-ms",
        "12",
        "-w",
        "wf1",
        "-a",
        "coder",
    )
    got = js(servers, ns, "get", trace["id"])["memories"][0]
    assert got["type"] == "trace" and "read_file" in got["content"]
    assert run(servers, ns, "capture", "t", "--args", "[1]", code=2)
    body = {
        "actions": [
            {
                "action": "add",
                "type": "fact",
                "content": "Ada reviewed the PR",
                "related_people": ["Ada Lovelace"],
            }
        ]
    }
    js(servers, ns, "apply", "-", stdin=json.dumps(body))
    people = js(servers, ns, "people", "ada")["people"]
    assert [p["name"] for p in people] == ["Ada Lovelace"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_membus_up_stops_its_whole_stack_on_a_signal_even_with_sigint_ignored(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # As a script's background job starts it: SIGINT ignored, inherited.
    proc = subprocess.Popen(
        [
            MEMBUS,
            "up",
            "--no-demo",
            "--handlers",
            "1",
            "--data-dir",
            str(tmp_path),
            "--nats-port",
            "0",
            "--redis-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MEMBUS_EMBEDDER": "hash"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if "The bus is up" in line:
                break
        stack = descendants(proc.pid)
        assert len(stack) >= 4, stack  # deploy, nats-server, valkey-server, a handler
        proc.send_signal(sig)
        rest = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped: handlers, Redis Stack, NATS" in rest
    deadline = time.monotonic() + 10
    while any(alive(p) for p in stack) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in stack if alive(p)]
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes() for p in left]
    assert re.search(r"\S", rest)


def readme_walkthrough() -> str:
    """The README's `membus` walk-through, the bash block after its heading line."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    after = text[text.index("A walk through, with the bus of `make up` running") :]
    return after.split("```bash\n", 1)[1].split("\n```", 1)[0]


def test_the_readme_walkthrough_runs_as_written(servers: Servers, ns: str, tmp_path: Path) -> None:
    script = readme_walkthrough()
    lines = script.splitlines()
    assert lines[0].startswith("export MEMBUS_NATS_URL=")  # replaced by this bus's
    body = "\n".join(lines[1:]).replace("acme-restored", f"{ns}-restored")
    env = {
        **os.environ,
        "PATH": f"{Path(MEMBUS).parent}{os.pathsep}{os.environ['PATH']}",
        "MEMBUS_NATS_URL": servers.nats_url,
        "MEMBUS_NAMESPACE": ns,
        "COLUMNS": "200",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", body],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = done.stdout
    assert "[superseded] MySQL for billing" in shown
    assert "2 actions applied" in shown
    assert "Retry failed payments" in shown and "Shop" in shown
    # Searched as of an instant before the supersede: the old decision, not the new one.
    as_of = shown.split("as of 2026-02-01", 1)[1].split("memories 1-", 1)[0]
    assert "MySQL for billing" in as_of and "Postgres for billing" not in as_of
    assert (tmp_path / "acme.jsonl").read_text().count("\n") >= 5


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_tail_stops_on_a_signal_when_started_with_sigint_ignored(
    servers: Servers, ns: str, sig: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [MEMBUS, "tail", "--nats-url", servers.nats_url, "-n", ns],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stderr is not None
    with proc:
        try:
            assert "following" in proc.stderr.readline()
            proc.send_signal(sig)
            assert proc.wait(timeout=15) == 130
        finally:
            if proc.poll() is None:
                proc.kill()


def test_hostile_bodies_are_refused_before_anything_is_sent(
    servers: Servers, ns: str, tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert "nests too deep" in run(servers, ns, "apply", str(deep), code=2).stderr
    assert (
        "nests too deep"
        in run(
            servers, ns, "capture", "t", "--args", '{"a":' * 5000 + "1" + "}" * 5000, code=2
        ).stderr
    )
    big = tmp_path / "big.json"
    big.write_text('{"actions": [' + " " * 300_000 + "]}")
    assert (
        "over the 256 KiB request limit" in run(servers, ns, "reconcile", str(big), code=2).stderr
    )
    assert "cannot read" in run(servers, ns, "apply", str(tmp_path / "missing.json"), code=2).stderr
    # Nested deeper than the bus takes, yet decodable here: the bus's own error, exit 1.
    nested = {
        "actions": [
            {
                "action": "add",
                "type": "fact",
                "content": "x",
                "metadata": json.loads('{"a":' * 40 + "1" + "}" * 40),
            }
        ]
    }
    reply = js(servers, ns, "apply", "-", stdin=json.dumps(nested), code=1)
    assert reply["code"] == "invalid_request" and "nests deeper" in reply["error"]
    assert js(servers, ns, "list")["total"] == 0
