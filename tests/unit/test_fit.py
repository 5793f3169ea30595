"""Replies that fit the server's max payload: trailing items go, `truncated` says so."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from contracts.messages import ListReply, Memory, RecalledMemory, RecallReply
from handlers.fit import fitted

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def memory(i: int, cls: type = Memory, **extra: object) -> Memory:
    return cls(
        id=f"id{i}", type="fact", content=f"{i} " + "x" * 1000, created_at=NOW,
        updated_at=NOW, **extra,
    )  # fmt: skip


def test_a_reply_that_fits_is_unchanged() -> None:
    reply = ListReply(count=2, total=2, memories=[memory(0), memory(1)])
    assert fitted(reply, 1 << 20) == msgspec.json.encode(reply)


def test_a_list_too_large_keeps_its_first_items_and_counts_them() -> None:
    reply = ListReply(count=10, total=12, memories=[memory(i) for i in range(10)])

    out = fitted(reply, 5000)
    back = msgspec.json.decode(out, type=ListReply)

    n = len(back.memories)
    one_more = msgspec.structs.replace(back, memories=reply.memories[: n + 1], count=n + 1)
    assert len(out) <= 5000 < len(msgspec.json.encode(one_more))  # as many as fit
    assert back.truncated is True
    assert back.count == n > 0
    assert [m.id for m in back.memories] == [f"id{i}" for i in range(n)]
    assert back.total == 12


def test_a_trimmed_recall_keeps_one_block_line_per_result() -> None:
    results = [memory(i, RecalledMemory, path="semantic") for i in range(10)]
    block = "\n".join(f"fact: {m.content}" for m in results)
    reply = RecallReply(turn=3, results=results, block=block)

    back = msgspec.json.decode(fitted(reply, 8000), type=RecallReply)

    assert back.truncated is True
    assert 0 < len(back.results) < 10
    assert back.block.split("\n") == [f"fact: {m.content}" for m in back.results]
