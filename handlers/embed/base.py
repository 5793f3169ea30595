"""The one interface every embedder implements.

Every embedder returns L2-normalised float32 vectors, so cosine distance is meaningful.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Embedder(Protocol):
    # The name is recorded with each namespace: a namespace never mixes two embedders.
    name: str
    dimension: int

    # Non-empty when queries are embedded by another model than stored texts (minilm's int8),
    # naming it: caches must keep the two apart.
    query_variant: str

    async def embed(self, texts: list[str]) -> list[np.ndarray]: ...

    # Texts that are only compared with stored vectors, never stored (search and recall
    # queries): an embedder may compute these more cheaply.
    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]: ...

    async def close(self) -> None: ...


def unit(vec: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec
