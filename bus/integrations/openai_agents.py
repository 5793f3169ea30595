"""The OpenAI Agents SDK's `Session` on the bus: `MemoryBusSession(session_id, bus, **options)`.

Pass it as `Runner.run(agent, input, session=MemoryBusSession("chat-42", bus))`: the
conversation history is kept as memories, so any agent of the namespace (in any language)
can read the same conversation, search it, or follow it as events, and several runners
can share one session.

How a conversation maps onto memories:

- **One item is one memory** (type `event` by default: permanent, workflow-scoped) in the
  session's workflow (`workflow_id=`; without one, general memories), tagged
  `openai-agents` and `oa.session:<digest of the session id>` (a tag cannot hold every
  session id; the id itself is in the metadata, and checked on every read). When the
  session id is a bus session token (`[A-Za-z0-9_.:-]{1,128}`), the memories also record
  it as their `session_id`.
- **The item is kept exactly** in `metadata`: `{"kind": "openai_agents.item", "session",
  "seq", "writer", "item"}`; `content` is its text for search (`user: ...`, `assistant:
  ...`, `function_call name(args)`, ...). An item whose JSON exceeds the bus's metadata
  limits (8 KiB, 8 levels; long tool outputs do) is written in pieces over several
  memories in one atomic `apply`: about 150 KiB of JSON at most (200 KiB of text that
  needs few JSON escapes).
- **Order** is `seq`, given by the writer, never the handlers' clocks or ids (the bus
  keeps milliseconds, and two handlers' ids within one are in no order): a microsecond
  timestamp, raised past every `seq` this object has written or read, plus the item's
  place in its `add_items` call. So items of one call, and calls of one object, keep their
  order through any handler; a writer that reads before it writes (the `Runner` does)
  comes after what it read, whatever the clocks; independent writers of one session are
  ordered by their clocks (and `writer` breaks a tie).
- `add_items` writes all its items in as few atomic `apply` requests as fit (50 actions
  each); `get_items` reads the session's memories (a `list` by its tag, up to 10,200) and
  orders them; `pop_item` deletes the memories of the latest item (the next one down when
  another writer popped it first); `clear_session` deletes every memory of the session.

The bus has no per-session counter or server-assigned sequence, and `list` pages by time:
that is why the order is the writer's, and why each read lists the whole session.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

import msgspec
from agents import SessionSettings, TResponseInputItem

from bus.client import MemoryBus
from bus.errors import Conflict
from bus.integrations._documents import (
    Incomplete,
    chunked,
    content_text,
    digest,
    full_pages,
    pack,
    plain_json,
    unpack,
    write_groups,
)
from contracts import limits
from contracts.messages import SESSION_ID_PATTERN, ApplyAction, ApplyAdd

if TYPE_CHECKING:
    from agents.memory import Session

__all__ = ["MemoryBusSession"]

MARKER = "openai-agents"
KIND = "openai_agents.item"
_SESSION_TAG = "oa.session:"
_SESSION_TOKEN = re.compile(SESSION_ID_PATTERN)
# A pop that found every item it read popped by other writers reads again, this many times.
_POP_ATTEMPTS = 5
_encoder = msgspec.json.Encoder()


def session_tag(session_id: str) -> str:
    return f"{_SESSION_TAG}{digest(session_id)}"


class _Stored(NamedTuple):
    """One item of the session as read: its order, and the memories that keep it."""

    seq: int
    writer: str
    item: dict[str, Any]
    ids: list[str]


def render_item(item: Mapping[str, Any]) -> str:
    """The text of an item that is embedded and searched."""
    kind, role = item.get("type"), item.get("role")
    if role is not None and kind in (None, "message"):
        return f"{role}: {_text(item.get('content'))}"
    if kind == "function_call":
        return f"function_call {item.get('name')}({item.get('arguments', '')})"
    if kind == "function_call_output":
        return f"function_call_output: {_text(item.get('output'))}"
    if kind == "reasoning":
        return f"reasoning: {_text(item.get('summary'))}"
    rest = {k: v for k, v in item.items() if k != "type"}
    return f"{kind or 'item'}: {_encoder.encode(rest).decode()}"


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return "" if content is None else _encoder.encode(content).decode()


class MemoryBusSession:
    """An Agents SDK session whose items are memories of the bus (see the module docstring).

    Options: `workflow_id` (None: general memories), `agent_id` (recorded on writes),
    `type` (the memory type of items, `event`), `ttl_s` (None: the type's; 0: permanent),
    `session_settings` (the SDK's; its `limit` is `get_items`'s default)."""

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        bus: MemoryBus,
        *,
        workflow_id: str | None = None,
        agent_id: str = "openai-agents",
        type: str = "event",
        ttl_s: int | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        if isinstance(session_settings, Mapping):
            session_settings = SessionSettings(**session_settings)
        self.session_settings = session_settings or SessionSettings()
        token = session_id if _SESSION_TOKEN.match(session_id) else None
        self.memory = bus.agent(workflow_id=workflow_id, agent_id=agent_id, session_id=token)
        self.type = type
        self.ttl_s = ttl_s
        self.tag = session_tag(session_id)
        self._scope: Literal["workflow", "general"] = "workflow" if workflow_id else "general"
        # Breaks a tie between two writers' equal `seq`s.
        self._writer = uuid.uuid4().hex[:16]
        self._last_seq = 0

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with `limit` (or the settings' limit), the
        latest `limit` of them (0: none; negative: all)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = [cast(TResponseInputItem, s.item) for s in await self._read()]
        if limit is None or limit < 0:
            return items
        return items[-limit:] if limit else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append `items`, in their order, after every item this session has seen."""
        if not items:
            return
        documents = [self._document(item) for item in items]  # all checked before writing
        base = max(time.time_ns() // 1000, self._last_seq + 1)
        self._last_seq = base + len(items) - 1
        groups = [self._actions(base + n, doc) for n, doc in enumerate(documents)]
        await write_groups(self.memory, groups)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (None when the session is empty)."""
        for _ in range(_POP_ATTEMPTS):
            stored = await self._read()
            if not stored:
                return None
            # An item found gone was popped by another writer meanwhile: the next one down
            # is then the latest left. Walking down (rather than reading again) means every
            # attempt that fails is an item someone else took, so poppers never livelock.
            for latest in reversed(stored):
                reply = await self.memory.delete(latest.ids)
                if reply.deleted:
                    return cast(TResponseInputItem, latest.item)
        raise Conflict(
            f"pop_item of session {self.session_id!r} lost {_POP_ATTEMPTS} races with other"
            " writers popping the same items; retry."
        )

    async def clear_session(self) -> None:
        """Delete every memory of the session."""
        while True:
            page = await self.memory.list(
                mode="compact", tags=[self.tag], scope=self._scope, limit=limits.MAX_LIST_LIMIT
            )
            ids = [m.id for m in page.memories]
            deleted = 0
            for some in chunked(ids, limits.MAX_IDS):
                deleted += (await self.memory.delete(list(some))).deleted
            if not deleted:  # nothing left, or nothing this caller may delete
                return

    # ------------------------------------------------------------------ storage

    @staticmethod
    def _document(item: TResponseInputItem) -> dict[str, Any]:
        if not isinstance(item, Mapping):
            raise TypeError(f"A session item is a mapping (a JSON object); got {type(item)}")
        document = plain_json(dict(item))
        assert isinstance(document, dict)  # a mapping's JSON is an object
        return document

    def _actions(self, seq: int, document: dict[str, Any]) -> list[ApplyAction]:
        header = {"kind": KIND, "session": self.session_id, "seq": seq, "writer": self._writer}
        label = str(document.get("role") or document.get("type") or "item")
        text = content_text(render_item(document), fallback=label)
        return [
            ApplyAdd(
                type=self.type,
                content=text if part == 0 else f"{label} (part {part + 1})",
                tags=[MARKER, self.tag],
                metadata=metadata,
                dedup="none",
                scope=self._scope,
                ttl_s=self.ttl_s,
            )
            for part, metadata in enumerate(pack(header, "item", document))
        ]

    async def _read(self) -> list[_Stored]:
        """Every complete item of the session, in order."""
        groups: dict[tuple[int, str], dict[str, Mapping[str, Any]]] = {}
        async for page in full_pages(self.memory, tags=[self.tag], scope=self._scope):
            for memory in page:
                meta = memory.metadata
                seq, writer = meta.get("seq"), meta.get("writer")
                if (
                    meta.get("kind") != KIND
                    or meta.get("session") != self.session_id
                    or not isinstance(seq, int)
                    or not isinstance(writer, str)
                ):
                    continue
                groups.setdefault((seq, writer), {})[memory.id] = meta
        stored = []
        for (seq, writer), parts in sorted(groups.items()):
            try:
                item = unpack("item", list(parts.values()))
            except Incomplete:
                continue  # a part went meanwhile (a concurrent pop or clear)
            if isinstance(item, dict):
                stored.append(_Stored(seq, writer, item, list(parts)))
        if stored:
            self._last_seq = max(self._last_seq, stored[-1].seq)
        return stored


if TYPE_CHECKING:

    def _is_a_session(session: MemoryBusSession) -> Session:
        return session  # mypy checks here that the class satisfies the SDK's protocol
