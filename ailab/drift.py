"""Behaviour drift, caught by a fixed reference set (topic E7).

A deployed model can change behaviour without anyone touching its weights: a new preprocessing
step, a different runtime or precision, a library upgrade. Keep a fixed, labelled reference set and
the FP32 model's predictions on it; check the live model against both on a schedule; alert when
accuracy or agreement moves by more than a threshold (default 0.5 %).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

import numpy as np

from ailab.engine import Runner
from ailab.quantize import evaluate

DEFAULT_THRESHOLD = 0.005  # 0.5 % of the reference set


class Preprocessed(Runner):
    """A runner with a preprocessing step in front: how a 'harmless' pipeline change reaches the model."""

    def __init__(self, runner: Runner, preprocess: Callable[[dict], dict], name: str | None = None):
        if not callable(preprocess):
            raise TypeError("preprocess must be a function dict -> dict of arrays")
        self.inner, self.preprocess = runner, preprocess
        self.name = name or f"{runner.name}+preprocess"
        self.device, self.precision, self.input_spec = runner.device, runner.precision, runner.input_spec

    def run_all(self, batch):
        return self.inner.run_all(self.preprocess(dict(batch)))


@dataclass
class DriftCheck:
    at: float  # time.time() of the check
    name: str  # the runner checked
    accuracy: float
    agreement: float  # fraction of reference rows predicted as the reference model did
    accuracy_change: float  # accuracy - reference accuracy (fraction; negative = worse)
    alert: bool
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        state = "ALERT " + "; ".join(self.reasons) if self.alert else "ok"
        return (
            f"{self.name}: accuracy {self.accuracy:.2%} ({self.accuracy_change * 100:+.2f} pt), "
            f"agreement {self.agreement:.2%} -> {state}"
        )


class DriftDetector:
    """Fixed reference set + reference predictions; check() compares a runner against both."""

    def __init__(
        self,
        inputs: Mapping[str, np.ndarray],
        labels: np.ndarray,
        reference: Runner,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 64,
    ):
        if not 0 < threshold < 1:
            raise ValueError(f"threshold is a fraction in (0, 1) (0.005 = 0.5 %), got {threshold}")
        if not isinstance(reference, Runner):
            raise TypeError(f"reference must be an ailab.engine Runner, got {type(reference).__name__}")
        # copies: the reference set is fixed; a caller mutating its arrays later must not move it
        self.inputs = {k: np.array(v, copy=True) for k, v in inputs.items()}
        self.labels = np.array(labels, copy=True)
        self.threshold, self.batch_size = threshold, batch_size
        ref = evaluate(reference, self.inputs, self.labels, batch_size)
        self.reference_name, self.reference_preds, self.reference_accuracy = reference.name, ref.preds, ref.accuracy
        self.history: list[DriftCheck] = []

    def check(self, runner: Runner) -> DriftCheck:
        ev = evaluate(runner, self.inputs, self.labels, self.batch_size)
        agreement = float((ev.preds == self.reference_preds).mean())
        change = ev.accuracy - self.reference_accuracy
        reasons = []
        if abs(change) > self.threshold + 1e-9:  # 1e-9: a change of exactly the threshold is not over it
            reasons.append(f"accuracy moved {change * 100:+.2f} pt (> {self.threshold:.1%})")
        if 1 - agreement > self.threshold + 1e-9:
            reasons.append(f"{1 - agreement:.2%} of predictions changed (> {self.threshold:.1%})")
        result = DriftCheck(time.time(), runner.name, ev.accuracy, agreement, change, bool(reasons), reasons)
        self.history.append(result)
        return result

    @property
    def alerts(self) -> list[DriftCheck]:
        return [c for c in self.history if c.alert]
