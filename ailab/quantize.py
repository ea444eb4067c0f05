"""Lower precision, measured: fp16/bf16 casts, INT8 dynamic and static (calibrated) through ONNX Runtime,
and a QuantReport that accepts a model only within a stated accuracy drop (topics E3, E4).

    fp16/bf16  cast_runner(model, "bf16", ...)        a torch cast; checked per device
    INT8 dyn.  quantize_dynamic_int8(path)            weights INT8 ahead of time, activations per batch
    INT8 stat. quantize_static_int8(path, reader)     activations' ranges fixed from calibration samples
    gate       quant_report(candidate, fp32, inputs, labels).passed

torch.ao.quantization is deprecated; INT8 here goes through onnxruntime.quantization.
"""
from __future__ import annotations

import contextlib
import io
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ailab.device import bf16_supported, fp16_supported, pick_device
from ailab.memory.estimate import param_bytes
from ailab.engine import InputSpec, OnnxRunner, Runner, TorchRunner, check_batch
from ailab.engine.export import quiet_logger
from ailab.engine.text import int64_inputs
from ailab.engine.int8 import quantize_dynamic_int8  # noqa: F401 - INT8 dynamic lives in the engine
from ailab.timing import LatencyStats, interleaved

DEFAULT_GATE_POINTS = 0.5  # the largest accuracy drop (percentage points) a quantized model may cost


# ----------------------------------------------------------------------------- fp16 / bf16


@dataclass
class PrecisionSupport:
    precision: str
    device: str
    supported: bool  # torch computes it correctly here
    fast: bool       # ... and faster than fp32 (tensor cores, AVX512-BF16/AMX)
    note: str


def precision_support(precision: str, device: str | torch.device | None = None) -> PrecisionSupport:
    """Can `device` run `precision`, and is it a speed win there?"""
    dev = torch.device(device) if device is not None else pick_device()
    if precision == "fp32":
        return PrecisionSupport("fp32", dev.type, True, True, "the baseline")
    if precision == "bf16":
        fast = bf16_supported(dev)
        note = ("native bf16 units" if fast else
                "computed correctly but emulated: expect it slower than fp32 on this CPU" if dev.type == "cpu" else
                "this GPU has no bf16 support")
        return PrecisionSupport("bf16", dev.type, dev.type == "cpu" or fast, fast, note)
    if precision == "fp16":
        fast = fp16_supported(dev)
        note = ("tensor cores / native fp16" if fast else
                "computed correctly but slowly on CPU; on a GPU with tensor cores fp16 roughly halves memory "
                "traffic and speeds up matmuls" if dev.type == "cpu" else "no fast fp16 on this GPU")
        return PrecisionSupport("fp16", dev.type, True, fast, note)
    if precision == "int8":
        return PrecisionSupport("int8", dev.type, True, dev.type == "cpu",
                                "through ONNX Runtime (quantize_dynamic_int8 / quantize_static_int8)")
    raise ValueError(f"unknown precision {precision!r}; choose fp32, fp16, bf16 or int8")


def cast_runner(model: nn.Module, precision: str, device: str | torch.device | None = None,
                input_spec: Sequence[InputSpec] | None = None, name: str | None = None) -> TorchRunner:
    """A TorchRunner with the model's weights cast to fp16/bf16 (or kept fp32), after a support check."""
    support = precision_support(precision, device)
    if precision == "int8":
        raise ValueError("INT8 is not a torch cast here: export to ONNX and use quantize_dynamic_int8()")
    if not support.supported:
        raise ValueError(f"{precision} is not supported on {support.device}: {support.note}")
    return TorchRunner(model, input_spec, name=name, device=device, precision=precision)


def model_size_bytes(runner: Runner) -> int:
    """Bytes of the model on disk (ONNX) or of its parameters and buffers (torch)."""
    if isinstance(runner, OnnxRunner):
        return runner.size_bytes
    if isinstance(runner, TorchRunner):
        return param_bytes(runner.model)
    raise TypeError(f"cannot size a {type(runner).__name__}")


# ----------------------------------------------------------------------------- INT8 through ONNX Runtime


def _reader_base():
    from onnxruntime.quantization import CalibrationDataReader

    return CalibrationDataReader


class CalibrationReader(_reader_base()):
    """Feeds calibration batches (dicts of input name -> array) to onnxruntime's calibrator, then None.

    The samples must look like production inputs: the ranges observed here become the fixed INT8
    scales of every activation.
    """

    def __init__(self, batches: Iterable[Mapping[str, np.ndarray]]):
        self.batches = [{k: np.ascontiguousarray(v) for k, v in b.items()} for b in batches]
        if not self.batches:
            raise ValueError("the calibration set is empty: static INT8 needs real, representative samples "
                             "to measure activation ranges (a few hundred rows is typical)")
        if any(not isinstance(b, Mapping) or not b for b in self.batches):
            raise TypeError("each calibration batch must be a non-empty dict of input name -> array")
        self.rows = sum(len(next(iter(b.values()))) for b in self.batches)
        self._i = 0

    def get_next(self):
        if self._i >= len(self.batches):
            return None
        self._i += 1
        return self.batches[self._i - 1]

    def rewind(self):
        self._i = 0

    def __len__(self):
        return len(self.batches)


def batches_of(inputs: Mapping[str, np.ndarray], batch_size: int = 32, rows: np.ndarray | None = None,
               drop_last: bool = False):
    """Split a dict of (N, ...) arrays into dicts of at most `batch_size` rows (optionally only `rows`).
    drop_last=True keeps only full batches (histogram calibrators need equal shapes)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(next(iter(inputs.values())))
    idx = np.arange(n) if rows is None else np.asarray(rows)
    stop = len(idx) - len(idx) % batch_size if drop_last else len(idx)
    return [{k: np.asarray(v)[idx[i:i + batch_size]] for k, v in inputs.items()} for i in range(0, stop, batch_size)]


CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


def quantize_static_int8(path: str | os.PathLike, reader: CalibrationReader, out: str | os.PathLike | None = None,
                         method: str = "minmax", per_channel: bool = False,
                         op_types: Sequence[str] | None = None, percentile: float = 99.999) -> Path:
    """INT8 weights *and* activations, with activation ranges measured on `reader`'s samples; QDQ format.

    method: 'minmax' (the observed range: one outlier stretches it), 'entropy' (the range that keeps
    the histogram's information), 'percentile' (clip values beyond the `percentile`-th percentile; the
    default 99.999 ignores an outlier only when there are well over 100,000 values).
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX model at {path}; export one with ailab.engine.export_onnx()")
    if not isinstance(reader, CalibrationReader):
        raise TypeError(f"reader must be an ailab.quantize.CalibrationReader, got {type(reader).__name__}")
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method={method!r}; choose one of {CALIBRATION_METHODS}")
    spec = OnnxRunner(path).input_spec
    for b in reader.batches:  # a wrong calibration batch fails here, in words, not inside the calibrator
        check_batch(b, spec, f"calibration for {path.name}")
    if not 50.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (50, 100], got {percentile}")
    if method != "minmax" and len({tuple(v.shape for v in b.values()) for b in reader.batches}) > 1:
        raise ValueError(f"method={method!r} builds histograms and needs every calibration batch to have the same "
                         "shape; make them with batches_of(..., drop_last=True) and pad text to a fixed length")
    calib = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
             "percentile": CalibrationMethod.Percentile}[method]
    out = Path(out) if out is not None else path.with_name(f"{path.stem}.int8-static-{method}.onnx")
    reader.rewind()
    tmp = out.with_name(out.stem + f".tmp{os.getpid()}.onnx")
    with quiet_logger(""), contextlib.redirect_stdout(io.StringIO()):  # histogram calibrators print progress lines
        quantize_static(str(path), str(tmp), reader, quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        calibrate_method=calib, op_types_to_quantize=list(op_types) if op_types else None,
                        extra_options={"CalibPercentile": percentile} if method == "percentile" else None)
    os.replace(tmp, out)
    for leftover in Path.cwd().glob("augmented_model*.onnx"):  # older calibrators drop this in the cwd
        leftover.unlink(missing_ok=True)
    return out


# ----------------------------------------------------------------------------- evaluation, fidelity, the gate


@dataclass
class Evaluation:
    preds: np.ndarray        # (N,) argmax of the first output
    outputs: np.ndarray      # (N, ...) the first output (logits)
    features: np.ndarray     # (N, D) the second output if any (an embedding), else the first
    accuracy: float


def evaluate(runner: Runner, inputs: Mapping[str, np.ndarray], labels: np.ndarray, batch_size: int = 64) -> Evaluation:
    """Run every row of `inputs` through `runner`. Token inputs are sorted by length and each batch is
    trimmed to its longest row, so padding costs nothing; results come back in the original order."""
    labels = np.asarray(labels)
    n = len(next(iter(inputs.values())))
    if n != len(labels):
        raise ValueError(f"inputs have {n} rows but labels has {len(labels)}")
    if n == 0:
        raise ValueError("evaluate() got an empty data set")
    mask = inputs.get("attention_mask")
    order = np.argsort(mask.sum(1), kind="stable") if mask is not None else np.arange(n)
    outs, feats = [], []
    for b in batches_of(inputs, batch_size, order):
        if mask is not None:
            width = max(int(b["attention_mask"].sum(1).max()), 1)
            b = {k: (v[:, :width] if v.ndim == 2 and v.shape[1] == mask.shape[1] else v) for k, v in b.items()}
        res = runner.run_all(b)
        outs.append(np.asarray(res[0], np.float32))
        feats.append(np.asarray(res[1] if len(res) > 1 else res[0], np.float32))
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    out, feat = np.concatenate(outs)[inv], np.concatenate(feats)[inv]
    preds = out.argmax(-1)
    return Evaluation(preds, out, feat, float((preds == labels).mean()))


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-12)))


@dataclass
class GateResult:
    passed: bool
    baseline_accuracy: float
    candidate_accuracy: float
    drop_points: float       # (baseline - candidate) * 100; negative = the candidate is better
    max_drop_points: float

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{verdict}: accuracy {self.candidate_accuracy:.2%} vs FP32 {self.baseline_accuracy:.2%} "
                f"(drop {self.drop_points:+.2f} points, gate <= {self.max_drop_points} points)")


def accuracy_gate(baseline_accuracy: float, candidate_accuracy: float,
                  max_drop_points: float = DEFAULT_GATE_POINTS) -> GateResult:
    """Accept the candidate only if it loses at most `max_drop_points` percentage points against the
    FP32 model measured on the same held-out data (not against a published or training figure)."""
    for name, v in (("baseline_accuracy", baseline_accuracy), ("candidate_accuracy", candidate_accuracy)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be a fraction in [0, 1], got {v}")
    if max_drop_points < 0:
        raise ValueError(f"max_drop_points must be >= 0, got {max_drop_points}")
    drop = (baseline_accuracy - candidate_accuracy) * 100.0
    return GateResult(drop <= max_drop_points + 1e-9, baseline_accuracy, candidate_accuracy, drop, max_drop_points)


@dataclass
class QuantReport:
    name: str
    precision: str
    size_bytes: int
    size_ratio: float            # baseline size / this size
    p50_ms_b1: float
    p99_ms_b1: float
    p50_ms_b32: float
    p99_ms_b32: float
    baseline_p50_ms_b1: float
    baseline_p50_ms_b32: float
    accuracy: float
    baseline_accuracy: float
    accuracy_drop_points: float
    agreement: float             # fraction of rows where the prediction equals FP32's
    embedding_cosine: float      # mean cosine to FP32's embedding (or logits for single-output models)
    max_drop_points: float
    passed: bool

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def speedup_b1(self) -> float:
        return self.baseline_p50_ms_b1 / self.p50_ms_b1

    @property
    def speedup_b32(self) -> float:
        return self.baseline_p50_ms_b32 / self.p50_ms_b32

    def __str__(self) -> str:
        return (f"{self.name} [{self.precision}]: {self.size_bytes / 2**20:.1f} MiB ({self.size_ratio:.2f}x smaller), "
                f"p50 {self.p50_ms_b1:.2f} ms @1 / {self.p50_ms_b32:.1f} ms @32 ({self.speedup_b1:.2f}x / "
                f"{self.speedup_b32:.2f}x the baseline's speed), accuracy {self.accuracy:.2%} "
                f"(drop {self.accuracy_drop_points:+.2f} pt), agreement {self.agreement:.2%}, cosine "
                f"{self.embedding_cosine:.4f} -> {'PASS' if self.passed else 'FAIL'} (gate {self.max_drop_points} pt)")


def latency_batch(inputs: Mapping[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
    """The first `batch_size` rows (repeated when there are fewer), at full width: a fixed-shape timing batch."""
    n = len(next(iter(inputs.values())))
    idx = np.arange(batch_size) % n
    return {k: np.ascontiguousarray(np.asarray(v)[idx]) for k, v in inputs.items()}


def interleaved_latency(runners: Mapping[str, Runner], batch: Mapping[str, np.ndarray], iters: int = 20,
                        warmup: int = 3, max_seconds: float | None = None) -> dict[str, LatencyStats]:
    """Latency of several runners on one batch, timed in interleaved rounds (see `timing.interleaved`)."""
    fns = {key: (lambda r=r: r.run(batch)) for key, r in runners.items()}  # runners sync their own device
    return interleaved(fns, rounds=iters, warmup=warmup, max_seconds=max_seconds).stats


def quant_report(candidate: Runner, baseline: Runner, inputs: Mapping[str, np.ndarray], labels: np.ndarray,
                 max_drop_points: float = DEFAULT_GATE_POINTS, latency_iters: int = 20, max_seconds: float = 10.0,
                 baseline_eval: Evaluation | None = None) -> QuantReport:
    """Size, p50/p99 latency at batch 1 and 32, accuracy and fidelity vs the FP32 `baseline`, and the gate."""
    base = baseline_eval or evaluate(baseline, inputs, labels)
    cand = evaluate(candidate, inputs, labels)
    lat, base_lat = {}, {}
    for bs in (1, 32):
        stats = interleaved_latency({"base": baseline, "cand": candidate}, latency_batch(inputs, bs),
                                    iters=latency_iters, warmup=3, max_seconds=max_seconds)
        base_lat[bs], lat[bs] = stats["base"], stats["cand"]
    gate = accuracy_gate(base.accuracy, cand.accuracy, max_drop_points)
    size, base_size = model_size_bytes(candidate), model_size_bytes(baseline)
    return QuantReport(candidate.name, candidate.precision, size, base_size / size, lat[1].p50_ms, lat[1].p99_ms,
                       lat[32].p50_ms, lat[32].p99_ms, base_lat[1].p50_ms, base_lat[32].p50_ms, cand.accuracy, base.accuracy, gate.drop_points,
                       float((cand.preds == base.preds).mean()), mean_cosine(cand.features, base.features),
                       max_drop_points, gate.passed)


# ----------------------------------------------------------------------------- data helpers for the course's models


def text_inputs(tokenizer, texts: Sequence[str], max_length: int = 64) -> dict[str, np.ndarray]:
    """Token ids and masks padded to `max_length` (evaluate() trims the padding per batch)."""
    if not len(texts):
        raise ValueError("text_inputs() got no texts")
    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=max_length, return_tensors="np")
    return int64_inputs(enc)


# ----------------------------------------------------------------------------- the precision explorer's callback


def precision_view(rows: Sequence[Mapping], precision: str, batch_size: int, baseline: str | None = None) -> dict:
    """What the precision widget draws: p50 latency of every variant at `batch_size`, titled with how
    `precision` compares to the baseline (speed, size, accuracy, agreement). Returns viz.bar_chart kwargs.

    rows: one dict per (variant, batch size) with keys name, batch_size, p50_ms, size_mb, accuracy, agreement.
    """
    names = list(dict.fromkeys(r["name"] for r in rows))
    sizes = sorted({r["batch_size"] for r in rows})
    if precision not in names:
        raise ValueError(f"precision {precision!r} was not measured; choose one of {names}")
    if batch_size not in sizes:
        raise ValueError(f"batch size {batch_size} was not measured; choose one of {sizes}")
    baseline = baseline or names[0]
    at = {r["name"]: r for r in rows if r["batch_size"] == batch_size}
    sel, base = at[precision], at[baseline]
    title = (f"{precision} at batch {batch_size}: {base['p50_ms'] / sel['p50_ms']:.2f}x the speed of {baseline}, "
             f"{base['size_mb'] / sel['size_mb']:.1f}x smaller, accuracy {(sel['accuracy'] - base['accuracy']) * 100:+.1f} pt, "
             f"agreement {sel['agreement']:.1%}")
    return {"categories": names, "series": {f"p50 ms at batch {batch_size}": [at[n]["p50_ms"] for n in names]},
            "title": title, "y_title": "p50 latency (ms)"}
