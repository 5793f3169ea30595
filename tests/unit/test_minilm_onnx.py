"""The onnxruntime `minilm` embedder against sentence-transformers on torch (the reference),
its micro-batching, and its export cache."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from handlers.embed import minilm_available, minilm_missing, onnx_export
from handlers.embed.minilm import MAX_BATCH, MAX_SEQ, MiniLMEmbedder

pytestmark = pytest.mark.minilm

_LONG = (
    "The memory bus stores what agents learn, recalls it when a later turn needs it, and "
    "forgets what expires. "
) * 30  # far beyond 256 tokens: exercises truncation

TEXTS = [
    "a",
    "",
    "   padded with spaces   ",
    "hi",
    "?",
    "OK",
    "The user likes short replies",
    "keep answers brief",
    "We deploy every Tuesday afternoon",
    "Photosynthesis converts sunlight into chemical energy",
    "Caroline attended an LGBTQ support group recently and found the stories inspiring.",
    "What did Melanie paint last summer?",
    "When is the next release planned, and who signs off on it?",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "the quick brown fox jumps over the lazy dog",
    "Error 503: upstream connect error or disconnect/reset before headers",
    "def embed(texts: list[str]) -> list[np.ndarray]: return [unit(v) for v in vectors]",
    "SELECT id, content FROM memories WHERE namespace = 'ops' ORDER BY created_at DESC;",
    "https://example.com/path?query=1&lang=en#section-2",
    "user@example.org wrote on 2024-03-15 at 14:32 UTC",
    "3.14159 2.71828 1.41421 1.73205",
    "$1,299.99 (incl. VAT) — 20% off until 31/12",
    "Café crème, naïve façade, jalapeño, smørrebrød",
    "Über die Brücke gehen wir morgen früh",
    "¿Dónde está la biblioteca? ¡Allí!",
    "Привет, как дела? Всё хорошо.",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "日本語のテキストを埋め込みます",
    "你好，世界！今天天气很好。",
    "한국어 문장도 처리합니다",
    "नमस्ते दुनिया",
    "ไทย ภาษา",
    "🎉🚀✨ emoji party 🥳",
    "😀",
    "tabs\tand\nnewlines\r\nmixed in",
    "zero\u200bwidth\u200bspaces and \u00a0non-breaking",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "!!! ??? ... --- ***",
    "[CLS] [SEP] [PAD] [MASK] [UNK]",
    "<html><body><p>Hello</p></body></html>",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "The handler drains in-flight requests on SIGTERM before it exits.",
    " ".join(["word"] * 300),  # truncated: 300 words
    _LONG,
    "Ünïcödé façade " * 150,  # long, accents stripped by the normaliser
    "日本語 " * 200,  # long CJK
    "A sentence of moderate length that talks about retrieval, ranking and recall@10 on "
    "the LoCoMo benchmark, with a few numbers like 0.703 and 0.542 thrown in.",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(onnx_export.default_model_dir()), device="cpu")
    assert model.max_seq_length == MAX_SEQ
    out = model.encode(TEXTS, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(out, dtype=np.float32)


@pytest.fixture(scope="module")
def embedder(cache_dir: Path) -> Iterator[MiniLMEmbedder]:
    assert minilm_available(), f"make test installs minilm; missing: {minilm_missing()}"
    yield MiniLMEmbedder(cache_dir=cache_dir, quantize=False)


@pytest.fixture
async def fresh(cache_dir: Path) -> AsyncIterator[MiniLMEmbedder]:
    """An embedder of its own (its batching worker, its patched methods)."""
    embedder = MiniLMEmbedder(cache_dir=cache_dir, quantize=False)
    yield embedder
    await embedder.close()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_the_texts_reach_past_truncation(embedder: MiniLMEmbedder) -> None:
    lengths = [len(e.ids) for e in embedder._tokenizer.encode_batch(TEXTS)]
    assert max(lengths) == MAX_SEQ
    assert sum(n == MAX_SEQ for n in lengths) >= 4


def test_fp32_matches_sentence_transformers(
    embedder: MiniLMEmbedder, reference: np.ndarray
) -> None:
    got = embedder.encode(TEXTS)
    cos = cosines(got, reference)
    print(f"\nfp32 ONNX vs sentence-transformers: min cosine {cos.min():.7f}")
    worst = TEXTS[int(np.argmin(cos))][:40]
    assert cos.min() >= 0.999, f"min cosine {cos.min()} on {worst!r}"
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 384)


def test_int8_stays_close_to_sentence_transformers(cache_dir: Path, reference: np.ndarray) -> None:
    int8 = MiniLMEmbedder(cache_dir=cache_dir, quantize=True)
    assert int8.model_file.name.endswith("-int8.onnx")
    cos = cosines(int8.encode(TEXTS), reference)
    print(f"\nint8 ONNX vs sentence-transformers: min cosine {cos.min():.4f} mean {cos.mean():.4f}")
    assert cos.min() >= 0.95
    assert cos.mean() >= 0.985


def test_vectors_are_unit_norm_float32(embedder: MiniLMEmbedder) -> None:
    vectors = embedder.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


async def test_concurrent_embeds_share_passes_and_match_one_at_a_time(
    fresh: MiniLMEmbedder,
) -> None:
    alone = [(await fresh.embed([t]))[0] for t in TEXTS]

    sizes: list[int] = []
    encode = fresh.encode

    def counting(texts: list[str]) -> np.ndarray:
        sizes.append(len(texts))
        return encode(texts)

    fresh.encode = counting  # type: ignore[method-assign]
    together = await asyncio.gather(*(fresh.embed([t]) for t in TEXTS))

    assert max(sizes) > 1, "concurrent calls were not batched"
    assert sum(sizes) == len(TEXTS)
    for one, many in zip(alone, together, strict=True):
        assert many[0].shape == (384,)
        assert float(np.dot(one, many[0])) >= 0.99999


async def test_a_pass_never_takes_more_than_the_batch_cap(fresh: MiniLMEmbedder) -> None:
    sizes: list[int] = []
    encode = fresh.encode

    def counting(texts: list[str]) -> np.ndarray:
        sizes.append(len(texts))
        return encode(texts)

    fresh.encode = counting  # type: ignore[method-assign]
    texts = [f"memory number {i}" for i in range(3 * MAX_BATCH + 5)]
    out = await asyncio.gather(fresh.embed(texts[:10]), fresh.embed(texts[10:]))

    assert max(sizes) <= MAX_BATCH
    assert sum(sizes) == len(texts)
    flat = [v for part in out for v in part]
    np.testing.assert_allclose(np.stack(flat), encode(texts), atol=1e-5)


async def test_an_encode_error_reaches_every_waiter_and_the_next_call_works(
    fresh: MiniLMEmbedder,
) -> None:
    encode = fresh.encode
    calls = 0

    def failing_once(texts: list[str]) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return encode(texts)

    fresh.encode = failing_once  # type: ignore[method-assign]
    results = await asyncio.gather(
        *(fresh.embed([f"text {i}"]) for i in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) and str(r) == "boom" for r in results)
    assert (await fresh.embed(["still alive"]))[0].shape == (384,)


async def test_close_fails_pending_waiters_and_stops_the_worker(fresh: MiniLMEmbedder) -> None:
    started = threading.Event()
    encode = fresh.encode

    def slow(texts: list[str]) -> np.ndarray:
        started.set()
        time.sleep(0.3)
        return encode(texts)

    fresh.encode = slow  # type: ignore[method-assign]
    first = asyncio.ensure_future(fresh.embed(["in the running pass"]))
    await asyncio.to_thread(started.wait, 5)
    second = asyncio.ensure_future(fresh.embed(["still queued"]))
    await asyncio.sleep(0)
    worker = fresh._batches._worker
    await fresh.close()

    assert worker is not None and worker.done()
    for task in (first, second):
        with pytest.raises(RuntimeError, match="closed"):
            await task


def test_export_is_cached_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: MiniLMEmbedder
) -> None:
    first = MiniLMEmbedder(cache_dir=tmp_path, quantize=False)
    path = first.model_file
    assert path.parent == tmp_path and path.is_file()
    assert onnx_export.weights_key(onnx_export.default_model_dir()) in path.name
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"
    stat = path.stat()

    def no_export(*args: object, **kwargs: object) -> Path:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_export, "export", no_export)
    second = MiniLMEmbedder(cache_dir=tmp_path, quantize=False)

    assert second.model_file == path
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == (stat.st_mtime_ns, stat.st_ino)
    np.testing.assert_allclose(second.encode(TEXTS[:8]), embedder.encode(TEXTS[:8]), atol=1e-6)


def test_the_environment_picks_the_model(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    monkeypatch.setenv("MEMBUS_MODEL_DIR", str(cache_dir))
    monkeypatch.setenv("MEMBUS_MINILM_QUANTIZE", "int8")
    embedder = MiniLMEmbedder()
    assert embedder.model_file.parent == cache_dir
    assert embedder.model_file.name.endswith("-int8.onnx")
    assert embedder.name == "minilm" and embedder.dimension == 384

    monkeypatch.setenv("MEMBUS_MINILM_QUANTIZE", "int4")
    with pytest.raises(ValueError, match="MEMBUS_MINILM_QUANTIZE"):
        MiniLMEmbedder()


def test_queries_take_the_int8_graph_and_stored_texts_the_fp32_one(
    cache_dir: Path, embedder: MiniLMEmbedder, reference: np.ndarray
) -> None:
    queries = embedder.encode_queries(TEXTS)
    stored = embedder.encode(TEXTS)

    assert embedder.query_variant == "int8"
    assert embedder.model_file.name.endswith(".onnx")
    assert not embedder.model_file.name.endswith("-int8.onnx")
    # fp32 is sentence-transformers to 1e-3; int8 queries are near it, and not the same.
    assert cosines(stored, reference).min() >= 0.999
    cos = cosines(queries, reference)
    assert cos.min() >= 0.95 and cos.mean() >= 0.985
    assert not np.allclose(queries, stored, atol=1e-4)
    int8 = MiniLMEmbedder(cache_dir=cache_dir, quantize=True)
    # The same graph as the all-int8 embedder's, text by text.
    np.testing.assert_allclose(queries, np.stack([int8.encode([t])[0] for t in TEXTS]), atol=1e-5)


async def test_a_query_vector_does_not_depend_on_the_queries_beside_it(
    fresh: MiniLMEmbedder,
) -> None:
    # int8 scales activations over a whole pass: batched with others, a query got another
    # vector (and LoCoMo's recall swung between runs).
    fresh.busy = lambda: True  # other requests run: the queries take the batcher
    alone = [fresh.encode_queries([t])[0] for t in TEXTS]
    together = await asyncio.gather(*(fresh.embed_queries([t]) for t in TEXTS))
    in_one_call = fresh.encode_queries(TEXTS)
    for one, (many,), call in zip(alone, together, in_one_call, strict=True):
        np.testing.assert_array_equal(many, one)
        np.testing.assert_array_equal(call, one)


def test_queries_in_fp32_share_the_stored_graph(
    monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    monkeypatch.setenv("MEMBUS_MINILM_QUERIES", "fp32")
    same = MiniLMEmbedder(cache_dir=cache_dir, quantize=False)
    assert same.query_variant == ""
    np.testing.assert_allclose(same.encode_queries(TEXTS[:4]), same.encode(TEXTS[:4]))
    # An all-int8 embedder has one graph for both, so nothing to keep apart either.
    monkeypatch.delenv("MEMBUS_MINILM_QUERIES")
    assert MiniLMEmbedder(cache_dir=cache_dir, quantize=True).query_variant == ""
    monkeypatch.setenv("MEMBUS_MINILM_QUERIES", "int4")
    with pytest.raises(ValueError, match="MEMBUS_MINILM_QUERIES"):
        MiniLMEmbedder(cache_dir=cache_dir, quantize=False)


async def test_a_lone_query_runs_on_the_loop_and_others_take_the_batcher(
    fresh: MiniLMEmbedder,
) -> None:
    threads: list[int] = []
    encode_queries = fresh.encode_queries

    def recording(texts: list[str]) -> np.ndarray:
        threads.append(threading.get_ident())
        return encode_queries(texts)

    fresh.encode_queries = recording  # type: ignore[method-assign]
    here = threading.get_ident()
    [inline] = await fresh.embed_queries([TEXTS[11]])
    assert threads == [here], "a lone query, nothing else running, is encoded in place"

    fresh.busy = lambda: True
    [batched] = await fresh.embed_queries([TEXTS[11]])
    assert threads[-1] != here, "with other requests running it goes to the executor"
    np.testing.assert_array_equal(inline, batched)

    fresh.busy = lambda: False
    await fresh.embed_queries(TEXTS[:2])
    assert threads[-1] != here, "several texts are one batched pass"

    # While stored texts are being embedded, a query waits its turn off the loop too.
    started = threading.Event()
    encode = fresh.encode

    def slow(texts: list[str]) -> np.ndarray:
        started.set()
        time.sleep(0.2)
        return encode(texts)

    fresh.encode = slow  # type: ignore[method-assign]
    storing = asyncio.ensure_future(fresh.embed(["a memory to store"]))
    await asyncio.to_thread(started.wait, 5)
    await fresh.embed_queries([TEXTS[12]])
    assert threads[-1] != here
    await storing
