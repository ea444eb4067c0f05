"""Lab accuracy_gate: the checks pass the right answers and fail the stub and plausible wrong ones.

DigitsReader.get_next() -> {"input": float32 (n, features)} | None
| question | what the checks try |
|---|---|
| which input varies each field | batch_size, row count, width and dtype each alone (100 x 64 float64, ints, 1 row, a batch larger than the data) |
| boundaries | a short last batch; a batch size that divides the rows; no rows (None at once); None again after None |
| a shape or type the notes never show | integer and float64 data (cast to float32, values unchanged); widths other than 64 |
| order or ties | every row once, in order; rewind() starts over; two readers keep separate cursors |
| errors: type and message | a raise inside get_next() is named with the input that caused it |
| policy: which item | which rows a batch takes: the next batch_size after the cursor |

int8_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5) -> {"passed", "fp32_accuracy", "int8_accuracy", "drop_points"}
| question | what the checks try |
|---|---|
| which input varies each field | each model's accuracy set alone (synthetic predictors); row counts, class counts and label dtypes other than the example's |
| boundaries | a drop exactly at the limit (passes) and one row above it (fails); a negative drop (INT8 better: passes); the default 0.5 and other limits |
| a shape or type the notes never show | all-negative logits (only an argmax reads them right); int8 and int64 labels |
| order or ties | - |
| errors: type and message | no rows, a model that raises, a model returning the wrong number of rows: never passed |
| policy: which item | - |


Each wrong answer is a mistake of a different kind (a wrong field beside right ones, a boundary, a shape the
example does not use, a constant where an argument belongs, the sign of a difference, a swallowed error), and
each must be refused with a message that names what to look at.
"""

import re

import numpy as np
import pytest
import torch
from onnxruntime.quantization import CalibrationDataReader

from ailab import engine, models
from ailab.labs import LabCheckFailed
from ailab.labs import lab_accuracy_gate as lab


# ------------------------------------------------------------------------------------------------- readers
class RightReader(CalibrationDataReader):  # the solution's code
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


class BufferReader(RightReader):  # also right: reuses one buffer (the calibrator consumes each batch at once)
    def get_next(self):
        b = super().get_next()
        if b is None:
            return None
        if not hasattr(self, "buf") or self.buf.shape != b["input"].shape:
            self.buf = np.empty_like(b["input"])
        self.buf[...] = b["input"]
        return {"input": self.buf}


class NeverEnds(RightReader):  # forgets to return None
    def get_next(self):
        return {"input": self.X[: self.batch_size].astype(np.float32)}


class Float64Reader(RightReader):
    def get_next(self):
        b = super().get_next()
        return None if b is None else {"input": b["input"].astype(np.float64)}


class FirstBatchOnly(RightReader):  # yields one batch, then stops: most rows never seen
    def get_next(self):
        if self.position:
            return None
        return super().get_next()


class WrongName(RightReader):
    def get_next(self):
        b = super().get_next()
        return None if b is None else {"x": b["input"]}


class StubReader(RightReader):
    def get_next(self):
        raise NotImplementedError("write it")


class Fixed32(RightReader):  # a constant where the argument belongs
    def get_next(self):
        if self.position >= len(self.X):
            return None
        rows = self.X[self.position : self.position + 32]
        self.position += 32
        return {"input": rows.astype(np.float32)}


class DropsLastPartial(RightReader):  # stops when a full batch no longer fits: the tail is never calibrated
    def get_next(self):
        if self.position + self.batch_size > len(self.X):
            return None
        return super().get_next()


class EmptyLastBatch(RightReader):  # off by one: `>` where `>=` belongs, so a whole number of batches ends empty
    def get_next(self):
        if self.position > len(self.X):
            return None
        rows = self.X[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": rows.astype(np.float32)}


class SkipsARow(RightReader):  # advances one row too far
    def get_next(self):
        b = super().get_next()
        self.position += 1
        return b


class SqueezesOneRow(RightReader):  # a batch of one row becomes 1-D
    def get_next(self):
        b = super().get_next()
        return None if b is None else {"input": np.squeeze(b["input"])}


class Assumes64Columns(RightReader):  # a formula that only fits the digits' width
    def get_next(self):
        b = super().get_next()
        return None if b is None else {"input": b["input"].reshape(-1, 64)}


class Rescales(RightReader):  # "normalises" the intensities: the model was trained on the raw values
    def get_next(self):
        b = super().get_next()
        return None if b is None else {"input": b["input"] / 16}


class WrapsAround(RightReader):  # starts over by itself after None: the calibrator would loop forever on a retry
    def get_next(self):
        b = super().get_next()
        if b is None:
            self.position = 0
        return b


class OwnIterator(RightReader):  # keeps its cursor outside self.position: rewind() no longer works
    def get_next(self):
        if not hasattr(self, "it"):
            self.it = iter(range(0, len(self.X), self.batch_size))
        start = next(self.it, None)
        if start is None:
            return None
        return {"input": self.X[start : start + self.batch_size].astype(np.float32)}


class SharedCursor(RightReader):  # a class attribute as the cursor: two readers step on each other
    cursor = 0

    def __init__(self, X, batch_size=32):
        super().__init__(X, batch_size)
        SharedCursor.cursor = 0

    def rewind(self):
        SharedCursor.cursor = 0

    def get_next(self):
        if SharedCursor.cursor >= len(self.X):
            return None
        rows = self.X[SharedCursor.cursor : SharedCursor.cursor + self.batch_size]
        SharedCursor.cursor += self.batch_size
        return {"input": rows.astype(np.float32)}


# --------------------------------------------------------------------------------------------------- gates
def _acc(predict, X, y):
    return float((predict(X).argmax(1) == y).mean())


def right_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # the solution's code
    fp32_acc = float((np.asarray(fp32_predict(X)).argmax(1) == y).mean())
    int8_acc = float((np.asarray(int8_predict(X)).argmax(1) == y).mean())
    drop = (fp32_acc - int8_acc) * 100
    return {
        "passed": bool(drop <= max_drop_points + 1e-9),
        "fp32_accuracy": fp32_acc,
        "int8_accuracy": int8_acc,
        "drop_points": drop,
    }


def counting_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # also right: counts, raises on no data
    if len(y) == 0:
        raise ValueError("no data")
    f = int((fp32_predict(X).argmax(axis=-1) == y).sum())
    i = int((int8_predict(X).argmax(axis=-1) == y).sum())
    drop = (f - i) * 100 / len(y)
    return {
        "passed": np.bool_(drop <= max_drop_points),
        "fp32_accuracy": f / len(y),
        "int8_accuracy": i / len(y),
        "drop_points": drop,
    }


def agreement_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # baseline = FP32's predictions
    i = _acc(int8_predict, X, y)
    agree = float((fp32_predict(X).argmax(1) == int8_predict(X).argmax(1)).mean())
    drop = (1 - agree) * 100
    return {"passed": drop <= max_drop_points, "fp32_accuracy": agree, "int8_accuracy": i, "drop_points": drop}


def perfect_baseline_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # baseline = 100 %
    i = _acc(int8_predict, X, y)
    drop = (1.0 - i) * 100
    return {"passed": drop <= max_drop_points, "fp32_accuracy": 1.0, "int8_accuracy": i, "drop_points": drop}


def published_baseline_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # a number from a paper
    i = _acc(int8_predict, X, y)
    drop = (0.70 - i) * 100
    return {"passed": drop <= max_drop_points, "fp32_accuracy": 0.70, "int8_accuracy": i, "drop_points": drop}


def fixed_threshold_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # ignores the argument
    return right_gate(fp32_predict, int8_predict, X, y)


def fraction_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # compares a fraction with points
    f, i = _acc(fp32_predict, X, y), _acc(int8_predict, X, y)
    return {"passed": f - i <= max_drop_points, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": f - i}


def stub_gate(*args, **kwargs):
    raise NotImplementedError("write it")


def swapped_fields_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # one field wrong, verdict right
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["fp32_accuracy"], out["int8_accuracy"] = out["int8_accuracy"], out["fp32_accuracy"]
    return out


def copy_paste_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # reports FP32's accuracy for INT8 too
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["int8_accuracy"] = out["fp32_accuracy"]
    return out


def percent_fields_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # accuracies reported in percent
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["fp32_accuracy"] *= 100
    out["int8_accuracy"] *= 100
    return out


def fixed_n_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # divides by the example's 1000 rows
    f = float((fp32_predict(X).argmax(1) == y).sum() / 1000)
    i = float((int8_predict(X).argmax(1) == y).sum() / 1000)
    drop = (f - i) * 100
    return {"passed": drop <= max_drop_points + 1e-9, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


def binary_only_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # class 1 if its logit is positive
    f = float(((fp32_predict(X)[:, 1] > 0).astype(int) == y).mean())
    i = float(((int8_predict(X)[:, 1] > 0).astype(int) == y).mean())
    drop = (f - i) * 100
    return {"passed": drop <= max_drop_points + 1e-9, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


def abs_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # |difference|: a better INT8 is refused
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["drop_points"] = abs(out["drop_points"])
    out["passed"] = bool(out["drop_points"] <= max_drop_points + 1e-9)
    return out


def reversed_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # INT8 minus FP32
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["drop_points"] = -out["drop_points"]
    out["passed"] = bool(out["drop_points"] <= max_drop_points + 1e-9)
    return out


def clipped_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # a better INT8 counts as no drop
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["drop_points"] = max(out["drop_points"], 0.0)
    return out


def strict_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # `<`: a drop at the limit is refused
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["passed"] = bool(out["drop_points"] < max_drop_points)
    return out


def no_epsilon_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # 0.9 - 0.895 > 0.005 in floats
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["passed"] = bool(out["drop_points"] <= max_drop_points)
    return out


def rounding_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # rounds the drop to one decimal first
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["passed"] = bool(round(out["drop_points"], 1) <= max_drop_points)
    return out


def loose_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # an "epsilon" of a tenth of a point
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["passed"] = bool(out["drop_points"] <= max_drop_points + 0.1)
    return out


def default_one_gate(fp32_predict, int8_predict, X, y, max_drop_points=1.0):  # the wrong default
    return right_gate(fp32_predict, int8_predict, X, y, max_drop_points)


def empty_passes_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # max(len, 1): no data -> 0 - 0 -> pass
    n = max(len(y), 1)
    f = float((np.asarray(fp32_predict(X)).argmax(1) == y).sum() / n)
    i = float((np.asarray(int8_predict(X)).argmax(1) == y).sum() / n)
    drop = (f - i) * 100
    return {"passed": drop <= max_drop_points + 1e-9, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


def swallowing_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # an error becomes "no drop"
    try:
        return right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    except Exception:
        return {"passed": True, "fp32_accuracy": 0.0, "int8_accuracy": 0.0, "drop_points": 0.0}


def zip_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # zip() silently truncates to the shorter
    def acc(predict):
        preds = predict(X).argmax(1)
        pairs = list(zip(preds, y))
        return sum(int(p == t) for p, t in pairs) / len(pairs)

    f, i = acc(fp32_predict), acc(int8_predict)
    drop = (f - i) * 100
    return {"passed": drop <= max_drop_points + 1e-9, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


def subset_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # evaluates a fixed 100-row sample
    return right_gate(fp32_predict, int8_predict, X[:100], y[:100], max_drop_points)


def string_verdict_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # "PASS"/"FAIL" instead of a bool
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    out["passed"] = "PASS" if out["passed"] else "FAIL"
    return out


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    tc = models.digits_mlp(epochs=5)
    path = engine.export_onnx(
        tc.model, torch.from_numpy(tc.split.X_train[:4]), tmp_path_factory.mktemp("g") / "d.onnx"
    ).path
    return tc.split, path


def test_right_answers_pass(digits):
    split, path = digits
    lab.check_reader_batches(RightReader)
    lab.check_reader_edges(RightReader)
    lab.check_reader_calibrates(RightReader, path, split.X_train[:256], split.X_test, split.y_test)
    for gate in (right_gate, counting_gate):
        lab.check_gate_baseline(gate)
        lab.check_gate_threshold(gate)
        lab.check_gate_failures(gate)


def test_other_right_reader_passes():
    lab.check_reader_batches(BufferReader)
    lab.check_reader_edges(BufferReader)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (NeverEnds, "never returned None"),
        (Float64Reader, "should be float32"),
        (FirstBatchOnly, "should have 32, 32, 32, 4 rows"),
        (WrongName, r"\{'input': array\}"),
        (StubReader, "not implemented yet"),
        (DropsLastPartial, r"should have 32, 32, 32, 4 rows.*yours have 32, 32, 32$"),
        (SkipsARow, "should have 32, 32, 32, 4 rows"),
        (Rescales, "other values"),
        (WrapsAround, "keep returning None"),
    ],
)
def test_reader_batches_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_reader_batches(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (Fixed32, r"batch_size=1: the batches should have 1, 1, 1, 1, 1 rows"),
        (
            EmptyLastBatch,
            r"96 rows .* batch_size=32: the batches should have 32, 32, 32 rows.*yours have 32, 32, 32, 0",
        ),
        (SqueezesOneRow, r"batch_size=1: each batch should have shape \(rows, 64\).*got shape \(64,\)"),
        (Assumes64Columns, r"45 rows of 13 int64 .*cannot reshape"),
        (OwnIterator, "after rewind"),
        (SharedCursor, "two readers used in turn"),
    ],
)
def test_reader_edges_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_reader_edges(wrong)


def test_calibration_check_rejects_stub(digits):
    split, path = digits
    with pytest.raises(LabCheckFailed):
        lab.check_reader_calibrates(StubReader, path, split.X_train[:256], split.X_test, split.y_test)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (agreement_gate, r"fp32_accuracy should be 0\.7; got 0\.4.*passed should be True.*on different rows"),
        (perfect_baseline_gate, r"fp32_accuracy should be 0\.7; got 1.*not against a perfect score"),
        (published_baseline_gate, r"FP32 right on 900.*fp32_accuracy should be 0\.9; got 0\.7.*5-point drop must fail"),
        (stub_gate, "not implemented yet"),
        (swapped_fields_gate, r"fp32_accuracy should be 0\.9; got 0\.85; int8_accuracy should be 0\.85; got 0\.9"),
        (copy_paste_gate, r"int8_accuracy should be 0\.85; got 0\.9"),
        (percent_fields_gate, "not a percentage"),
        (fixed_n_gate, r"with 250 rows, 10 classes .*fp32_accuracy should be 0\.92; got 0\.23"),
        (binary_only_gate, "fp32_accuracy should be"),
        (clipped_gate, r"with 7 rows, 3 classes .*drop_points should be -14\.2857 \(a better INT8"),
        (abs_gate, r"drop_points should be -14\.2857 \(FP32 minus INT8"),
        (string_verdict_gate, "passed should be True or False"),
        (subset_gate, r"fp32_accuracy should be 0\.7; got 1"),
    ],
)
def test_baseline_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_gate_baseline(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (fixed_threshold_gate, "max_drop_points=2.0 should pass"),
        (fraction_gate, "a drop of 0.6 points with max_drop_points=0.5 should fail"),
        (stub_gate, "not implemented yet"),
        (strict_gate, r"the drop is 0\.5 points; with max_drop_points=0\.5 the gate should pass"),
        (no_epsilon_gate, r"the drop is 0\.5 points; with max_drop_points=0\.5 the gate should pass"),
        (rounding_gate, r"the drop is 0\.54 points.*should fail"),
        (loose_gate, r"the drop is 0\.55 points.*should fail"),
        (abs_gate, r"drop of -3 and passes"),
        (reversed_gate, "should fail"),
        (default_one_gate, "called without max_drop_points"),
    ],
)
def test_threshold_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_gate_threshold(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (empty_passes_gate, "no held-out rows"),
        (swallowing_gate, "int8_predict raised RuntimeError"),
        (zip_gate, "999 rows of logits for 1000 inputs"),
        (stub_gate, "not implemented yet"),
    ],
)
def test_failures_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_gate_failures(wrong)


# --------------------------------------------------------------------------- the differential checks (issue 42)
class ShapeKeyedCache(RightReader):  # state: converts each shape once - another dataset of that shape gets old rows
    converted: dict = {}

    def get_next(self):
        data = ShapeKeyedCache.converted.setdefault(self.X.shape, np.ascontiguousarray(self.X, dtype=np.float32))
        if self.position >= len(data):
            return None
        rows = data[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": rows}


class CleansNaNInPlace(RightReader):  # state: np.nan_to_num(copy=False) writes into the caller's array
    def get_next(self):
        if self.position == 0 and self.X.dtype.kind == "f":
            np.nan_to_num(self.X, copy=False)
        return super().get_next()


class BatchesFromTheEnd(RightReader):  # order: walks the data from its last row back, same batch sizes
    def get_next(self):
        if self.position >= len(self.X):
            return None
        stop = len(self.X) - self.position
        rows = self.X[max(stop - self.batch_size, 0) : stop]
        self.position += self.batch_size
        return {"input": rows.astype(np.float32)}


class HalfPrecision(RightReader):  # units: through float16 "to halve the memory": values lose bits
    def get_next(self):
        b = super().get_next()
        return None if b is None else {"input": b["input"].astype(np.float16).astype(np.float32)}


def classes_from_labels_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # boundary: max(y) + 1 classes
    k = int(np.max(y)) + 1  # a class above every label is never predicted

    def acc(predict):
        return float((np.asarray(predict(X))[:, :k].argmax(1) == y).mean())

    f, i = acc(fp32_predict), acc(int8_predict)
    drop = (f - i) * 100
    return {"passed": bool(drop <= max_drop_points + 1e-9), "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


def zero_means_default_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # boundary: 0 taken as "unset"
    return right_gate(fp32_predict, int8_predict, X, y, max_drop_points or 0.5)


def label_encoded_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # parsing: np.unique re-numbers labels
    _, codes = np.unique(y, return_inverse=True)  # right only when every class appears among the labels
    return right_gate(fp32_predict, int8_predict, X, codes, max_drop_points)


def shuffles_in_place_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # state: reorders the caller's data
    perm = np.random.default_rng(0).permutation(len(y))
    X[:] = X[perm]
    y[:] = y[perm]
    return right_gate(fp32_predict, int8_predict, X, y, max_drop_points)


def relative_drop_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # units: percent of FP32, not points
    out = right_gate(fp32_predict, int8_predict, X, y, max_drop_points)
    f, i = out["fp32_accuracy"], out["int8_accuracy"]
    out["drop_points"] = (f - i) / f * 100 if f else 0.0
    out["passed"] = bool(out["drop_points"] <= max_drop_points + 1e-9)
    return out


def float32_accuracy_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # rounding: means taken in float32
    f = (np.asarray(fp32_predict(X)).argmax(1) == y).mean(dtype=np.float32)
    i = (np.asarray(int8_predict(X)).argmax(1) == y).mean(dtype=np.float32)
    drop = (f - i) * 100
    return {"passed": bool(drop <= max_drop_points + 1e-9), "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


NEW_WRONG_READERS = [ShapeKeyedCache, CleansNaNInPlace, BatchesFromTheEnd, HalfPrecision]
NEW_WRONG_GATES = [
    classes_from_labels_gate,
    zero_means_default_gate,
    label_encoded_gate,
    shuffles_in_place_gate,
    relative_drop_gate,
    float32_accuracy_gate,
]


@pytest.mark.parametrize("reader", [RightReader, BufferReader])
def test_right_readers_agree_with_the_reference(reader):
    lab.check_reader_same_as_reference(reader)


@pytest.mark.parametrize("gate", [right_gate, counting_gate])
def test_right_gates_agree_with_the_reference(gate):
    lab.check_gate_same_as_reference(gate)


DIFFERS = "where the two differ|should be|changed its input|not implemented yet"


@pytest.mark.parametrize(
    "wrong",
    [
        NeverEnds,
        Float64Reader,
        FirstBatchOnly,
        WrongName,
        StubReader,
        DropsLastPartial,
        SkipsARow,
        Rescales,
        WrapsAround,
        Fixed32,
        EmptyLastBatch,
        SqueezesOneRow,
        Assumes64Columns,
        OwnIterator,
        SharedCursor,
        *NEW_WRONG_READERS,
    ],
)
def test_the_reader_differential_check_catches_every_wrong_reader(wrong):
    ShapeKeyedCache.converted.clear()
    with pytest.raises(LabCheckFailed, match=DIFFERS):
        lab.check_reader_same_as_reference(wrong)


# empty_passes_gate, swallowing_gate and zip_gate give the reference's answer wherever the gate can measure (rows,
# models that answer, one row of logits per input): what they get wrong is refusing what cannot be measured, which
# check_gate_failures tries and the differential check leaves alone (raising and passed=False are both right there).
@pytest.mark.parametrize(
    "wrong",
    [
        agreement_gate,
        perfect_baseline_gate,
        published_baseline_gate,
        fixed_threshold_gate,
        fraction_gate,
        stub_gate,
        swapped_fields_gate,
        copy_paste_gate,
        percent_fields_gate,
        fixed_n_gate,
        binary_only_gate,
        abs_gate,
        reversed_gate,
        clipped_gate,
        strict_gate,
        no_epsilon_gate,
        rounding_gate,
        loose_gate,
        default_one_gate,
        subset_gate,
        string_verdict_gate,
        *NEW_WRONG_GATES,
    ],
)
def test_the_gate_differential_check_catches_every_wrong_gate(wrong):
    with pytest.raises(LabCheckFailed, match=DIFFERS):
        lab.check_gate_same_as_reference(wrong)


@pytest.mark.parametrize("wrong", [empty_passes_gate, swallowing_gate, zip_gate])
def test_what_the_gate_differential_check_leaves_to_the_failures_check(wrong):
    lab.check_gate_same_as_reference(wrong)
    with pytest.raises(LabCheckFailed):
        lab.check_gate_failures(wrong)


def test_the_differential_checks_name_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        lab.check_gate_same_as_reference(label_encoded_gate)
    assert "the smallest input found where the two differ" in str(e.value)
    assert re.search(r"accuracy should be [0-9.]+; yours is [0-9.]+", str(e.value))
    with pytest.raises(LabCheckFailed) as e:
        lab.check_gate_same_as_reference(shuffles_in_place_gate)
    assert "your function changed its input `X`" in str(e.value)
    with pytest.raises(LabCheckFailed) as e:
        lab.check_reader_same_as_reference(BatchesFromTheEnd)
    assert re.search(r"at call \d+ \(get_next\(\)\) the reference gives a float32 batch", str(e.value))
