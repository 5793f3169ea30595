"""Bench: the minilm query path (question text -> vector), step by step, one thread.

For LoCoMo questions (categories 1-4), each step's p50 over the same questions, the steps
alternating by blocks of 100 so that load from elsewhere falls on all of them:

- the tokenizer alone (`encode` and `encode_batch` of one text);
- the query graph's `session.run` alone, and `encode_queries` (tokenizer, arrays, run);
- `embed_queries` as a handler calls it: a lone query on the event loop's thread, and the
  same through the query batcher and the executor's thread (as when other requests run);
- with `--compare FILE`, the same two for another query graph (say a cached export of an
  earlier GRAPH_VERSION), run through the batcher as before.

Each step is timed back to back and with `--gap` ms of idle before each call (a handler's
model waits between searches, its caches cooled by the rest of the request). Then, if
sentence-transformers is installed, the cosines of the query vectors to torch's fp32 ones.

    .venv/bin/python bench/query_embed.py [--questions 500] [--gap 5] [--compare OLD.onnx]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from locomo import DATA, load

from handlers.embed import onnx_export
from handlers.embed.minilm import MiniLMEmbedder, _Batcher, _Model
from handlers.logs import configure_logging

Step = Callable[[str], Awaitable[object]]


def questions(data: Path, n: int) -> list[str]:
    out: list[str] = []
    for path in sorted(data.glob("*.json")):
        out += [q for q, _, _ in load(path)[1]]
    return out[:n]


async def timed(steps: dict[str, Step], texts: list[str], gap_s: float) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for start in range(0, len(texts), 100):
        for name in names:
            for text in texts[start : start + 100]:
                if gap_s:
                    await asyncio.sleep(gap_s)
                t0 = time.perf_counter()
                await steps[name](text)
                samples[name].append((time.perf_counter() - t0) * 1000)
        names = names[1:] + names[:1]
    return {name: statistics.median(s) for name, s in samples.items()}


def _sync(fn: Callable[[str], object]) -> Step:
    async def step(text: str) -> object:
        return fn(text)

    return step


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--gap", type=float, default=5.0, help="ms idle before each call (2nd pass)")
    p.add_argument("--compare", type=Path, default=None, help="another query graph (.onnx)")
    p.add_argument("--data", type=Path, default=DATA)
    args = p.parse_args()
    configure_logging("warning")
    texts = questions(args.data, args.questions)
    emb = MiniLMEmbedder(quantize=False, threads=1)
    tok = emb._tokenizer
    model = emb._queries
    session = model._session
    batched = _Batcher(model.encode)

    def run(text: str) -> None:
        ids = np.array([tok.encode(text.strip()).ids], dtype=np.int64)
        session.run(["embedding"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})

    steps: dict[str, Step] = {
        "tokenizer encode": _sync(lambda t: tok.encode(t.strip())),
        "tokenizer encode_batch": _sync(lambda t: tok.encode_batch([t.strip()])),
        "session.run (with encode)": _sync(run),
        "encode_queries": _sync(lambda t: model.encode([t])),
        "embed_queries, lone (inline)": lambda t: emb.embed_queries([t]),
        "the same through the batcher": lambda t: batched.embed([t]),
    }
    old: _Model | None = None
    if args.compare is not None:
        other = old = _Model(args.compare, 1, tok, chunk_tokens=0)
        old_batched = _Batcher(other.encode)
        steps[f"{args.compare.name}: encode_queries"] = _sync(lambda t: other.encode([t]))
        steps[f"{args.compare.name}: through the batcher"] = lambda t: old_batched.embed([t])
    print(f"{len(texts)} LoCoMo questions, query graph {model.model_file.name}, 1 thread")
    for gap in (0.0, args.gap / 1000):
        p50 = await timed(steps, texts, gap)
        print(f"p50 ms, {'back to back' if not gap else f'{gap * 1000:g} ms idle before each'}:")
        for name, ms in p50.items():
            print(f"  {ms:7.3f}  {name}")
    await batched.close()
    await emb.close()

    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("(cosines skipped: sentence-transformers is not installed)")
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    st = SentenceTransformer(str(onnx_export.default_model_dir()), device="cpu")
    ref = np.asarray(st.encode(texts, batch_size=32, normalize_embeddings=True), np.float32)
    graphs = {model.model_file.name: model, **({args.compare.name: old} if old else {})}
    for name, m in graphs.items():
        assert m is not None
        vecs = np.stack([m.encode([t])[0] for t in texts])
        cos = np.sum(vecs * ref, axis=1)
        print(
            f"cosine to torch fp32, {name}: min {cos.min():.4f}, 1st percentile"
            f" {np.percentile(cos, 1):.4f}, mean {cos.mean():.4f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
