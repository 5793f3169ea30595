"""The bus's JetStream streams, as an erasure sees them (PROTOCOL v4, "Erasure"): every
message that holds an erased memory's id or text is deleted, by sequence.

Which streams: those the bus makes (`MEMBUS_*`: the durable writes' `MEMBUS_WRITES`, the
webhooks' `MEMBUS_EVENTS_<ns>`) and any other whose subjects overlap the namespace's
(`mem.<ns>.>`, `memq.<ns>.>`: an operator's stream that a webhook uses). A stream of the
namespace's messages alone (a webhook's) is read by sequence, `WINDOW` at a time; any other
on the namespace's subjects only, one message at a time (`next_by_subj`). At most
`SCAN_MAX` messages per stream and subject: erasure is rare, and a stream of one namespace
holds a few days of its events. A deleted message is overwritten on disk by the server
(STREAM.MSG.DELETE without `no_erase`).

A message is the erased memories' when its body (JSON, every string in it) names one of
their ids, or holds one of their texts (equal to it, or containing it when it is at least
`MIN_CONTAINED` characters), or when it is a durable `add` or `capture` whose memory id
(`ids.derived_id` of its request id and time) is one of them. Events carry the memory's id,
durable updates and deletes too; a durable add is found by its derived id, and a repeated
add (a mention of the memory) by its text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from contracts.subjects import DURABLE_PREFIX, PREFIX
from handlers.store.ids import derived_id

log = structlog.get_logger("membus.streams")

# The bus's own streams are named so.
OWN_PREFIX = "MEMBUS_"
# Messages read at most per stream and subject filter in one erasure.
SCAN_MAX = 50_000
# A text shorter than this is matched only by equality (a short text such as "ok" would be
# part of unrelated messages).
MIN_CONTAINED = 12
# Durable operations whose new memory's id derives from the request id.
_DERIVED_OPS = ("add", "capture")
# A write whose script ran just before the erasure's can publish its event (a preview of
# the text) after the scan read a stream's last message: the streams are read once more,
# from where the scan ended, this long after it.
LATE_WRITES_S = 0.05
# JetStream's "no message found": its answer (code 500, which nats-py raises as a
# ServerError, not NotFoundError) to a delete of a message gone since it was read; and
# (10037) to a read of a sequence that holds none.
NO_MESSAGE = (10057, 10037)
# Sequences read at once from a stream of one namespace's messages.
WINDOW = 64


@dataclass(frozen=True, slots=True)
class Sought:
    """What marks a message as an erased memory's: its ids and its texts."""

    ids: frozenset[str]
    texts: frozenset[str]

    def in_body(self, data: bytes) -> bool:
        try:
            found = list(strings(msgspec.json.decode(data)))
        except (msgspec.DecodeError, RecursionError):
            found = [data.decode("utf-8", "replace")]
        for s in found:
            if s in self.ids or s in self.texts:
                return True
            if any(len(t) >= MIN_CONTAINED and t in s for t in self.texts):
                return True
            if any(i in s for i in self.ids):  # inside a longer string (a not-JSON body)
                return True
        return False


def strings(value: Any) -> Iterable[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def _tokens_overlap(a: list[str], b: list[str]) -> bool:
    """Whether two NATS subject patterns (as tokens) can match one subject."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == ">" or y == ">":
            return True
        if x != y and "*" not in (x, y):
            return False
        if i == min(len(a), len(b)) - 1:
            return len(a) == len(b)
    return len(a) == len(b)


def overlaps(a: str, b: str) -> bool:
    return _tokens_overlap(a.split("."), b.split("."))


def _gone(exc: APIError) -> bool:
    """Whether JetStream's error says the message is not there."""
    return isinstance(exc, NotFoundError) or exc.err_code in NO_MESSAGE


def covers(flt: str, subject: str) -> bool:
    """Whether every subject the pattern `subject` matches is matched by `flt`."""
    f, s = flt.split("."), subject.split(".")
    for i, x in enumerate(f):
        if x == ">":
            return len(s) > i
        if i >= len(s) or s[i] == ">" or (s[i] == "*" and x != "*"):
            return False
        if x not in ("*", s[i]):
            return False
    return len(f) == len(s)


class Streams:
    """Erasure's reading and deleting of stream messages."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js

    async def erase(self, ns: str, sought: Sought) -> tuple[int, bool]:
        """Delete the namespace's messages that `sought` marks, in every stream of the bus;
        how many, and whether every stream was read whole (False: one held more than
        SCAN_MAX of the namespace's messages, the rest unread)."""
        filters = [f"{DURABLE_PREFIX}.{ns}.>", f"{PREFIX}.{ns}.>"]
        erased, whole = 0, True
        read_to: dict[str, int] = {}  # each stream's last sequence read
        for again in (False, True):
            if again:
                await asyncio.sleep(LATE_WRITES_S)
            for info in await self._every_stream():
                subjects = list(info.config.subjects or [])
                name = info.config.name or ""
                mine = [f for f in filters if any(overlaps(f, s) for s in subjects)]
                if not mine and not name.startswith(OWN_PREFIX):
                    continue
                first, last = info.state.first_seq, info.state.last_seq
                if name in read_to:
                    first = max(first, read_to[name] + 1)
                if any(all(covers(f, s) for s in subjects) for f in mine):
                    # Every message is the namespace's: read by sequence.
                    scans = [await self._erase_every(name, first, last, sought)]
                else:
                    scans = [await self._erase_in(name, f, first, last, sought) for f in mine]
                for n, done in scans:
                    erased += n
                    whole = whole and done
                read_to[name] = last
        return erased, whole

    async def _every_stream(self) -> list[Any]:
        """Every stream's info: STREAM.LIST answers a page at a time."""
        found: list[Any] = []
        while page := await self.js.streams_info(offset=len(found)):
            found += page
        return found

    async def _erase_in(
        self, stream: str, flt: str, first: int, last: int, sought: Sought
    ) -> tuple[int, bool]:
        """A stream that holds other namespaces' messages too: the next of `flt`'s, one
        request at a time."""
        seq, erased = max(first, 1), 0
        for _ in range(SCAN_MAX):
            if seq > last:
                return erased, True
            try:
                msg = await self.js.get_msg(stream, seq, subject=flt, next=True)
            except NotFoundError:
                return erased, True
            if msg.seq is None or msg.seq > last:
                return erased, True
            if self._marked(stream, msg, sought):
                erased += await self._delete(stream, msg.seq)
            seq = msg.seq + 1
        log.warning("erase.scan_bounded", stream=stream, subject=flt, read=SCAN_MAX, at=seq)
        return erased, seq > last

    async def _erase_every(
        self, stream: str, first: int, last: int, sought: Sought
    ) -> tuple[int, bool]:
        """A stream of the namespace's messages alone (a webhook's): every sequence read,
        `WINDOW` requests at a time (one at a time, 3,000 events took 1.7 s)."""
        seq, erased = max(first, 1), 0
        while seq <= last:
            if seq - max(first, 1) >= SCAN_MAX:
                log.warning("erase.scan_bounded", stream=stream, read=SCAN_MAX, at=seq)
                return erased, False
            window = range(seq, min(last, seq + WINDOW - 1) + 1)
            found = await asyncio.gather(*(self._get(stream, n) for n in window))
            marked = [m.seq for m in found if m is not None and self._marked(stream, m, sought)]
            erased += sum(await asyncio.gather(*(self._delete(stream, n) for n in marked)))
            seq = window[-1] + 1
        return erased, True

    async def _get(self, stream: str, seq: int) -> Any:
        """The message at `seq`; None where none is (deleted, or aged out)."""
        try:
            return await self.js.get_msg(stream, seq)
        except APIError as exc:
            if _gone(exc):
                return None
            raise

    async def _delete(self, stream: str, seq: int) -> int:
        """1 if the message at `seq` was deleted; 0 if it went meanwhile."""
        try:
            return int(bool(await self.js.delete_msg(stream, seq)))
        except APIError as exc:
            if _gone(exc):  # acknowledged (a work queue) or aged out meanwhile, as wanted
                return 0
            raise

    @staticmethod
    def _marked(stream: str, msg: Any, sought: Sought) -> bool:
        if msg.data and sought.in_body(msg.data):
            return True
        parts = (msg.subject or "").split(".")
        if len(parts) >= 3 and parts[0] == DURABLE_PREFIX and parts[2] in _DERIVED_OPS:
            request_id = (msg.headers or {}).get("Nats-Msg-Id") or f"{stream}:{msg.seq}"
            if msg.time is not None:
                # The consumer's timestamp and this one may round apart by a millisecond.
                ms = int(msg.time.timestamp() * 1000)
                return any(derived_id(t, request_id) in sought.ids for t in (ms - 1, ms, ms + 1))
        return False
