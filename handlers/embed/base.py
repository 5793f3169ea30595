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

    async def embed(self, texts: list[str]) -> list[np.ndarray]: ...

    async def close(self) -> None: ...


def unit(vec: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec
