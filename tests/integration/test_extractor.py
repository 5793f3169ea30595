"""examples/extractor.py against a small stand-in of the OpenAI chat completions API (no
model is reachable here): what it sends the model, and what it writes for each action
`reconcile` suggests."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from embedding_server import send_json

from bus import AgentMemory

_PATH = Path(__file__).resolve().parents[2] / "examples" / "extractor.py"
_spec = importlib.util.spec_from_file_location("extractor", _PATH)
assert _spec is not None and _spec.loader is not None
extractor = importlib.util.module_from_spec(_spec)
sys.modules["extractor"] = extractor  # its dataclass looks its module up there
_spec.loader.exec_module(extractor)


MONDAY = "The team deploys the billing service on Monday mornings after review"


class StandIn:
    """Answers every chat completion with `reply` as the model's message; keeps what it got."""

    def __init__(self) -> None:
        self.reply = '{"facts": []}'
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def chat_api() -> Iterator[tuple[StandIn, str]]:
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, **body})
            state.headers.append(dict(self.headers))
            message = {"role": "assistant", "content": state.reply}
            send_json(self, {"choices": [{"index": 0, "message": message}]})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


async def test_the_extractor_adds_new_facts_supersedes_changed_ones_and_skips_known_ones(
    wf123: AgentMemory, chat_api: tuple[StandIn, str]
) -> None:
    state, url = chat_api
    known = await wf123.add("user_pref", "The user prefers dark mode in every editor")
    old = await wf123.add(
        "decision", "The team deploys the billing service on Friday afternoons after review"
    )
    state.reply = json.dumps(
        {
            "facts": [
                {"content": "The user prefers dark mode in every editor", "type": "user_pref"},
                {"content": MONDAY, "type": "decision"},
                {"content": "Invoices are archived for seven years", "type": "fact"},
                {"no content": "a malformed item is skipped"},
            ]
        }
    )
    chat = extractor.Chat(base_url=url, model="stand-in-1", api_key="test-key")

    done = await extractor.extract(wf123, chat, "user: we moved deploys to Monday mornings")

    (sent,) = state.requests
    assert sent["path"] == "/v1/chat/completions" and sent["model"] == "stand-in-1"
    assert sent["messages"][-1]["content"] == "user: we moved deploys to Monday mornings"
    assert state.headers[0]["Authorization"] == "Bearer test-key"
    assert [d["action"] for d in done] == ["noop", "supersede", "add"]
    assert done[0]["id"] == known.id
    assert done[1]["supersedes"] == [old.id]
    listed = {m.content: m for m in (await wf123.list(limit=20)).memories}
    assert set(listed) == {
        "The user prefers dark mode in every editor",
        MONDAY,
        "Invoices are archived for seven years",
    }
    assert listed["Invoices are archived for seven years"].source == "auto"
    # Run again on the same answer: everything is known now, nothing is written.
    again = await extractor.extract(wf123, chat, "user: we moved deploys to Monday mornings")
    assert [d["action"] for d in again] == ["noop", "noop", "noop"]
    assert len((await wf123.list(limit=20)).memories) == 3


async def test_an_answer_that_is_not_json_writes_nothing(
    wf123: AgentMemory, chat_api: tuple[StandIn, str]
) -> None:
    state, url = chat_api
    state.reply = "Sure! Here are the facts: the user likes tea."
    chat = extractor.Chat(base_url=url, model="stand-in-1")
    assert await extractor.extract(wf123, chat, "user: I like tea") == []
    assert "Authorization" not in state.headers[0]
    assert (await wf123.list()).memories == []
