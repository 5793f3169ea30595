"""Namespace indexes: created on first use (by whichever handler comes first), brought up to
the current schema, and forgotten when Redis was lost, since it may come back without them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec
import structlog
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.schema import IndexSchema

from handlers.store.keys import meta_key
from handlers.store.resp import index_attributes
from handlers.store.schema import NamespaceMeta, schema_dict

log = structlog.get_logger("membus.store")

_meta_decoder = msgspec.json.Decoder(NamespaceMeta)


class Namespace(NamedTuple):
    index: AsyncSearchIndex
    meta: NamespaceMeta


class Indexes:
    def __init__(
        self,
        client: Any,
        mine: NamespaceMeta,
        guard: Callable[[], contextlib.AbstractAsyncContextManager[None]],
    ) -> None:
        self.client = client
        self.mine = mine
        self._guard = guard
        # A cache only: every replica can rebuild it from Redis.
        self._open: dict[str, Namespace] = {}
        self._pending: dict[str, asyncio.Future[Namespace]] = {}

    async def get(self, ns: str) -> Namespace:
        """The namespace's index and meta, created on first use."""
        cached = self._open.get(ns)
        if cached is not None:
            return cached
        # Concurrent first requests for a namespace share one set-up.
        pending = self._pending.get(ns)
        if pending is None:
            pending = self._pending[ns] = asyncio.ensure_future(self._create(ns))
            pending.add_done_callback(lambda _: self._pending.pop(ns, None))
        return await asyncio.shield(pending)

    def forget(self, ns: str) -> None:
        self._open.pop(ns, None)

    def forget_all(self) -> None:
        self._open.clear()

    async def _create(self, ns: str) -> Namespace:
        async with self._guard():
            # The first writer decides what the namespace's vectors are; later ones read it.
            await self.client.set(meta_key(ns), msgspec.json.encode(self.mine), nx=True)
            meta = _meta_decoder.decode(await self.client.get(meta_key(ns)) or b"")
            index = AsyncSearchIndex(
                IndexSchema.from_dict(schema_dict(ns, meta.dimension)),
                redis_client=self.client,
            )
            try:
                await index.create(overwrite=False)
            except RedisSearchError as exc:
                # Another replica created it between our check and our create.
                if "already exists" not in str(exc).lower():
                    raise
            await self._add_missing_fields(index)
            await self._wait_indexed(index)
        self._open[ns] = Namespace(index, meta)
        return self._open[ns]

    async def _add_missing_fields(self, index: AsyncSearchIndex) -> None:
        """Bring an index made by an older version up to the current schema: FT.ALTER adds
        the fields it lacks, and RediSearch indexes existing memories for them."""
        info = await self.client.execute_command("FT.INFO", index.name)
        have = index_attributes(info)
        for field in index.schema.redis_fields:
            if field.name not in have:
                log.info("index.upgrade", index=index.name, field=field.name)
                await self.client.execute_command(
                    "FT.ALTER", index.name, "SCHEMA", "ADD", *field.redis_args()
                )

    async def _wait_indexed(self, index: AsyncSearchIndex, limit_s: float = 5.0) -> None:
        """A (re-)created index scans existing keys in the background; let it finish."""
        deadline = asyncio.get_running_loop().time() + limit_s
        while asyncio.get_running_loop().time() < deadline:
            info = await index.info()
            if not int(info.get("indexing", 0)):
                return
            await asyncio.sleep(0.01)
