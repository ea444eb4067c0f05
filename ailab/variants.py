"""Every way the engine can run the course's sentiment model, measured side by side, and the auto choice.

    variant = build_variant(trained, "ort_plain")     # a Runner, its texts -> labels classifier, its build time
    variants = build_variants(trained)               # every variant by name
    rows = compare_variants(variants, trained)       # latency at batch 1 and 32 (interleaved), accuracy, gate
    best = choose(rows)                              # the fastest at batch 32 that passes the accuracy gate

What each variant is, and what it costs to get:
- torch_eager       PyTorch as written (SDPA attention), FP32: the baseline.
- torch_compile     torch.compile (inductor): generated C++/OpenMP kernels with fused element-wise work.
                    Paid for in compile time, again at each new input shape.
- ort_plain         the graph torch.onnx (dynamo) writes, under ONNX Runtime's own basic optimisations.
- ort_fused         ONNX Runtime's transformer optimizer rewrites attention, residual + layer norm, bias + GELU
                    and embeddings + layer norm into one operator each. Its pattern matcher knows the graph
                    the TorchScript exporter writes for *eager* attention, not the dynamo exporter's SDPA
                    graph (measured: nothing but BiasGelu fused there), so this variant is exported that way
                    (ailab.engine.fusion: the export, the optimizer, the node counts).
- ort_int8_dynamic  INT8 weights, activations quantized per batch at run time (ailab.engine.int8).
- ort_int8_static   INT8 weights and the MatMuls' input activations, ranges calibrated ahead of time on
                    training texts (QDQ). Fixed ranges fit this encoder's activations less well than ranges
                    measured per batch: measured here, it loses more accuracy than dynamic INT8.
- ort_fused_int8    the fused graph with dynamic INT8 (its Attention becomes QAttention).

No single variant wins everywhere: which is fastest depends on the CPU (VNNI or not), the batch size and
the sequence length. So the server's engine "auto" measures them here, at start-up, and says which it took.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from ailab.engine import (
    ClassifierWithEmbedding,
    OnnxRunner,
    Runner,
    TextClassifierRunner,
    TorchRunner,
    text_input_spec,
    sentiment_onnx,
)

# The graph counts are re-exported: notebook 2/01 and `ailab bench engine` read them here.
from ailab.engine.fusion import (  # noqa: F401
    FUSED_OPS,
    export_for_fusion,
    fuse_transformer,
    fusion_summary,
    op_counts,
    session_op_counts,
)
from ailab.engine.int8 import quantize_dynamic_int8
from ailab.quantize import (
    DEFAULT_GATE_POINTS,
    CalibrationReader,
    accuracy_gate,
    batches_of,
    evaluate,
    interleaved_latency,
    latency_batch,
    mean_cosine,
    quantize_static_int8,
    text_inputs,
)
from ailab.timing import measure_latency, ratio

SEQ = 64
VARIANTS = {
    "torch_eager": "PyTorch eager (SDPA attention), FP32",
    "torch_compile": "torch.compile (inductor), FP32",
    "ort_plain": "ONNX Runtime, the exported graph, FP32",
    "ort_fused": "ONNX Runtime, transformer fusions, FP32",
    "ort_int8_dynamic": "ONNX Runtime, dynamic INT8",
    "ort_int8_static": "ONNX Runtime, static INT8 (QDQ, calibrated)",
    "ort_fused_int8": "ONNX Runtime, fused graph + dynamic INT8",
}
BASELINE = "torch_eager"
# What the server's engine "auto" tries. torch.compile is left out: it compiles again at each new input shape
# a server meets (batch sizes 1..32, any width), which costs seconds at start-up and then mid-traffic.
AUTO_CANDIDATES = ("torch_eager", "ort_plain", "ort_fused", "ort_int8_dynamic", "ort_fused_int8")


@dataclass
class Variant:
    name: str
    runner: Runner
    build_seconds: float  # export, optimise, quantize or compile: what this variant cost before its first answer
    classifier: TextClassifierRunner  # texts -> labels through this runner, each stage timed
    path: Path | None = None  # the ONNX file an ONNX Runtime variant runs

    @property
    def about(self) -> str:
        return VARIANTS[self.name]


# ----------------------------------------------------------------------------- building the runners


def calibration_reader(
    tokenizer, texts: Sequence[str], rows: int = 128, seq: int = SEQ, seed: int = 0
) -> CalibrationReader:
    """A random sample of training texts, padded to `seq`, in batches of 32: static INT8's calibration set."""
    pick = np.random.default_rng(seed).permutation(len(texts))[:rows]
    return CalibrationReader(batches_of(text_inputs(tokenizer, [texts[i] for i in pick], seq), 32, drop_last=True))


def _compiled_runner(model) -> TorchRunner:
    # logits and embedding, like the ONNX graphs, so every variant's fidelity is read the same way
    compiled = torch.compile(ClassifierWithEmbedding(copy.deepcopy(model)).eval(), backend="inductor", dynamic=None)
    runner = TorchRunner(compiled, text_input_spec(), name="torch-compile", device="cpu")
    for bs in (1, 32):  # compile now, at the shapes the bench times, so build_seconds holds the compile time
        runner.run({"input_ids": np.full((bs, SEQ), 1000, np.int64), "attention_mask": np.ones((bs, SEQ), np.int64)})
    return runner


def build_variant(
    trained, name: str, threads: int | None = None, device: str = "cpu", max_length: int = SEQ
) -> Variant:
    """The course's sentiment model (`trained`, an ailab.models.TrainedClassifier) on engine variant `name`,
    timed: the one factory every caller goes through (the server's --engine, the benches, the notebooks).
    Files are cached under cache_dir()/onnx, so a second build reuses them (and says so in build_seconds).
    threads: ONNX Runtime's intra-op threads (None: its default, one per physical core).
    device: where a torch variant runs (the ONNX Runtime variants run on the CPU)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown engine variant {name!r}; choose from {list(VARIANTS)}")
    model, config = trained.model.eval(), trained.model.encoder.config
    t0, path = time.perf_counter(), None
    if name == "torch_eager":
        runner: Runner = TorchRunner(
            ClassifierWithEmbedding(model), text_input_spec(), name="torch-eager", device=device
        )
    elif name == "torch_compile":
        runner = _compiled_runner(model)
    else:
        if name == "ort_plain":
            path = sentiment_onnx(model, SEQ)
        elif name == "ort_int8_dynamic":
            path = quantize_dynamic_int8(sentiment_onnx(model, SEQ))
        elif name == "ort_int8_static":
            src = sentiment_onnx(model, SEQ)
            path = src.with_name(f"{src.stem}.int8-static-matmul.onnx")
            if not path.exists():
                reader = calibration_reader(trained.encoder.tokenizer, trained.split.X_train)
                # MatMuls and the embedding table only, per channel. Measured: with every op quantized
                # (LayerNorm, Softmax, the pooled output too) the embedding kept a cosine of 0.32 to FP32
                path = quantize_static_int8(
                    src, reader, path, method="minmax", per_channel=True, op_types=["MatMul", "Gather"]
                )
        else:  # the fused graph, and that graph quantized
            path = fuse_transformer(export_for_fusion(model), config.num_attention_heads, config.hidden_size)
            if name == "ort_fused_int8":
                path = quantize_dynamic_int8(path)
        runner = OnnxRunner(path, threads=threads, name=name.replace("_", "-"))
    classifier = TextClassifierRunner(runner, trained.encoder.tokenizer, max_length, trained.split.classes)
    return Variant(name, runner, time.perf_counter() - t0, classifier, path)


def build_variants(trained, names: Sequence[str] = tuple(VARIANTS), threads: int | None = None) -> dict[str, Variant]:
    """build_variant for each name, every name checked before the first (slow) build starts."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown engine variant(s) {unknown}; choose from {list(VARIANTS)}")
    return {name: build_variant(trained, name, threads) for name in names}


# ----------------------------------------------------------------------------- measuring and choosing


def compare_variants(
    variants: Mapping[str, Variant],
    trained,
    batch_sizes: Sequence[int] = (1, 32),
    iters: int = 20,
    warmup: int = 3,
    max_seconds: float = 60.0,
    eval_rows: int | None = None,
    max_drop_points: float = DEFAULT_GATE_POINTS,
) -> list[dict]:
    """One row per variant: p50/p99 latency at each batch size (all variants in interleaved rounds, rows padded
    to SEQ), accuracy on the held-out split, its drop against torch eager (or the first variant), the gate,
    agreement with the baseline's predictions, size and build time."""
    if not variants:
        raise ValueError("compare_variants() needs at least one variant")
    tok, split = trained.encoder.tokenizer, trained.split
    runners = {name: v.runner for name, v in variants.items()}
    full = text_inputs(tok, split.X_test[:64], SEQ)
    rows = {
        name: {
            "variant": name,
            "about": v.about,
            "build_s": round(v.build_seconds, 2),
            "size_mb": round(v.runner.size_bytes / 1e6, 2) if isinstance(v.runner, OnnxRunner) else None,
        }
        for name, v in variants.items()
    }
    for bs in batch_sizes:
        stats = interleaved_latency(
            runners, latency_batch(full, bs), iters=iters, warmup=warmup, max_seconds=max_seconds
        )
        for name, st in stats.items():
            rows[name][f"ms_b{bs}"], rows[name][f"p99_ms_b{bs}"] = round(st.p50_ms, 3), round(st.p99_ms, 3)
    n = len(split.X_test) if eval_rows is None else eval_rows
    inputs, labels = text_inputs(tok, split.X_test[:n], SEQ), np.asarray(split.y_test[:n])
    base_name = BASELINE if BASELINE in variants else next(iter(variants))
    evals = {name: evaluate(r, inputs, labels) for name, r in runners.items()}
    base = evals[base_name]
    for name, ev in evals.items():
        gate = accuracy_gate(base.accuracy, ev.accuracy, max_drop_points)
        rows[name].update(
            {
                "accuracy": round(ev.accuracy, 4),
                "drop_points": round(gate.drop_points, 3),
                "gate_passed": gate.passed,
                "agreement": round(float((ev.preds == base.preds).mean()), 4),
                "embedding_cosine": round(mean_cosine(ev.features, base.features), 5),
                "eval_rows": n,
            }
        )
    big = max(batch_sizes)
    for row in rows.values():
        row[f"speedup_b{big}"] = round(ratio(rows[base_name][f"ms_b{big}"], row[f"ms_b{big}"]), 3)
    return list(rows.values())


def choose(rows: Sequence[Mapping], batch_size: int = 32) -> dict:
    """The fastest row at `batch_size` among those that passed the accuracy gate (the baseline always does)."""
    passed = [r for r in rows if r.get("gate_passed")]
    if not passed:
        raise ValueError("no variant passed the accuracy gate; keep torch eager")
    return dict(min(passed, key=lambda r: r[f"ms_b{batch_size}"]))


def forward_flops(model, batch_size: int, seq: int = SEQ) -> int:
    """FLOPs of one forward pass at (batch_size, seq), counted by PyTorch's own FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    ids, mask = torch.full((batch_size, seq), 1000, dtype=torch.long), torch.ones(batch_size, seq, dtype=torch.long)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(ids, mask)
    return int(counter.get_total_flops())


def onnx_matmul_gflops(n: int = 1024, threads: int | None = None, iters: int = 8) -> float:
    """GFLOP/s of one n x n by n x n FP32 MatMul run by ONNX Runtime (2 n^3 FLOPs, median of `iters`): the peak
    ORT's own kernels reach here. ailab.roofline measures torch's; on some CPUs the two libraries differ a lot."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])],
        "matmul",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as OnnxRunner: no busy-wait after a run
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    a = rng.standard_normal((n, n)).astype(np.float32)
    stats = measure_latency(lambda: session.run(None, {"A": a}), iters=iters, warmup=2, max_seconds=3)
    return 2 * n**3 / (stats.p50_ms / 1e3) / 1e9


def auto_choice(
    trained,
    candidates: Sequence[str] = AUTO_CANDIDATES,
    threads: int | None = None,
    iters: int = 8,
    eval_rows: int | None = None,
) -> tuple[Variant, dict]:
    """What the server's engine 'auto' does at start-up: build the candidates, time them at batch 32 in
    interleaved rounds, gate each on held-out accuracy, keep the fastest that passes. Returns it and a
    report {picked, candidates: {name: {ms_b32, accuracy, drop_points, gate_passed}}, seconds}."""
    t0 = time.perf_counter()
    variants = build_variants(trained, candidates, threads)
    rows = compare_variants(
        variants, trained, batch_sizes=(32,), iters=iters, warmup=2, max_seconds=20.0, eval_rows=eval_rows
    )
    best = choose(rows)
    report = {
        "picked": best["variant"],
        "seconds": round(time.perf_counter() - t0, 1),
        "candidates": {
            r["variant"]: {k: r[k] for k in ("ms_b32", "accuracy", "drop_points", "gate_passed")} for r in rows
        },
    }
    return variants[best["variant"]], report
