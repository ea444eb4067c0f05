"""Every held-out row through a runner, with padding trimmed per batch; and the inputs it takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ailab.engine import Runner
from ailab.engine.text import int64_inputs


def text_inputs(tokenizer, texts: Sequence[str], max_length: int = 64) -> dict[str, np.ndarray]:
    """Token ids and masks padded to `max_length` (evaluate() trims the padding per batch)."""
    if not len(texts):
        raise ValueError("text_inputs() got no texts")
    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=max_length, return_tensors="np")
    return int64_inputs(enc)


def batches_of(
    inputs: Mapping[str, np.ndarray], batch_size: int = 32, rows: np.ndarray | None = None, drop_last: bool = False
):
    """Split a dict of (N, ...) arrays into dicts of at most `batch_size` rows (optionally only `rows`).
    drop_last=True keeps only full batches (histogram calibrators need equal shapes)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(next(iter(inputs.values())))
    idx = np.arange(n) if rows is None else np.asarray(rows)
    stop = len(idx) - len(idx) % batch_size if drop_last else len(idx)
    return [{k: np.asarray(v)[idx[i : i + batch_size]] for k, v in inputs.items()} for i in range(0, stop, batch_size)]


@dataclass
class Evaluation:
    preds: np.ndarray  # (N,) argmax of the first output
    outputs: np.ndarray  # (N, ...) the first output (logits)
    features: np.ndarray  # (N, D) the second output if any (an embedding), else the first
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
