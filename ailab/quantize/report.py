"""The accuracy gate and the QuantReport: a lower precision is accepted only within a stated accuracy drop
against the FP32 model on the same held-out data, with its size and latency measured beside it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

import numpy as np

from ailab.engine import Runner
from ailab.quantize.casts import model_size_bytes
from ailab.quantize.evaluate import Evaluation, evaluate, mean_cosine
from ailab.timing import LatencyStats, interleaved

DEFAULT_GATE_POINTS = 0.5  # the largest accuracy drop (percentage points) a quantized model may cost


@dataclass
class GateResult:
    passed: bool
    baseline_accuracy: float
    candidate_accuracy: float
    drop_points: float  # (baseline - candidate) * 100; negative = the candidate is better
    max_drop_points: float

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict}: accuracy {self.candidate_accuracy:.2%} vs FP32 {self.baseline_accuracy:.2%} "
            f"(drop {self.drop_points:+.2f} points, gate <= {self.max_drop_points} points)"
        )


def accuracy_gate(
    baseline_accuracy: float, candidate_accuracy: float, max_drop_points: float = DEFAULT_GATE_POINTS
) -> GateResult:
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
    size_ratio: float  # baseline size / this size
    p50_ms_b1: float
    p99_ms_b1: float
    p50_ms_b32: float
    p99_ms_b32: float
    baseline_p50_ms_b1: float
    baseline_p50_ms_b32: float
    accuracy: float
    baseline_accuracy: float
    accuracy_drop_points: float
    agreement: float  # fraction of rows where the prediction equals FP32's
    embedding_cosine: float  # mean cosine to FP32's embedding (or logits for single-output models)
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
        return (
            f"{self.name} [{self.precision}]: {self.size_bytes / 2**20:.1f} MiB ({self.size_ratio:.2f}x smaller), "
            f"p50 {self.p50_ms_b1:.2f} ms @1 / {self.p50_ms_b32:.1f} ms @32 ({self.speedup_b1:.2f}x / "
            f"{self.speedup_b32:.2f}x the baseline's speed), accuracy {self.accuracy:.2%} "
            f"(drop {self.accuracy_drop_points:+.2f} pt), agreement {self.agreement:.2%}, cosine "
            f"{self.embedding_cosine:.4f} -> {'PASS' if self.passed else 'FAIL'} (gate {self.max_drop_points} pt)"
        )


def latency_batch(inputs: Mapping[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
    """The first `batch_size` rows (repeated when there are fewer), at full width: a fixed-shape timing batch."""
    n = len(next(iter(inputs.values())))
    idx = np.arange(batch_size) % n
    return {k: np.ascontiguousarray(np.asarray(v)[idx]) for k, v in inputs.items()}


def interleaved_latency(
    runners: Mapping[str, Runner],
    batch: Mapping[str, np.ndarray],
    iters: int = 20,
    warmup: int = 3,
    max_seconds: float | None = None,
) -> dict[str, LatencyStats]:
    """Latency of several runners on one batch, timed in interleaved rounds (see `timing.interleaved`)."""
    fns = {key: (lambda r=r: r.run(batch)) for key, r in runners.items()}  # runners sync their own device
    return interleaved(fns, rounds=iters, warmup=warmup, max_seconds=max_seconds).stats


def quant_report(
    candidate: Runner,
    baseline: Runner,
    inputs: Mapping[str, np.ndarray],
    labels: np.ndarray,
    max_drop_points: float = DEFAULT_GATE_POINTS,
    latency_iters: int = 20,
    max_seconds: float = 10.0,
    baseline_eval: Evaluation | None = None,
) -> QuantReport:
    """Size, p50/p99 latency at batch 1 and 32, accuracy and fidelity vs the FP32 `baseline`, and the gate."""
    base = baseline_eval or evaluate(baseline, inputs, labels)
    cand = evaluate(candidate, inputs, labels)
    lat, base_lat = {}, {}
    for bs in (1, 32):
        stats = interleaved_latency(
            {"base": baseline, "cand": candidate},
            latency_batch(inputs, bs),
            iters=latency_iters,
            warmup=3,
            max_seconds=max_seconds,
        )
        base_lat[bs], lat[bs] = stats["base"], stats["cand"]
    gate = accuracy_gate(base.accuracy, cand.accuracy, max_drop_points)
    size, base_size = model_size_bytes(candidate), model_size_bytes(baseline)
    return QuantReport(
        candidate.name,
        candidate.precision,
        size,
        base_size / size,
        lat[1].p50_ms,
        lat[1].p99_ms,
        lat[32].p50_ms,
        lat[32].p99_ms,
        base_lat[1].p50_ms,
        base_lat[32].p50_ms,
        cand.accuracy,
        base.accuracy,
        gate.drop_points,
        float((cand.preds == base.preds).mean()),
        mean_cosine(cand.features, base.features),
        max_drop_points,
        gate.passed,
    )
