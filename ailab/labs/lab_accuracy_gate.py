"""Lab checks: a calibration reader for static INT8, and the accuracy gate that decides whether it ships.

The learner writes
- `DigitsReader.get_next()`: the next calibration batch as {"input": float32 (n, 64)}, then None;
- `int8_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5) -> dict` with keys
  passed, fp32_accuracy, int8_accuracy, drop_points.

The gate checks use synthetic predictors whose accuracies we set exactly, so a gate that compares against
the wrong baseline (the labels' perfect score, FP32's predictions, a published figure) or ignores the
threshold gives a verdict we can catch.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ailab.labs.core import check, expect

LAB = "lab_accuracy_gate"
KEYS = ("passed", "fp32_accuracy", "int8_accuracy", "drop_points")
N = 1000


def _collect(reader_cls, X, batch_size):
    reader = reader_cls(X, batch_size=batch_size)
    batches = []
    for _ in range(len(X) + 2):
        b = reader.get_next()
        if b is None:
            return reader, batches
        batches.append(b)
    expect(False, f"get_next() never returned None after {len(X) + 2} calls: return None when the data is used up")


@check(LAB, "reader yields every row once, as float32 batches named 'input'")
def check_reader_batches(reader_cls):
    X = np.random.default_rng(0).random((100, 64)).astype(np.float32)
    _, batches = _collect(reader_cls, X, 32)
    expect(len(batches) > 0, "get_next() returned None at once: yield the data first")
    for b in batches:
        expect(isinstance(b, dict) and list(b) == ["input"],
               f"each batch should be a dict {{'input': array}} (the model's input name); got {type(b).__name__} "
               f"{list(b) if isinstance(b, dict) else ''}")
        arr = b["input"]
        expect(isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.ndim == 2 and arr.shape[1] == 64,
               f"each batch should be a float32 array of shape (n, 64); got "
               f"{getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}")
        expect(len(arr) <= 32, f"batch_size=32 but a batch has {len(arr)} rows")
    rows = np.concatenate([b["input"] for b in batches])
    expect(rows.shape == X.shape and np.array_equal(rows, X),
           f"the batches together should be exactly the 100 calibration rows, in order; got {rows.shape[0]} rows"
           + ("" if rows.shape[0] != X.shape[0] else " with different values"))


@check(LAB, "reader calibrates a static INT8 model that keeps accuracy")
def check_reader_calibrates(reader_cls, fp32_path, X_calib, X_test, y_test):
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat, quantize_static

    def accuracy(path):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return float((sess.run(None, {"input": X_test})[0].argmax(1) == y_test).mean())

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "int8.onnx"
        quantize_static(str(fp32_path), str(out), reader_cls(X_calib, batch_size=32), quant_format=QuantFormat.QDQ)
        fp32, int8 = accuracy(fp32_path), accuracy(out)
    expect(fp32 - int8 <= 0.01, f"calibrated with your reader, INT8 accuracy is {int8:.2%} vs FP32 {fp32:.2%}: "
                                "more than 1 point lost. Does the reader give every calibration row?")


def _predictor(correct: np.ndarray, labels: np.ndarray):
    """A predict(X) -> (N, 2) logits that is right exactly where `correct` is True. X holds row indices."""
    preds = np.where(correct, labels, 1 - labels)

    def predict(X):
        idx = np.asarray(X).reshape(len(X), -1)[:, 0].astype(np.int64)
        logits = np.zeros((len(idx), 2), np.float32)
        logits[np.arange(len(idx)), preds[idx]] = 1.0
        return logits

    return predict


def _case(fp32_right: int, int8_right: int, disjoint: bool = False):
    """Data X (row indices), labels y, and predictors right on exactly the given numbers of rows."""
    y = (np.arange(N) % 2).astype(np.int64)
    X = np.arange(N, dtype=np.float32).reshape(-1, 1)
    fp32 = np.arange(N) < fp32_right
    if not disjoint:  # int8 is right on a prefix: it agrees with fp32 as much as it can
        int8 = np.arange(N) < int8_right
    else:  # int8 is right on different rows: same accuracy can mean different predictions
        int8 = (np.arange(N) >= N - int8_right)
    return _predictor(fp32, y), _predictor(int8, y), X, y


def _run(gate, *args, **kwargs) -> dict:
    out = gate(*args, **kwargs)
    expect(isinstance(out, dict) and all(k in out for k in KEYS),
           f"int8_gate should return a dict with keys {KEYS}; got {out!r}")
    return out


@check(LAB, "gate compares with FP32 accuracy on the same data")
def check_gate_baseline(gate):
    fp32, int8, X, y = _case(700, 700, disjoint=True)  # 70 % each, but right on different rows
    out = _run(gate, fp32, int8, X, y)
    expect(abs(out["fp32_accuracy"] - 0.70) < 1e-9,
           f"fp32_accuracy should be FP32's accuracy measured on X, y (0.70 here); got {out['fp32_accuracy']}")
    expect(abs(out["int8_accuracy"] - 0.70) < 1e-9, f"int8_accuracy should be 0.70 here; got {out['int8_accuracy']}")
    expect(out["passed"], "both models are 70 % accurate (on different rows), so the drop is 0 points and the gate "
                          "must pass. Compare accuracies against the labels - not INT8's predictions against FP32's, "
                          "and not against a perfect score.")
    fp32, int8, X, y = _case(900, 850)
    out = _run(gate, fp32, int8, X, y)
    expect(not out["passed"], "FP32 is 90 % and INT8 85 % accurate: a 5-point drop must fail a 0.5-point gate. "
                              "Is the baseline really FP32 measured on the same data?")
    expect(abs(out["drop_points"] - 5.0) < 1e-6, f"drop_points should be 5.0 (percentage points); got {out['drop_points']}")


@check(LAB, "gate applies the threshold it is given")
def check_gate_threshold(gate):
    for fp32_right, int8_right, max_drop, expected in ((900, 896, 0.5, True), (900, 894, 0.5, False),
                                                       (900, 885, 2.0, True), (900, 885, 1.0, False)):
        fp32, int8, X, y = _case(fp32_right, int8_right)
        drop = (fp32_right - int8_right) / N * 100
        out = _run(gate, fp32, int8, X, y, max_drop_points=max_drop)
        expect(bool(out["passed"]) == expected,
               f"a drop of {drop:.1f} points with max_drop_points={max_drop} should "
               f"{'pass' if expected else 'fail'}; your gate says {'pass' if out['passed'] else 'fail'}. "
               "Use max_drop_points, and compare points with points (accuracy difference x 100).")
