"""Service settings: `MEMBUS_*` environment variables read into one Struct at start-up.

Each default is written once, in the Structs (`Settings`, and `RankWeights` for ranking);
`msgspec.convert(..., strict=False)` parses the strings and enforces each bound and Literal,
and an error names the variable to fix.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import structlog

from contracts.messages import Fusion, SearchMode
from contracts.types import DEFAULT_TYPES, TypeTable, decode_type_table
from handlers.embed import EmbedderName, minilm_missing

Weight = Annotated[float, msgspec.Meta(ge=0.0)]


class RankWeights(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ranking's weights (see `handlers.ops.ranking.score`)."""

    similarity: Weight = 0.70
    importance: Weight = 0.15
    recency: Weight = 0.15
    # Weight of min(mention_count / 10, 1): how often the same content was added.
    mention: Weight = 0.0
    # Query signals (handlers.ops.query_signals; 0: off): added to the score of a memory
    # whose people or speaker tag is a person the query names and its content does not
    # (off: no gain on LoCoMo, where the content names the person, for +1.4 ms; 0.3 lifts
    # memories naming their people only in related_people by +0.11 recall@10), and times
    # how well its time (valid_from, else created_at) fits a time the query names (LoCoMo
    # imported with session dates: +0.02 recall@10 and MRR@10 cross-validated;
    # docs/benchmarks.md, "Query signals on LoCoMo").
    names: Weight = 0.0
    times: Weight = 0.2
    # Recency falls linearly from 1.0 (created now) to 0.0 at this age.
    recency_days: Annotated[float, msgspec.Meta(ge=0.001)] = 30.0

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) for v in msgspec.structs.astuple(self)):
            raise ValueError("ranking weights must be finite numbers")


class SettingsError(ValueError):
    """A `MEMBUS_*` variable has a value the service cannot use."""


def _default_embedder() -> EmbedderName:
    missing = minilm_missing()
    if missing is None:
        return "minilm"
    # Said once at start: an install that meant to have minilm learns what it lacks.
    structlog.get_logger("membus.embedders").info("embedder.default_hash", minilm_needs=missing)
    return "hash"


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    nats_url: str = "nats://127.0.0.1:4222"
    redis_url: str = "redis://127.0.0.1:6379/0"
    embedder: EmbedderName = msgspec.field(default_factory=_default_embedder)
    hash_dimension: Annotated[int, msgspec.Meta(ge=8)] = 384
    openai_base_url: str | None = None
    openai_model: str = "text-embedding-3-small"
    openai_api_key: str | None = None
    # Cache embeddings in Redis (minilm, openai; hash is cheaper to compute than to fetch).
    embed_cache: bool = True
    embed_cache_ttl_s: Annotated[int, msgspec.Meta(ge=1)] = 30 * 24 * 3600
    # The memory-type table; MEMBUS_TYPES_FILE replaces it.
    types: TypeTable = msgspec.field(default_factory=lambda: dict(DEFAULT_TYPES))
    weights: RankWeights = RankWeights()
    # The search mode of a request that names none, and how hybrid fuses its two signals.
    search_mode: SearchMode = "hybrid"
    hybrid_fusion: Fusion = "linear"
    hybrid_alpha: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.8
    # Hybrid search's text query across the namespace reads, rarest word first, the words
    # whose memories add up to at most this share of the namespace (or `text_read_docs_min`
    # memories, if more): Redis reads every memory holding a word to score it. The other
    # words are scored among the candidates found only. 1: every word is read.
    text_read_share_max: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.02
    text_read_docs_min: Annotated[int, msgspec.Meta(ge=0)] = 1000
    # The second opinion (handlers/ops/rerank.py): the best `rerank_depth` candidates of a
    # search re-ordered by z(first stage's score) + `rerank_weight` * z(e5's cosine). Needs
    # the `e5` extra; "off" by default: it costs a search an e5 query (docs/benchmarks.md).
    rerank: Literal["off", "e5"] = "off"
    rerank_depth: Annotated[int, msgspec.Meta(ge=2, le=200)] = 30
    rerank_weight: Annotated[float, msgspec.Meta(ge=0.0, le=100.0)] = 1.0
    # Near-duplicate threshold (cosine) for `add` with `dedup: "semantic"`.
    dedup_threshold: Annotated[float, msgspec.Meta(ge=0.01, le=1.0)] = 0.95
    # `reconcile` suggests superseding a current memory of the fact's type at least this
    # similar (cosine) that says something else; at `dedup_threshold` or above it is the
    # same fact (noop). Tuned for minilm; the hash embedder's similarities run lower.
    reconcile_supersede: Annotated[float, msgspec.Meta(ge=0.01, le=1.0)] = 0.75
    # Load shedding: at most `max_inflight` requests run at once; up to `max_waiting` more
    # wait for a slot, each at most `queue_wait_s`. Past that a request is answered
    # `unavailable` ("busy") at once, well before a caller's timeout (the SDK's is 5 s).
    max_inflight: Annotated[int, msgspec.Meta(ge=1)] = 128
    max_waiting: Annotated[int, msgspec.Meta(ge=0)] = 1024
    queue_wait_s: Annotated[float, msgspec.Meta(ge=0.0, le=60.0)] = 1.0
    drain_timeout_s: Annotated[float, msgspec.Meta(ge=0.0)] = 10.0
    # Take durable writes from the JetStream stream MEMBUS_WRITES (when NATS has JetStream).
    durable: bool = True
    # JetStream drops a re-published durable write (same Nats-Msg-Id) within this window;
    # handlers remember applied ids for 24 h beyond it.
    durable_duplicate_window_s: Annotated[float, msgspec.Meta(ge=0.1, le=86400.0)] = 600.0
    # Copies JetStream keeps of the durable-write stream: 0 for as many as the NATS cluster
    # has servers, up to 3 (1 on a single server).
    stream_replicas: Annotated[int, msgspec.Meta(ge=0, le=5)] = 0
    # How many Redis replicas must hold a durable write before it is acknowledged; unset:
    # what the deployment declares (a cluster's node table, a primary's
    # min-replicas-to-write; see `handlers.store.replicas`). 0: never wait.
    replicas_required: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None
    # A recall session's state lives this long after its last turn.
    recall_session_ttl_s: Annotated[int, msgspec.Meta(ge=1)] = 24 * 3600
    # How long a deleted memory's history stays readable.
    history_after_delete_s: Annotated[int, msgspec.Meta(ge=1)] = 30 * 24 * 3600
    # A new namespace shares a pool index with up to 63 other small namespaces until it holds
    # this many memories, then gets an index of its own (an index of its own costs Redis
    # about 1.9 MB however few memories it holds; a pool's BM25 word statistics are the
    # pool's, which cost LoCoMo-sized namespaces 0.01 of MRR@10 when pooled at 1,000). 0:
    # every namespace has its own from the start (docs/benchmarks.md, "Many namespaces").
    pool_max: Annotated[int, msgspec.Meta(ge=0)] = 100
    # Secrets in written text (API keys, tokens, private keys, passwords in URLs, cloud keys):
    # "redact" replaces each with [redacted:<kind>], "block" refuses the write, "off" stores
    # it as sent (docs/protocol.md, "Secrets on write").
    secrets: Literal["redact", "block", "off"] = "redact"
    log_level: str = "info"
    # The HTTP port of /metrics (Prometheus), /healthz and /readyz; 0: none. Needs the
    # `observability` extra. Traces are set up from the standard OTEL_* variables instead.
    metrics_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    metrics_host: str = "0.0.0.0"

    def __post_init__(self) -> None:
        if not math.isfinite(self.drain_timeout_s):
            raise ValueError("MEMBUS_DRAIN_TIMEOUT_S must be a finite number")


# Where each variable goes: MEMBUS_<FIELD> for a plain field, and these for the rest.
_NESTED = {
    "MEMBUS_RANK_SIMILARITY": ("weights", "similarity"),
    "MEMBUS_RANK_IMPORTANCE": ("weights", "importance"),
    "MEMBUS_RANK_RECENCY": ("weights", "recency"),
    "MEMBUS_RANK_MENTION": ("weights", "mention"),
    "MEMBUS_RECENCY_DAYS": ("weights", "recency_days"),
    "MEMBUS_RANK_NAMES": ("weights", "names"),
    "MEMBUS_RANK_TIMES": ("weights", "times"),
}
VARIABLES: dict[str, tuple[str, ...]] = {
    **{
        f"MEMBUS_{f.name.upper()}": (f.name,)
        for f in msgspec.structs.fields(Settings)
        if f.name not in ("types", "weights")
    },
    **_NESTED,
}
_BOOL_FIELDS = {f.name for f in msgspec.structs.fields(Settings) if f.type is bool}
_BOOL_WORDS = {"yes": "true", "on": "true", "no": "false", "off": "false"}
_PATH_RE = re.compile(r" - at `\$\.?([\w.]*)`$")


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    given: dict[tuple[str, ...], str] = {}  # path -> variable, to name it in an error
    for var, path in VARIABLES.items():
        value = env.get(var)
        if var == "MEMBUS_OPENAI_API_KEY" and not value:
            var, value = "OPENAI_API_KEY", env.get("OPENAI_API_KEY")
        if not value:  # unset or empty: the default
            continue
        if path[-1] in _BOOL_FIELDS:
            value = _BOOL_WORDS.get(value.lower(), value)
        *parents, name = path
        target = raw
        for parent in parents:
            target = target.setdefault(parent, {})
        target[name] = value
        given[path] = var
    if types_file := env.get("MEMBUS_TYPES_FILE"):
        try:
            raw["types"] = decode_type_table(Path(types_file).read_bytes())
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            raise SettingsError(f"MEMBUS_TYPES_FILE={types_file!r}: {exc}") from None
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(_explain(str(exc), env, given)) from None


def _explain(message: str, env: Mapping[str, str], given: dict[tuple[str, ...], str]) -> str:
    """The error with the variable(s) it is about instead of a path into the Struct."""
    match = _PATH_RE.search(message)
    if match is None:
        return message
    detail = message[: match.start()]
    path = tuple(match.group(1).split(".")) if match.group(1) else ()
    named = [var for p, var in given.items() if p[: len(path)] == path]
    if len(named) == 1 and given.get(path) == named[0]:
        return f"{named[0]}={env[named[0]]!r}: {detail}"
    return f"{', '.join(named)}: {detail}" if named else detail
