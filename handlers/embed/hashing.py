"""`hash`: feature hashing of lower-cased words. Dependency-free and deterministic: texts
that share words are similar, others not."""

from __future__ import annotations

import hashlib
import re

import numpy as np

_WORD_RE = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    name = "hash"
    query_variant = ""

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

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        return await self.embed(texts)

    async def close(self) -> None:
        return None


def hash_bucket(text: str, dimension: int) -> int:
    return (
        int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % dimension
    )
