"""Embedders, one module each, behind the `Embedder` interface of `base`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from handlers.embed.base import Embedder
from handlers.embed.hashing import HashEmbedder
from handlers.embed.minilm import MiniLMEmbedder, minilm_available, minilm_missing

EmbedderName = Literal["hash", "minilm", "openai", "e5"]


def build_embedder(
    name: EmbedderName,
    *,
    hash_dimension: int,
    openai_base_url: str | None,
    openai_model: str,
    openai_api_key: str | None,
    busy: Callable[[], bool] | None = None,
) -> Embedder:
    """`busy`: whether other requests run in this process now (see `MiniLMEmbedder`)."""
    if name == "hash":
        return HashEmbedder(hash_dimension)
    if name == "minilm":
        missing = minilm_missing()
        if missing is not None:
            raise RuntimeError(f"MEMBUS_EMBEDDER=minilm needs {missing}")
        return MiniLMEmbedder(busy=busy)
    if name == "e5":
        from handlers.embed.e5 import E5Embedder, e5_missing

        if (lacks := e5_missing()) is not None:
            raise RuntimeError(f"MEMBUS_EMBEDDER=e5 needs {lacks}")
        return E5Embedder(busy=busy)
    from handlers.embed.openai_api import OpenAIEmbedder

    return OpenAIEmbedder(openai_base_url, openai_model, openai_api_key)


__all__ = [
    "Embedder",
    "EmbedderName",
    "HashEmbedder",
    "build_embedder",
    "minilm_available",
    "minilm_missing",
]
