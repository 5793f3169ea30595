"""`describe`'s counts, kept by the writes instead of aggregated per call.

Every write script counts the memories it changes as they are after it (`scripts.TALLY`):
per side of a scope (general, a workflow, a workspace), by store, workspace, type and
superseded flag, per tag, and each side's memories by creation time. Memories that reach
their expiry are not written to: they are uncounted from a sorted set of expiry times when
their time has passed, by the next `describe` (all that are due) or `add` (up to 10). So a
`describe` reads a few small hashes whatever the size of the namespace, and its counts are
exact at its `now`: the same as an aggregation over the memories live then.

A namespace is marked complete from its first moment (`Indexes`); one created before
tallies existed was counted by the migration to layout 3 (`rebuild`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import msgspec
import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.cluster import batches, scan_iter
from handlers.store.failures import Guard
from handlers.store.filters import ReadScope
from handlers.store.record import RECORD_FIELDS, Record, TypeGroup, record_of, workspace_tag
from handlers.store.resp import text
from handlers.store.tallies.scripts import (
    AS_OF_NEWEST_LUA,
    NEWEST_LUA,
    RETALLY_LUA,
    TALLY_READ_LUA,
)

_decode = msgspec.json.Decoder(list[str]).decode

# Under the tally prefix: set once a namespace's tallies count every memory.
TALLIES_COMPLETE = "ready"
# Under the tally prefix: set once every memory has its v3 validity window (`validity`).
VALIDITY_COMPLETE = "valid"
# Under the tally prefix: set once the tallies count every memory's window (`as_of` lists).
VALIDITY_TALLIED = "vready"


def tally_prefix(ns: str) -> str:
    """Prefix of the namespace's tallies: what `describe` reports, kept by every write. The
    write scripts take it among their keys."""
    return keys.ns_prefix(ns) + "t:"


def complete_marks(ns: str) -> list[str]:
    """What a new namespace is marked with: its writes count every memory it will hold and
    give each its validity window."""
    prefix = tally_prefix(ns)
    return [prefix + TALLIES_COMPLETE, prefix + VALIDITY_COMPLETE, prefix + VALIDITY_TALLIED]


class Behind(Exception):
    """More memories reached their expiry than one read settles (`scripts.SETTLE_MAX`):
    this read is answered another way while the next ones catch up."""


def _checked(raw: Any) -> Any:
    if isinstance(raw, bytes | str) and text(raw) == "behind":
        raise Behind
    return raw


class Overview(NamedTuple):
    """What `describe` reports of the memories in a scope."""

    by_type: dict[str, int]
    tags: list[str]  # sorted
    general_count: int
    workflow_count: int
    # Of the memories counted, those a newer one superseded (lists and searches leave them out).
    superseded_count: int
    oldest: int | None
    newest: int | None
    # Of the memories counted, those forgotten once idle (`idle_ttl_s`); None when not
    # known (an aggregation, which cannot tell them apart).
    idle_count: int | None = None

    @classmethod
    def of(cls, groups: list[TypeGroup]) -> Overview:
        """From an aggregation's groups (`Store.aggregate`)."""
        by_type: dict[str, int] = {}
        tags: set[str] = set()
        general = workflow = superseded = 0
        for g in groups:
            if g.superseded == "1":
                superseded += g.n
            by_type[g.type] = by_type.get(g.type, 0) + g.n
            if g.general:
                general += g.n
            else:
                workflow += g.n
            tags |= g.tag_set()
        oldest = [int(g.oldest) for g in groups]
        newest = [int(g.newest) for g in groups]
        return cls.made(by_type, tags, (general, workflow, superseded), oldest, newest)

    @classmethod
    def made(
        cls,
        by_type: dict[str, int],
        tags: set[str],
        counts: tuple[int, int, int],
        oldest: list[int],
        newest: list[int],
    ) -> Overview:
        """From what was counted: by type, the tags, (general, workflow, superseded), and
        the creation times of the oldest and newest memory of each part counted."""
        general, workflow, superseded = counts
        return cls(
            by_type=dict(sorted(by_type.items())),
            tags=sorted(tags),
            general_count=general,
            workflow_count=workflow,
            superseded_count=superseded,
            oldest=min(oldest, default=None),
            newest=max(newest, default=None),
        )


def sides(scope: ReadScope) -> list[str]:
    """The tally sides (see `scripts.TALLY`) whose memories make up the scope, before its
    workspace and store filters."""
    if scope.workflow_id is not None:
        return [f"w:{scope.workflow_id}", *(["g"] if scope.general else [])]
    if scope.workspace is not None and not scope.general:
        return [f"s:{workspace_tag(scope.workspace)}"]
    return ["g"]


class Tallies:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
    ) -> None:
        self.client = client
        self._guard = guard
        self._read = client.register_script(TALLY_READ_LUA)
        self._retally = client.register_script(RETALLY_LUA)
        self._newest = client.register_script(NEWEST_LUA)
        self._as_of_newest = client.register_script(AS_OF_NEWEST_LUA)

    async def overview(self, ns: str, scope: ReadScope, now_ms: int) -> Overview | None:
        """The overview of the memories live at `now_ms` in `scope`, or None while the
        namespace's tallies are not complete (`Behind` when too many expired at once)."""
        asked = sides(scope)
        args: list[str | int] = [now_ms, keys.record_prefix(ns), *asked]
        async with self._guard():
            raw = _checked(await self._read(keys=[tally_prefix(ns)], args=args))
        if raw is None:
            return None
        wsh = workspace_tag(scope.workspace) if scope.workspace is not None else None

        def wanted(store: str, memory_wsh: str) -> bool:
            if wsh is not None and memory_wsh != wsh:
                return False
            return scope.stores is None or store in scope.stores

        by_type: dict[str, int] = {}
        tags: set[str] = set()
        general = workflow = superseded = idle = 0
        oldest: list[int] = []
        newest: list[int] = []
        for counts, bounds in raw:
            for field, n in _pairs(counts):
                kind, store, memory_wsh, *rest = _decode(field)
                if not wanted(store, memory_wsh):
                    continue
                if kind == "t":
                    tags.add(rest[0])
                    continue
                if kind == "i":
                    idle += n
                    continue
                type_, flag, general_flag = rest
                by_type[type_] = by_type.get(type_, 0) + n
                superseded += n if flag == "1" else 0
                if general_flag == "1":
                    general += n
                else:
                    workflow += n
            for store, memory_wsh, first, last in bounds:
                if wanted(text(store), text(memory_wsh)) and first:
                    oldest.append(int(float(first)))
                    newest.append(int(float(last)))
        seen = Overview.made(by_type, tags, (general, workflow, superseded), oldest, newest)
        return seen._replace(idle_count=idle)

    async def total(self, ns: str) -> int | None:
        """How many memories the namespace holds (those expired since the last write or
        `describe` included); None while its tallies are not complete."""
        prefix = tally_prefix(ns)
        async with self._guard():
            complete, n = await self.client.mget([prefix + TALLIES_COMPLETE, prefix + "n"])
        return None if complete is None else int(n or 0)

    async def newest(
        self,
        ns: str,
        scope: ReadScope,
        now_ms: int,
        offset: int,
        limit: int,
        current: bool,
        as_of_ms: int | None = None,
    ) -> tuple[int, list[Record]] | None:
        """How many memories live at `now_ms` are in `scope` (with `current`, none
        superseded), and the page `offset`..`offset + limit` of them, newest first, read
        in the same script; None while the namespace's tallies are not complete (`Behind`
        as in `overview`)."""
        asked = sides(scope)
        wsh = workspace_tag(scope.workspace) if scope.workspace is not None else ""
        args: list[str | int] = [now_ms, keys.record_prefix(ns), offset, limit]
        if as_of_ms is None:
            args.append("0" if current else "1")
        else:
            args.append(as_of_ms)  # v3: those valid then, superseded or not
        args += [wsh, "0" if scope.stores is None else "1"]
        args += [len(asked), *asked, *(scope.stores or ())]
        script = self._newest if as_of_ms is None else self._as_of_newest
        async with self._guard():
            raw = _checked(await script(keys=[tally_prefix(ns)], args=args))
        if raw is None:
            return None
        return int(raw[0]), [record_of(RECORD_FIELDS, row) for row in raw[1:] if row]

    async def rebuild(self, ns: str, now_ms: int, size: int = 500) -> int:
        """Count every memory of a namespace that has no complete tallies (written by an
        older version), uncount those counted but gone, then mark them complete; how many
        memories were read. Writes meanwhile count themselves, and counting a memory twice
        changes nothing."""
        prefix = tally_prefix(ns)
        found = 0
        async with self._guard():
            records = scan_iter(self.client, ns, f"{keys.record_prefix(ns)}*")
            async for batch in batches(records, size):
                found += await self._count(ns, prefix, batch, now_ms)
            # And uncount what is counted but gone (deleted by a writer that did not count).
            async for batch in batches(self.client.hscan_iter(prefix + "d"), size):
                counted = [keys.record_key(ns, text(mid)) for mid, _ in batch]
                await self._count(ns, prefix, counted, now_ms)
            await self.client.set(prefix + TALLIES_COMPLETE, 1)
        return found

    async def _count(self, ns: str, prefix: str, records: list[Any], now_ms: int) -> int:
        ids = [keys.id_of(ns, text(key)) for key in records]
        return int(await self._retally(keys=[prefix, *records], args=[now_ms, *ids]))


def _pairs(flat: list[Any]) -> Iterator[tuple[bytes, int]]:
    for i in range(0, len(flat), 2):
        yield flat[i], int(flat[i + 1])
