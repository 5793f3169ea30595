"""Service settings read from `MEMBUS_*` environment variables and checked at start-up."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from contracts.types import DEFAULT_TYPES, TypeTable, decode_type_table
from handlers.embedders import minilm_available
from handlers.ranking import RankWeights

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class SettingsError(ValueError):
    """A `MEMBUS_*` variable has a value the service cannot use."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = DEFAULT_NATS_URL
    redis_url: str = DEFAULT_REDIS_URL
    embedder: str = "hash"
    hash_dimension: int = 384
    types: TypeTable = msgspec.field(default_factory=lambda: dict(DEFAULT_TYPES))
    weights: RankWeights = RankWeights()
    max_inflight: int = 256
    drain_timeout_s: float = 10.0
    search_mode: str = "hybrid"
    fusion: str = "linear"
    hybrid_alpha: float = 0.8
    dedup_threshold: float = 0.95
    openai_base_url: str | None = None
    openai_model: str = "text-embedding-3-small"
    openai_api_key: str | None = None
    # Cache embeddings in Redis (minilm, openai; hash is cheaper to compute than to fetch).
    embed_cache: bool = True
    embed_cache_ttl_s: int = 30 * 24 * 3600
    log_level: str = "info"


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise SettingsError(f"{name}={raw!r} must be a finite number")
    if value < minimum:
        raise SettingsError(f"{name}={raw!r} must be at least {minimum}")
    return value


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    embedder = env.get("MEMBUS_EMBEDDER") or ("minilm" if minilm_available() else "hash")
    if embedder not in ("hash", "minilm", "openai"):
        raise SettingsError(f"MEMBUS_EMBEDDER={embedder!r}: use 'hash', 'minilm' or 'openai'")
    types = dict(DEFAULT_TYPES)
    if path := env.get("MEMBUS_TYPES_FILE"):
        try:
            types = decode_type_table(Path(path).read_bytes())
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            raise SettingsError(f"MEMBUS_TYPES_FILE={path!r}: {exc}") from None
    weights = RankWeights(
        similarity=_number(env, "MEMBUS_RANK_SIMILARITY", 0.70, minimum=0),
        importance=_number(env, "MEMBUS_RANK_IMPORTANCE", 0.15, minimum=0),
        recency=_number(env, "MEMBUS_RANK_RECENCY", 0.15, minimum=0),
        recency_days=_number(env, "MEMBUS_RECENCY_DAYS", 30.0, minimum=0.001),
        mention=_number(env, "MEMBUS_RANK_MENTION", 0.0, minimum=0),
    )
    mode = env.get("MEMBUS_SEARCH_MODE") or "hybrid"
    if mode not in ("vector", "text", "hybrid"):
        raise SettingsError(f"MEMBUS_SEARCH_MODE={mode!r}: use 'vector', 'text' or 'hybrid'")
    fusion = env.get("MEMBUS_HYBRID_FUSION") or "linear"
    if fusion not in ("linear", "rrf"):
        raise SettingsError(f"MEMBUS_HYBRID_FUSION={fusion!r}: use 'linear' or 'rrf'")
    alpha = _number(env, "MEMBUS_HYBRID_ALPHA", 0.8, minimum=0)
    threshold = _number(env, "MEMBUS_DEDUP_THRESHOLD", 0.95, minimum=0.01)
    if alpha > 1 or threshold > 1:
        raise SettingsError("MEMBUS_HYBRID_ALPHA and MEMBUS_DEDUP_THRESHOLD must be at most 1")
    return Settings(
        nats_url=env.get("MEMBUS_NATS_URL") or DEFAULT_NATS_URL,
        redis_url=env.get("MEMBUS_REDIS_URL") or DEFAULT_REDIS_URL,
        embedder=embedder,
        hash_dimension=int(_number(env, "MEMBUS_HASH_DIMENSION", 384, minimum=8)),
        types=types,
        weights=weights,
        max_inflight=int(_number(env, "MEMBUS_MAX_INFLIGHT", 256, minimum=1)),
        drain_timeout_s=_number(env, "MEMBUS_DRAIN_TIMEOUT_S", 10.0, minimum=0),
        log_level=env.get("MEMBUS_LOG_LEVEL") or "info",
        search_mode=mode,
        fusion=fusion,
        hybrid_alpha=alpha,
        dedup_threshold=threshold,
        openai_base_url=env.get("MEMBUS_OPENAI_BASE_URL") or None,
        openai_model=env.get("MEMBUS_OPENAI_MODEL") or "text-embedding-3-small",
        openai_api_key=env.get("MEMBUS_OPENAI_API_KEY") or env.get("OPENAI_API_KEY") or None,
        embed_cache=(env.get("MEMBUS_EMBED_CACHE") or "1") not in ("0", "false", "no", "off"),
        embed_cache_ttl_s=int(_number(env, "MEMBUS_EMBED_CACHE_TTL_S", 30 * 24 * 3600, minimum=1)),
    )
