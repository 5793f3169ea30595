"""`openai`: any server that speaks the OpenAI embeddings HTTP API (OpenAI, vLLM, TEI,
Ollama, ...), through redisvl's OpenAI vectorizer."""

from __future__ import annotations

import numpy as np

from handlers.embed.base import unit


class OpenAIEmbedder:
    """Its dimension is asked of the server at start-up."""

    name = "openai"
    query_variant = ""

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
        return [unit(np.asarray(v, dtype=np.float32)) for v in vectors]

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        return await self.embed(texts)

    async def close(self) -> None:
        return None
