"""Independent wrong answers for lab_accuracy_gate, written from labs/2_engine/lab_accuracy_gate.ipynb's contract
alone."""

import numpy as np
from onnxruntime.quantization import CalibrationDataReader


class DigitsReader(CalibrationDataReader):
    """Calibration batches for the digits model: {"input": float32 (n, 64)}, then None."""

    def __init__(self, X, batch_size=32):
        self.X, self.batch_size, self.position = X, batch_size, 0

    def get_next(self):
        if self.position >= len(self.X):
            return None
        rows = self.X[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": np.ascontiguousarray(rows, dtype=np.float32)}

    def rewind(self):
        self.position = 0


def int8_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    fp32_acc = float((np.asarray(fp32_predict(X)).argmax(1) == y).mean())
    int8_acc = float((np.asarray(int8_predict(X)).argmax(1) == y).mean())
    drop = (fp32_acc - int8_acc) * 100
    return {
        "passed": bool(drop <= max_drop_points + 1e-9),
        "fp32_accuracy": fp32_acc,
        "int8_accuracy": int8_acc,
        "drop_points": drop,
    }


class FullBatchesOnly(DigitsReader):
    """Stops when fewer than batch_size rows are left, so the short last batch is never handed out."""

    # differs on: X of 70 rows, batch_size 32 -> right batches of 32, 32, 6; wrong 32, 32 then None

    def get_next(self):
        if self.position + self.batch_size > len(self.X):
            return None
        rows = self.X[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": np.ascontiguousarray(rows, dtype=np.float32)}


class StartsOverWhenDone(DigitsReader):
    """Resets the cursor when it returns None, so the call after the end hands out the first batch again."""

    # differs on: X of 10 rows, batch_size 32 -> right: batch, None, None; wrong: batch, None, batch

    def get_next(self):
        if self.position >= len(self.X):
            self.position = 0
            return None
        rows = self.X[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": np.ascontiguousarray(rows, dtype=np.float32)}


class ReshapesTo64(DigitsReader):
    """Reshapes each batch to (-1, 64), the digits model's width, whatever the number of columns it was given."""

    # differs on: X of shape (4, 32), batch_size 4 -> right one batch (4, 32), wrong (2, 64)

    def get_next(self):
        if self.position >= len(self.X):
            return None
        rows = self.X[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": np.ascontiguousarray(rows, dtype=np.float32).reshape(-1, 64)}


def relative_drop(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    """Measures the drop relative to FP32's accuracy (percent of FP32's score) instead of in percentage points."""
    # differs on: 2000 rows, fp32 right on 1000, int8 on 994 -> right drop 0.3 (passed), wrong 0.6 (not passed)
    fp32_acc = float((np.asarray(fp32_predict(X)).argmax(1) == y).mean())
    int8_acc = float((np.asarray(int8_predict(X)).argmax(1) == y).mean())
    drop = (fp32_acc - int8_acc) / fp32_acc * 100
    return {
        "passed": bool(drop <= max_drop_points + 1e-9),
        "fp32_accuracy": fp32_acc,
        "int8_accuracy": int8_acc,
        "drop_points": drop,
    }


def exact_drop_fails(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    """Passes only a drop strictly below max_drop_points."""
    # differs on: fp32 right on 4 of 4 rows, int8 on 3 of 4, max_drop_points=25 -> right passes, wrong fails
    fp32_acc = float((np.asarray(fp32_predict(X)).argmax(1) == y).mean())
    int8_acc = float((np.asarray(int8_predict(X)).argmax(1) == y).mean())
    drop = (fp32_acc - int8_acc) * 100
    return {
        "passed": bool(drop < max_drop_points),
        "fp32_accuracy": fp32_acc,
        "int8_accuracy": int8_acc,
        "drop_points": drop,
    }


def failed_model_scores_zero(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    """Scores a model whose predict raises as 0 % accurate instead of letting the error through, so a broken FP32
    baseline makes any INT8 model pass."""
    # differs on: fp32_predict raising RuntimeError -> right raises, wrong passed=True (drop <= 0)

    def accuracy(predict):
        try:
            return float((np.asarray(predict(X)).argmax(1) == y).mean())
        except Exception:
            return 0.0

    fp32_acc, int8_acc = accuracy(fp32_predict), accuracy(int8_predict)
    drop = (fp32_acc - int8_acc) * 100
    return {
        "passed": bool(drop <= max_drop_points + 1e-9),
        "fp32_accuracy": fp32_acc,
        "int8_accuracy": int8_acc,
        "drop_points": drop,
    }


def rounds_the_drop(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    """Rounds the drop to one decimal (as it is reported) before comparing it with the limit."""
    # differs on: 10000 rows, fp32 right on 5000, int8 on 4948 (drop 0.52) -> right not passed, wrong 0.5 passed
    fp32_acc = float((np.asarray(fp32_predict(X)).argmax(1) == y).mean())
    int8_acc = float((np.asarray(int8_predict(X)).argmax(1) == y).mean())
    drop = round((fp32_acc - int8_acc) * 100, 1)
    return {
        "passed": bool(drop <= max_drop_points + 1e-9),
        "fp32_accuracy": fp32_acc,
        "int8_accuracy": int8_acc,
        "drop_points": drop,
    }


RIGHT = {"reader_cls": DigitsReader, "gate": int8_gate}  # the checks take them as `reader_cls` and `gate`
WRONG = [
    ("reader_cls", FullBatchesOnly, "boundaries"),
    ("reader_cls", StartsOverWhenDone, "state"),
    ("reader_cls", ReshapesTo64, "misread prose"),
    ("gate", relative_drop, "units/rounding"),
    ("gate", exact_drop_fails, "boundaries"),
    ("gate", failed_model_scores_zero, "error handling"),
    ("gate", rounds_the_drop, "units/rounding"),
]
