"""An extractor agent: facts from a conversation, by any OpenAI-compatible chat model,
reconciled with what the bus holds, then written.

The service never calls a model (PROTOCOL.md v3): this agent does, outside it, as one more
agent on the bus. For each fact the model proposes, `reconcile` says whether it is known
(`noop`: nothing to write), says something else than a stored memory (`supersede`: the
fact is added superseding it), or is new (`add`); the writes go in one `apply`, all or
none.

    MEMBUS_NATS_URL=nats://127.0.0.1:4222 \\
    EXTRACTOR_BASE_URL=http://127.0.0.1:11434/v1 EXTRACTOR_MODEL=llama3.1 \\
    python examples/extractor.py --namespace demo --workflow wf_chat < conversation.txt

Any server with the OpenAI chat completions API works (OpenAI, vLLM, Ollama, llama.cpp);
`OPENAI_API_KEY` is sent as the bearer token when set. No model is reachable from the
project's test machine: tests/integration/test_extractor.py runs this against a small
stand-in of the API.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from dataclasses import dataclass
from typing import Any

from bus import AgentMemory, MemoryBus
from contracts import ReconcileFact

PROMPT = """You extract durable facts from a conversation, for a shared memory of agents.
Return JSON only: {"facts": [{"content": "...", "type": "..."}]}.
- content: one short, self-contained statement (name the subject; no "he", "it").
- type: one of user_pref, fact, decision, knowledge, goal, todo, event.
- Only what will still matter later; nothing about this extraction itself.
- Keep secrets (keys, passwords, tokens) out."""


@dataclass(frozen=True)
class Chat:
    """An OpenAI-compatible chat completions endpoint."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0

    @classmethod
    def from_env(cls) -> Chat:
        return cls(
            base_url=os.environ.get("EXTRACTOR_BASE_URL", "https://api.openai.com/v1"),
            model=os.environ.get("EXTRACTOR_MODEL", "gpt-4o-mini"),
            api_key=os.environ.get("OPENAI_API_KEY") or None,
        )

    def _complete(self, conversation: str) -> str:
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": conversation},
            ],
            "response_format": {"type": "json_object"},
            "temperature": 0,
        }
        request = urllib.request.Request(
            self.base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}),
            },
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
            data = json.load(reply)
        return str(data["choices"][0]["message"]["content"])

    async def facts(self, conversation: str) -> list[ReconcileFact]:
        """The facts the model finds (those it gives in another shape are skipped)."""
        text = await asyncio.to_thread(self._complete, conversation)
        try:
            found = json.loads(text).get("facts", [])
        except (json.JSONDecodeError, AttributeError):
            return []
        facts = []
        for item in found if isinstance(found, list) else []:
            if isinstance(item, dict) and isinstance(item.get("content"), str) and item["content"]:
                kind = item.get("type")
                facts.append(
                    ReconcileFact(
                        content=item["content"], type=kind if isinstance(kind, str) else None
                    )
                )
        return facts[:50]  # reconcile takes up to 50 at a time


async def extract(mem: AgentMemory, chat: Chat, conversation: str) -> list[dict[str, Any]]:
    """Extract, reconcile, then write every new and changed fact in one atomic `apply`;
    what was done with each fact."""
    facts = await chat.facts(conversation)
    if not facts:
        return []
    plan = await mem.reconcile(facts)
    done: list[dict[str, Any]] = []
    actions: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []  # the entries of `done` that `actions` write
    targets: set[str] = set()
    for fact, result in zip(facts, plan.results, strict=True):
        entry: dict[str, Any] = {"content": fact.content, "action": result.action}
        done.append(entry)
        if result.action == "noop":
            entry["id"] = result.target
            continue
        action: dict[str, Any] = {
            "action": "add",
            "type": fact.type or "fact",
            "content": fact.content,
            "source": "auto",
        }
        # One action per memory: a second fact that would supersede the same memory is
        # added beside the first.
        if result.action == "supersede" and result.target and result.target not in targets:
            action.update(action="supersede", id=result.target)
            targets.add(result.target)
        entry["supersedes"] = [action["id"]] if "id" in action else []
        actions.append(action)
        writes.append(entry)
    if actions:
        applied = await mem.apply(actions)
        for entry, result in zip(writes, applied.results, strict=True):
            entry["id"] = result.id
    return done


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--workflow", default=None, help="the workflow the facts belong to")
    args = parser.parse_args(argv)
    conversation = sys.stdin.read()
    url = os.environ.get("MEMBUS_NATS_URL", "nats://127.0.0.1:4222")
    async with await MemoryBus.connect(url, namespace=args.namespace) as bus:
        mem = bus.agent(workflow_id=args.workflow, agent_id="extractor")
        for entry in await extract(mem, Chat.from_env(), conversation):
            print(json.dumps(entry))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
