"""Ids, time conversions, the hash embedder, settings, read filters and client errors."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from bus import errors as bus_errors
from contracts.types import DEFAULT_TYPES, TypeConfig
from handlers.embed import HashEmbedder
from handlers.ops.clock import dt_to_ms, ms_to_dt
from handlers.ops.scoping import read_scope
from handlers.settings import Settings, SettingsError, load_settings
from handlers.store.filters import read_filter
from handlers.store.ids import new_id

CROCKFORD = set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

# --------------------------------------------------------------------------- ids


def test_new_id_is_26_crockford_characters() -> None:
    for _ in range(100):
        memory_id = new_id()
        assert len(memory_id) == 26
        assert set(memory_id) <= CROCKFORD


def test_new_ids_are_unique() -> None:
    assert len({new_id(1_700_000_000_000) for _ in range(1000)}) == 1000


def test_ids_sort_by_creation_time() -> None:
    times = [0, 1, 999, 1_000, 1_700_000_000_000, 1_700_000_000_001, 2**48 - 1]
    ids = [new_id(ms) for ms in times]
    assert sorted(ids) == ids
    assert len(set(ids)) == len(ids)


def test_ids_made_in_one_millisecond_still_sort_in_the_order_they_were_made() -> None:
    ids = [new_id(1_700_000_000_123) for _ in range(500)]
    assert sorted(ids) == ids
    assert len(set(ids)) == 500


def test_id_encodes_its_time_in_the_first_ten_characters() -> None:
    first = new_id(1_700_000_000_000)
    second = new_id(1_700_000_000_000)
    assert first[:10] == second[:10]
    assert new_id(1_700_000_000_001)[:10] > first[:10]


# --------------------------------------------------------------------------- times


@pytest.mark.parametrize(
    "ms",
    [
        0,
        1,
        999,
        1_000,
        1_700_000_000_123,
        1_750_000_000_999,
        1_767_225_599_999,
        253_402_300_799_000,
    ],
)
def test_ms_to_dt_and_back_is_exact_to_the_millisecond(ms: int) -> None:
    dt = ms_to_dt(ms)
    assert dt.tzinfo is UTC
    assert dt.microsecond == (ms % 1000) * 1000
    assert dt_to_ms(dt) == ms


@pytest.mark.parametrize("ms", [1_079_337_347_472, 2_147_504_344_969])
def test_round_trip_is_exact_for_timestamps_where_floats_round_down(ms: int) -> None:
    assert dt_to_ms(ms_to_dt(ms)) == ms


def test_ms_to_dt_is_the_utc_wall_clock() -> None:
    assert ms_to_dt(1_700_000_000_123) == datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC)


def test_dt_to_ms_treats_naive_datetimes_as_utc() -> None:
    assert dt_to_ms(datetime(2023, 11, 14, 22, 13, 20, 123_000)) == 1_700_000_000_123


# --------------------------------------------------------------------------- hash embedder


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_hash_embedder_is_deterministic() -> None:
    text = "The deploy pipeline uses blue-green releases"
    a = HashEmbedder().embed_one(text)
    b = HashEmbedder().embed_one(text)
    assert np.array_equal(a, b)


def test_hash_embedder_vectors_are_unit_norm_float32() -> None:
    emb = HashEmbedder()
    for text in ["x", "hello world", "a " * 500, "", "???"]:
        vec = emb.embed_one(text)
        assert vec.dtype == np.float32
        assert float(np.linalg.norm(vec)) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("dimension", [8, 64, 384, 1024])
def test_hash_embedder_respects_its_dimension(dimension: int) -> None:
    emb = HashEmbedder(dimension)
    assert emb.dimension == dimension
    assert emb.embed_one("some words here").shape == (dimension,)


def test_hash_embedder_is_case_insensitive() -> None:
    emb = HashEmbedder()
    assert np.array_equal(emb.embed_one("Hello World"), emb.embed_one("hello world"))


def test_texts_sharing_words_are_more_similar_than_texts_sharing_none() -> None:
    emb = HashEmbedder()
    base = emb.embed_one("the user prefers dark mode in the editor")
    sharing = emb.embed_one("dark mode editor settings")
    disjoint = emb.embed_one("quarterly revenue grew strongly")
    assert cosine(base, sharing) > 0.3
    assert abs(cosine(base, disjoint)) < 0.2
    assert cosine(base, sharing) > cosine(base, disjoint)


async def test_hash_embedder_embed_batches_match_embed_one() -> None:
    emb = HashEmbedder(64)
    texts = ["alpha beta", "gamma"]
    vectors = await emb.embed(texts)
    assert len(vectors) == 2
    for text, vec in zip(texts, vectors, strict=True):
        assert np.array_equal(vec, emb.embed_one(text))


# --------------------------------------------------------------------------- settings


def test_load_settings_with_explicit_env_uses_defaults() -> None:
    s = load_settings({"MEMBUS_EMBEDDER": "hash"})
    assert s.embedder == "hash"
    assert s.hash_dimension == 384
    assert s.nats_url == "nats://127.0.0.1:4222"
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.types == DEFAULT_TYPES
    assert s.weights.similarity == 0.70


def test_load_settings_reads_the_given_mapping_not_os_environ(monkeypatch) -> None:
    monkeypatch.setenv("MEMBUS_NATS_URL", "nats://from-os-environ:1")
    s = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_HASH_DIMENSION": "64"})
    assert s.nats_url == "nats://127.0.0.1:4222"
    assert s.hash_dimension == 64


def test_load_settings_reads_weights() -> None:
    s = load_settings(
        {"MEMBUS_EMBEDDER": "hash", "MEMBUS_RANK_SIMILARITY": "0.5", "MEMBUS_RECENCY_DAYS": "7"}
    )
    assert s.weights.similarity == 0.5
    assert s.weights.recency_days == 7.0


def test_unknown_embedder_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="MEMBUS_EMBEDDER"):
        load_settings({"MEMBUS_EMBEDDER": "word2vec"})


@pytest.mark.parametrize(
    "name",
    [
        "MEMBUS_HASH_DIMENSION",
        "MEMBUS_RANK_SIMILARITY",
        "MEMBUS_MAX_INFLIGHT",
        "MEMBUS_DRAIN_TIMEOUT_S",
    ],
)
def test_non_numeric_value_is_a_settings_error_naming_the_variable(name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({"MEMBUS_EMBEDDER": "hash", name: "lots"})


def test_number_below_its_minimum_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="MEMBUS_HASH_DIMENSION"):
        load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_HASH_DIMENSION": "4"})


@pytest.mark.parametrize(
    ("name", "value"), [("MEMBUS_MAX_INFLIGHT", "inf"), ("MEMBUS_HASH_DIMENSION", "nan")]
)
def test_non_finite_integer_setting_is_a_settings_error(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({"MEMBUS_EMBEDDER": "hash", name: value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [("off", False), ("no", False), ("0", False), ("false", False), ("yes", True), ("1", True)],
)
def test_embed_cache_switch_reads_the_usual_words(value: str, expected: bool) -> None:
    s = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_EMBED_CACHE": value})
    assert s.embed_cache is expected


def test_openai_api_key_falls_back_to_the_usual_variable() -> None:
    s = load_settings({"MEMBUS_EMBEDDER": "hash", "OPENAI_API_KEY": "sk-test"})
    assert s.openai_api_key == "sk-test"
    mine = {"MEMBUS_OPENAI_API_KEY": "sk-mine", "OPENAI_API_KEY": "sk-test"}
    assert load_settings({"MEMBUS_EMBEDDER": "hash", **mine}).openai_api_key == "sk-mine"


@pytest.mark.parametrize(
    ("name", "value"),
    [("MEMBUS_SEARCH_MODE", "magic"), ("MEMBUS_HYBRID_FUSION", "sum"),
     ("MEMBUS_HYBRID_ALPHA", "1.5"), ("MEMBUS_RANK_RECENCY", "inf"),
     ("MEMBUS_RECENCY_DAYS", "0"), ("MEMBUS_DRAIN_TIMEOUT_S", "inf"),
     ("MEMBUS_EMBED_CACHE", "maybe")],
)  # fmt: skip
def test_a_bad_value_is_a_settings_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({"MEMBUS_EMBEDDER": "hash", name: value})


def test_empty_variables_mean_the_defaults() -> None:
    s = load_settings(
        {"MEMBUS_EMBEDDER": "hash", "MEMBUS_SEARCH_MODE": "", "MEMBUS_RANK_RECENCY": ""}
    )
    assert (s.search_mode, s.weights.recency) == ("hybrid", 0.15)


def test_every_default_is_written_once_in_the_structs() -> None:
    assert load_settings({"MEMBUS_EMBEDDER": "hash"}) == Settings(embedder="hash")


def test_types_file_replaces_the_type_table(tmp_path: Path) -> None:
    path = tmp_path / "types.json"
    path.write_text(json.dumps({"note": {"importance": 0.5, "scope": "workflow", "ttl_s": 60}}))
    s = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_TYPES_FILE": str(path)})
    assert s.types == {"note": TypeConfig(importance=0.5, scope="workflow", ttl_s=60)}


@pytest.mark.parametrize(
    "content", ["{}", "not json", '{"note": {"importance": 2, "scope": "general"}}']
)
def test_bad_types_file_is_a_settings_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "types.json"
    path.write_text(content)
    with pytest.raises(SettingsError, match="MEMBUS_TYPES_FILE"):
        load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_TYPES_FILE": str(path)})


def test_missing_types_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="MEMBUS_TYPES_FILE"):
        load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_TYPES_FILE": str(tmp_path / "nope")})


# --------------------------------------------------------------------------- read filters

NOW = 1_750_000_000_000


def test_general_only_filter_selects_general_memories_that_have_not_expired() -> None:
    text = str(read_filter(NOW, read_scope("general", "wf_1")))
    assert "@general:{1}" in text
    assert f"@expires_at:[({NOW} +inf]" in text
    assert "@wf:" not in text


def test_workflow_filter_selects_the_escaped_workflow_only() -> None:
    text = str(read_filter(NOW, read_scope("workflow", "wf-1")))
    assert r"@wf:{wf\-1}" in text
    assert "@general" not in text


def test_both_filter_ors_the_workflow_with_general() -> None:
    text = str(read_filter(NOW, read_scope("both", "wf_1")))
    assert "(@wf:{wf\\_1} | @general:{1})" in text


def test_types_tags_and_time_bounds_appear_in_the_filter() -> None:
    text = str(
        read_filter(
            NOW,
            read_scope("both", "wf_1"),
            types=["context", "goal"],
            tags=["a:b", "x.y"],
            since_ms=5,
            until_ms=9,
        )
    )
    assert "@type:{context|goal}" in text
    assert r"@tags:{a\:b|x\.y}" in text
    assert "@created_at:[5 +inf]" in text
    assert "@created_at:[-inf 9]" in text


def test_empty_types_and_tags_add_no_filter() -> None:
    text = str(read_filter(NOW, read_scope("general", None), types=[], tags=None))
    assert "@type" not in text
    assert "@tags" not in text


# --------------------------------------------------------------------------- client errors


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("invalid_request", bus_errors.InvalidRequest),
        ("not_found", bus_errors.NotFound),
        ("conflict", bus_errors.Conflict),
        ("too_large", bus_errors.TooLarge),
        ("forbidden", bus_errors.Forbidden),
        ("unavailable", bus_errors.Unavailable),
        ("internal", bus_errors.Internal),
    ],
)
def test_error_for_maps_each_code_to_its_class(code: str, cls: type) -> None:
    err = bus_errors.error_for(code, "boom")
    assert type(err) is cls
    assert isinstance(err, bus_errors.BusError)
    assert (err.code, err.message, str(err)) == (code, "boom", "boom")


def test_every_protocol_error_code_has_a_class() -> None:
    from contracts.messages import ERROR_CODES

    for code in ERROR_CODES:
        assert type(bus_errors.error_for(code, "m")) is not bus_errors.BusError


def test_error_for_unknown_code_is_a_bus_error_with_that_code() -> None:
    err = bus_errors.error_for("rate_limited", "slow down")
    assert type(err) is bus_errors.BusError
    assert err.code == "rate_limited"
    assert err.message == "slow down"


def test_unknown_code_does_not_change_the_base_class_code() -> None:
    bus_errors.error_for("rate_limited", "x")
    assert bus_errors.BusError("y").code == "internal"


def test_bus_timeout_is_an_asyncio_timeout_error() -> None:
    err = bus_errors.BusTimeout("no reply")
    assert isinstance(err, asyncio.TimeoutError)
    assert isinstance(err, TimeoutError)
    assert isinstance(err, bus_errors.BusError)
    assert err.code == "timeout"


def test_mcp_settings_read_trust_and_inbox_prefix() -> None:
    from bus.mcp import settings_from_env

    s = settings_from_env({"MEMBUS_TRUST": "inner", "MEMBUS_INBOX_PREFIX": "_INBOX_bob"})
    assert (s.trust, s.inbox_prefix) == ("inner", "_INBOX_bob")
    assert settings_from_env({}).trust == "full"
    with pytest.raises(ValueError, match="MEMBUS_TRUST"):
        settings_from_env({"MEMBUS_TRUST": "root"})
