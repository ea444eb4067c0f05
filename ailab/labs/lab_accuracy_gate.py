"""Lab checks: a calibration reader for static INT8, and the accuracy gate that decides whether it ships.

The learner writes
- `DigitsReader.get_next()`: the next calibration batch as {"input": float32 (n, features)}, then None;
- `int8_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5) -> dict` with keys
  passed, fp32_accuracy, int8_accuracy, drop_points.

What each must guarantee, and so what the checks test:

- the reader is a cursor over the rows it was given: every row exactly once, in order, `batch_size` rows a
  batch (the argument, whatever it is) with a short last batch, as a 2-D float32 array under "input" with the
  values unchanged and as many columns as the data has; then None, and None again; `rewind()` (which resets
  `self.position`) starts it over; two readers do not share a cursor; no rows means None at once;
- the gate measures each model's accuracy against the labels on the same data (each field checked on its own,
  for other row counts, class counts and label dtypes than the example); the drop is FP32 minus INT8 in
  percentage points, signed (an INT8 model that is *better* gives a negative drop and passes); `passed` is
  drop <= max_drop_points (the argument, and 0.5 by default), equality included, one row above it not;
  a gate that cannot measure (no rows, a model that raises, a model that returns the wrong number of rows)
  must not pass.

The gate checks use synthetic predictors whose accuracies we set exactly (X holds row indices in its first
column; the logits are all negative, so only an argmax over the classes reads them right).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ailab.labs import differential
from ailab.labs.core import LabCheckFailed, check, expect

LAB = "lab_accuracy_gate"
KEYS = ("passed", "fp32_accuracy", "int8_accuracy", "drop_points")
N = 1000


# ---------------------------------------------------------------------------------------------- the reader
def _data(n: int, width: int = 64, dtype=np.float64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 17, (n, width)).astype(dtype)  # digits are 0..16 intensities
    return (rng.random((n, width)) * 16).astype(dtype)


def _next(reader, what: str):
    """reader.get_next(), with the input named when the learner's code raises."""
    try:
        return reader.get_next()
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything
        expect(False, f"{what}: get_next() raised {type(e).__name__}: {e}")


def _collect(reader, what: str, limit: int) -> list[np.ndarray]:
    """Call get_next() until None; return copies of the batches (a reader may reuse one buffer)."""
    batches = []
    for _ in range(limit):
        b = _next(reader, what)
        if b is None:
            return batches
        expect(
            isinstance(b, dict) and list(b) == ["input"],
            f"{what}: each batch should be a dict {{'input': array}} (the model's input name, and nothing else); "
            f"got {type(b).__name__} {list(b) if isinstance(b, dict) else ''}",
        )
        arr = b["input"]
        expect(isinstance(arr, np.ndarray), f"{what}: batch['input'] should be a NumPy array; got {type(arr).__name__}")
        batches.append(np.array(arr, copy=True))
    expect(False, f"{what}: get_next() never returned None after {limit} calls: return None when the data is used up")


def _expect_batches(batches: list[np.ndarray], X: np.ndarray, batch_size: int, what: str) -> None:
    n, width = X.shape
    for arr in batches:
        expect(
            arr.dtype == np.float32,
            f"{what}: each batch should be float32 (ONNX Runtime refuses other types); got {arr.dtype}",
        )
        expect(
            arr.ndim == 2 and arr.shape[1] == width,
            f"{what}: each batch should have shape (rows, {width}) - 2-D, as many columns as the data; "
            f"got shape {arr.shape}",
        )
    sizes = [len(a) for a in batches]
    want = [min(batch_size, n - start) for start in range(0, n, batch_size)]
    expect(
        sizes == want,
        f"{what}: the batches should have {_sizes(want)} rows (batch_size={batch_size}, then what is left); "
        f"yours have {_sizes(sizes)}",
    )
    rows = np.concatenate(batches) if batches else np.zeros((0, width), np.float32)
    expected = X.astype(np.float32)
    if not np.array_equal(rows, expected):
        same_rows = sorted(map(bytes, rows)) == sorted(map(bytes, expected))
        expect(
            False,
            f"{what}: the batches together should be exactly the calibration rows, in order, with their "
            "values unchanged (only cast to float32); "
            + ("yours hold the same rows in another order" if same_rows else "yours hold other values"),
        )


def _sizes(sizes: list[int]) -> str:
    if not sizes:
        return "no batches (None at once)"
    return ", ".join(map(str, sizes[:6])) + (f", ... ({len(sizes)} batches)" if len(sizes) > 6 else "")


@check(LAB, "reader yields every row once, as float32 batches named 'input'")
def check_reader_batches(reader_cls):
    X = _data(100)  # float64, like data arriving from elsewhere
    what = "with 100 rows and batch_size=32"
    reader = reader_cls(X, batch_size=32)
    batches = _collect(reader, what, 104)
    expect(len(batches) > 0, f"{what}: get_next() returned None at once: yield the data first")
    _expect_batches(batches, X, 32, what)
    for _ in range(2):
        expect(
            _next(reader, what) is None,
            f"{what}: after returning None, get_next() should keep returning None "
            "(the data is used up) until rewind() is called",
        )


@check(LAB, "reader handles any batch size, row count and width; rewind() starts over")
def check_reader_edges(reader_cls):
    cases = (  # (rows, width, dtype, batch_size): boundaries and shapes the example does not use
        (96, 64, np.float32, 32),  # a whole number of batches: no empty batch at the end
        (5, 64, np.float64, 1),  # batches of one row stay 2-D
        (1, 64, np.float32, 32),  # a single row
        (10, 64, np.float32, 100),  # batch_size larger than the data
        (45, 13, np.int64, 8),  # 13 features, integer intensities
        (0, 64, np.float32, 32),  # no rows at all
    )
    for rows, width, dtype, batch_size in cases:
        X = _data(rows, width, dtype, seed=rows)
        what = (
            f"with {rows} row{'s' if rows != 1 else ''} of {width} {np.dtype(dtype).name} and batch_size={batch_size}"
        )
        reader = reader_cls(X, batch_size=batch_size)
        batches = _collect(reader, what, rows + 3)
        _expect_batches(batches, X, batch_size, what)
        expect(_next(reader, what) is None, f"{what}: after returning None, get_next() should keep returning None")
    X = _data(40, seed=1)
    reader = reader_cls(X, batch_size=16)
    _collect(reader, "with 40 rows", 43)
    reader.rewind()
    again = _collect(reader, "after rewind()", 43)
    expect(
        len(again) > 0,
        "after rewind(), get_next() should start again from the first row; it returned None. "
        "rewind() resets self.position: keep your cursor there",
    )
    _expect_batches(again, X, 16, "after rewind(), with 40 rows and batch_size=16")
    A, B = _data(30, seed=2), _data(20, seed=3)
    ra, rb = reader_cls(A, batch_size=10), reader_cls(B, batch_size=10)
    got_a, got_b = [], []
    for _ in range(6):  # interleave two readers: each must follow its own data with its own cursor
        for r, got in ((ra, got_a), (rb, got_b)):
            b = _next(r, "two readers used in turn")
            if b is not None:
                got.append(np.array(b["input"], copy=True))
    _expect_batches(got_a, A, 10, "two readers used in turn, the first (30 rows)")
    _expect_batches(got_b, B, 10, "two readers used in turn, the second (20 rows)")


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
    expect(
        fp32 - int8 <= 0.01,
        f"calibrated with your reader, INT8 accuracy is {int8:.2%} vs FP32 {fp32:.2%}: "
        "more than 1 point lost. Does the reader give every calibration row?",
    )


# ------------------------------------------------------------------------------------------------ the gate
def _predictor(correct: np.ndarray, labels: np.ndarray, classes: int, seed: int):
    """predict(X) -> (len(X), classes) logits, right exactly where `correct` is True. X[:, 0] holds row indices.

    Every logit is negative, so only the argmax over the classes gives the predicted class."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    wrong = (labels + 1 + rng.integers(0, max(classes - 1, 1), n)) % classes
    preds = np.where(correct, labels, wrong)
    logits = (rng.normal(size=(n, classes)) - 10).astype(np.float32)
    logits[np.arange(n), preds] = logits.max(1) + 1.0

    def predict(X):
        X = np.asarray(X)
        idx = (X[:, 0] if X.ndim == 2 else X).astype(np.int64)
        return logits[idx].copy()

    return predict


class _Case:
    """Data X (row indices in column 0), labels y and two predictors right on exactly the given rows."""

    def __init__(
        self,
        fp32_right: int,
        int8_right: int,
        n: int = N,
        classes: int = 2,
        disjoint: bool = False,
        width: int = 1,
        label_dtype=np.int64,
        seed: int = 0,
    ):
        rng = np.random.default_rng(seed)
        self.n, self.classes, self.fp32_right, self.int8_right = n, classes, fp32_right, int8_right
        self.y = (np.arange(n) % classes).astype(label_dtype)
        self.X = np.concatenate(
            [np.arange(n, dtype=np.float32).reshape(-1, 1), rng.random((n, width - 1)).astype(np.float32)], axis=1
        )
        rows = np.arange(n)
        fp32 = rows < fp32_right
        int8 = rows >= n - int8_right if disjoint else rows < int8_right  # disjoint: right on other rows
        self.fp32 = _predictor(fp32, self.y.astype(np.int64), classes, seed + 1)
        self.int8 = _predictor(int8, self.y.astype(np.int64), classes, seed + 2)
        self.fp32_acc, self.int8_acc = fp32_right / n, int8_right / n
        self.drop = (fp32_right - int8_right) / n * 100

    def describe(self) -> str:
        return (
            f"with {self.n} row{'s' if self.n != 1 else ''}, {self.classes} classes "
            f"(FP32 right on {self.fp32_right}, INT8 on {self.int8_right})"
        )


def _run(gate, case: _Case, *args, **kwargs) -> dict:
    out = gate(case.fp32, case.int8, case.X, case.y, *args, **kwargs)
    expect(
        isinstance(out, dict) and all(k in out for k in KEYS),
        f"int8_gate should return a dict with keys {KEYS}; got {out!r}",
    )
    return out


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _expect_fields(out: dict, case: _Case, max_drop: float, advice: str = "") -> None:
    """Each field on its own: every wrong one is named, with what was expected and what came back."""
    wrong = []
    for key, want in (("fp32_accuracy", case.fp32_acc), ("int8_accuracy", case.int8_acc)):
        got = out[key]
        if not _is_number(got):
            wrong.append(f"{key} should be a float, got {got!r}")
        elif abs(float(got) - want) > 1e-9:
            note = " - a fraction in [0, 1], not a percentage" if want and abs(float(got) - 100 * want) < 1e-6 else ""
            wrong.append(f"{key} should be {want:.6g}{note}; got {float(got):.6g}")
    got = out["drop_points"]
    if not _is_number(got):
        wrong.append(f"drop_points should be a float, got {got!r}")
    elif abs(float(got) - case.drop) > 1e-6:
        note = ""
        if case.drop and abs(float(got) + case.drop) < 1e-6:
            note = " (FP32 minus INT8: negative when INT8 is better - keep the sign)"
        elif case.drop < 0 and abs(float(got)) < 1e-9:
            note = " (a better INT8 model is a negative drop, not 0)"
        elif case.drop and abs(float(got) - case.drop / 100) < 1e-8:
            note = " (percentage points: the accuracy difference x 100)"
        wrong.append(f"drop_points should be {case.drop:.6g}{note}; got {float(got):.6g}")
    want_pass = case.drop <= max_drop + 1e-9
    got = out["passed"]
    if isinstance(got, (bool, np.bool_)) and bool(got) == want_pass:
        advice = ""  # the advice explains a wrong verdict
    if not isinstance(got, (bool, np.bool_)):
        wrong.append(f"passed should be True or False, got {got!r}")
    elif bool(got) != want_pass:
        wrong.append(
            f"passed should be {want_pass} (a drop of {case.drop:.6g} points, max_drop_points={max_drop}); "
            f"got {bool(got)}"
        )
    expect(not wrong, f"{case.describe()}: " + "; ".join(wrong) + (f". {advice}" if advice else ""))


@check(LAB, "gate compares with FP32 accuracy on the same data")
def check_gate_baseline(gate):
    case = _Case(700, 700, disjoint=True)  # 70 % each, but right on different rows
    _expect_fields(
        _run(gate, case),
        case,
        0.5,
        advice="Both models are 70 % accurate, on different rows, so the drop is 0 points and the gate "
        "must pass. Measure each model's accuracy against the labels y on the same X - not INT8's "
        "predictions against FP32's, and not against a perfect score",
    )
    case = _Case(900, 850)
    _expect_fields(
        _run(gate, case),
        case,
        0.5,
        advice="FP32 is 90 % and INT8 85 % accurate: a 5-point drop must fail a 0.5-point gate. Is the "
        "baseline really FP32 measured on the same data?",
    )
    for case in (
        _Case(230, 221, n=250, classes=10, width=64, seed=3),  # digits-like: 10 classes, 64 features
        _Case(5, 6, n=7, classes=3, label_dtype=np.int32, seed=4),  # 3 classes, int32 labels, INT8 better
        _Case(1, 0, n=1, classes=10, seed=5),  # a single row
        _Case(3, 0, n=4, classes=2, seed=6),  # INT8 never right
        _Case(1460, 1460, n=1600, classes=4, disjoint=True, seed=7),
    ):  # same accuracy, different rows
        _expect_fields(_run(gate, case), case, 0.5)


@check(LAB, "gate applies the threshold it is given")
def check_gate_threshold(gate):
    for fp32_right, int8_right, max_drop, expected in (
        (900, 896, 0.5, True),
        (900, 894, 0.5, False),
        (900, 885, 2.0, True),
        (900, 885, 1.0, False),
    ):
        case = _Case(fp32_right, int8_right)
        out = _run(gate, case, max_drop_points=max_drop)
        expect(
            bool(out["passed"]) == expected,
            f"a drop of {case.drop:.1f} points with max_drop_points={max_drop} should "
            f"{'pass' if expected else 'fail'}; your gate says {'pass' if out['passed'] else 'fail'}. "
            "Use max_drop_points, and compare points with points (accuracy difference x 100).",
        )
    for fp32_right, int8_right, n, max_drop, why in (
        (900, 895, 1000, 0.5, "a drop exactly at the limit passes; in floats, 0.9 - 0.895 is not exactly 0.005"),
        (900, 880, 1000, 2.0, "a drop exactly at the limit passes"),
        (900, 879, 1000, 2.0, "one row more than the limit fails"),
        (900, 900, 1000, 0.0, "with max_drop_points=0, no drop at all passes"),
        (900, 899, 1000, 0.0, "with max_drop_points=0, any drop fails"),
        (1800, 1789, 2000, 0.5, "0.55 points is above 0.5: do not round the drop, or widen the limit"),
        (4500, 4473, 5000, 0.5, "0.54 points is above 0.5: do not round the drop"),
        (900, 600, 1000, 50.0, "a generous limit lets a 30-point drop through"),
        (900, 300, 1000, 50.0, "60 points is above a 50-point limit"),
        (850, 880, 1000, 0.5, "INT8 3 points *better* than FP32 is a drop of -3 and passes"),
    ):
        case = _Case(fp32_right, int8_right, n=n, classes=10, seed=n + int8_right)
        out = _run(gate, case, max_drop_points=max_drop)
        want = case.drop <= max_drop + 1e-9
        expect(
            bool(out["passed"]) == want,
            f"{case.describe()}: the drop is {case.drop:.6g} points; with max_drop_points={max_drop} the gate should "
            f"{'pass' if want else 'fail'}, yours says {'pass' if out['passed'] else 'fail'} ({why})",
        )
        _expect_fields(out, case, max_drop)
    for int8_right, want in ((895, True), (894, False)):  # the default is 0.5 points
        case = _Case(900, int8_right, classes=3, seed=int8_right)
        out = _run(gate, case)
        expect(
            bool(out["passed"]) == want,
            f"called without max_drop_points, a drop of {case.drop:.1f} points should "
            f"{'pass' if want else 'fail'} (the default limit is 0.5); yours says "
            f"{'pass' if out['passed'] else 'fail'}",
        )
    case = _Case(900, 885, classes=2, seed=9)
    out = _run(gate, case, 2.0)  # the limit given positionally
    expect(
        bool(out["passed"]),
        "int8_gate(fp32, int8, X, y, 2.0): a 1.5-point drop should pass a 2-point limit; yours says fail",
    )


class _ModelError(RuntimeError):
    pass


def _raises(X):
    raise _ModelError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code (a broken model)")


def _verdict(gate, fp32, int8, X, y):
    """('raised', exc) or ('returned', out)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            out = gate(fp32, int8, X, y, max_drop_points=0.5)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - raising is an acceptable answer here
            return "raised", e
    return "returned", out


def _refused(kind: str, out) -> bool:
    """Raising, or a dict whose verdict is an explicit False."""
    if kind == "raised":
        return True
    return isinstance(out, dict) and isinstance(out.get("passed"), (bool, np.bool_)) and not out["passed"]


@check(LAB, "gate does not pass what it could not measure")
def check_gate_failures(gate):
    case = _Case(900, 900, classes=3)
    _expect_fields(_run(gate, case), case, 0.5)  # it measures when it can: refusing everything is no gate
    empty_X, empty_y = case.X[:0], case.y[:0]
    kind, out = _verdict(gate, case.fp32, case.int8, empty_X, empty_y)
    expect(
        _refused(kind, out),
        f"with no held-out rows (X of shape {empty_X.shape}) nothing was measured, yet your gate returned {out!r}: "
        "an empty evaluation set must not ship a model (raise, or return passed=False)",
    )
    for who, fp32, int8 in (("int8_predict", case.fp32, _raises), ("fp32_predict", _raises, case.int8)):
        kind, out = _verdict(gate, fp32, int8, case.X, case.y)
        expect(
            _refused(kind, out),
            f"{who} raised RuntimeError (a broken model) and your gate returned {out!r}: do not swallow a "
            "model's errors - let them propagate (or fail the gate)",
        )

    def short(X):  # one row missing: a model whose output does not line up with the labels
        return case.int8(X)[:-1]

    kind, out = _verdict(gate, case.fp32, short, case.X, case.y)
    expect(
        _refused(kind, out),
        f"int8_predict returned {len(case.X) - 1} rows of logits for {len(case.X)} inputs, and your gate returned "
        f"{out!r}: every input needs its own prediction, compared with its own label",
    )


# --------------------------------------------------------------------------- the differential checks (issue 42)
class _ReferenceReader:
    """The contract's reader: a cursor over the rows, batch_size at a time, as float32 under "input"."""

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


def _reader_stories():
    """Hypothesis: (datasets, calls). One or two readers, each on its own (X, batch_size); calls are
    ("next", i) or ("rewind", i), in any order - rewind() at the start, mid-way and after the end included."""
    from hypothesis import strategies as st

    @st.composite
    def dataset(d):
        n = d(st.one_of(st.sampled_from([0, 1, 2, 32, 33]), st.integers(0, 40)))
        width = d(st.sampled_from([1, 2, 13, 64]))
        dtype = d(st.sampled_from(["float64", "float32", "float16", "int64", "int32", "uint8"]))
        if dtype.startswith("float"):
            one = st.one_of(
                st.sampled_from([0.0, 16.0, 0.5, -1.0, math.nan, math.inf]), st.floats(0, 16, width=int(dtype[5:]))
            )
        else:
            high = {"uint8": 255, "int32": 2**31 - 1}.get(dtype, 2**31 + 7)  # int64: beyond 2**31 too
            one = st.one_of(st.integers(0, 16), st.integers(0, high))
        seed = d(st.integers(0, 2**32 - 1))
        special = d(st.lists(one, max_size=6))  # a few drawn values, spread over a seeded array
        X = (np.random.default_rng(seed).random((n, width)) * 16).astype(dtype)
        for k, v in enumerate(special):
            if X.size:
                X.flat[(k * 7919) % X.size] = v
        if d(st.booleans()):
            X = np.asfortranarray(X)
        edges = [1, max(n, 1), max(n - 1, 1), n + 1]
        batch_size = d(st.one_of(st.sampled_from(edges), st.integers(1, max(n, 1) + 2)))
        if d(st.booleans()):
            batch_size = np.int64(batch_size)  # a batch size read from a NumPy array or a config
        return X, batch_size

    @st.composite
    def story(d):
        datasets = tuple(d(st.lists(dataset(), min_size=1, max_size=2)))
        longest = max(-(-len(X) // int(b)) for X, b in datasets)
        op = st.tuples(st.sampled_from(["next"] * 5 + ["rewind"]), st.integers(0, len(datasets) - 1))
        calls = d(st.lists(op, max_size=len(datasets) * (longest + 3) + 2))
        # then every reader to its end, and one more next(): the None after the end is part of the contract
        calls += [("next", i) for i in range(len(datasets)) for _ in range(longest + 2)]
        return datasets, tuple(calls)

    return story()


def _reader_player(reader_cls):
    def play(datasets, calls):
        readers = [reader_cls(X, batch_size=b) for X, b in datasets]
        seen = []
        for op, i in calls:
            if op == "rewind":
                readers[i].rewind()
                seen.append(("rewind", i))
                continue
            try:
                b = readers[i].get_next()
            except (NotImplementedError, LabCheckFailed):
                raise
            except Exception as e:  # noqa: BLE001 - the learner's code may raise anything; it ends the story
                seen.append(("raised", i, f"{type(e).__name__}: {e}"))
                break
            if b is None:
                seen.append(("none", i))
            elif isinstance(b, dict) and list(b) == ["input"] and isinstance(b["input"], np.ndarray):
                seen.append(("batch", i, np.array(b["input"], copy=True)))
            else:
                seen.append(("other", i, differential.short(b)))
        return seen

    return play


def _say_seen(s) -> str:
    if s[0] == "none":
        return "None"
    if s[0] == "batch":
        a = s[2]
        return f"a {a.dtype} batch of shape {a.shape} {differential.short(a.tolist())}"
    if s[0] == "raised":
        return f"an error, {s[2]}"
    if s[0] == "other":
        return f"{s[2]} (not {{'input': array}})"
    return "rewind()"


def _same_batches(mine: list, ref: list) -> str | None:
    for k, (m, r) in enumerate(zip(mine, ref), 1):
        if m[0] == r[0] == "batch" and m[1] == r[1]:
            a, b = m[2], r[2]
            if a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True):
                continue
        elif m[:2] == r[:2]:
            continue
        which = f"reader {r[1] + 1}'s " if len({s[1] for s in ref}) > 1 else ""
        return f"at call {k} ({which}get_next()) the reference gives {_say_seen(r)}; yours gives {_say_seen(m)}"
    if len(mine) != len(ref):  # yours stopped early: it raised
        k = len(mine)
        return f"at call {k} yours {_say_seen(mine[-1])}; the reference gives {_say_seen(ref[k - 1])}"
    return None


def _say_reader_story(datasets, calls) -> str:
    data = "; ".join(
        f"reader {i + 1}: {len(X)} x {X.shape[1]} {X.dtype}{' (Fortran order)' if not X.flags.c_contiguous and X.size > 1 else ''}"
        f" {differential.short(X.tolist())}, batch_size={b!r}"
        for i, (X, b) in enumerate(datasets)
    )
    said = [f"{op}()" if len(datasets) == 1 else f"{op}({i + 1})" for op, i in calls]
    return f"{data}; the calls in turn: {', '.join(said)}"


@check(LAB, "reader gives what the reference gives for any data, batch size and order of calls")
def check_reader_same_as_reference(reader_cls):
    differential.same_as_reference(
        _reader_player(reader_cls),
        _reader_player(_ReferenceReader),
        _reader_stories(),
        describe=_say_reader_story,
        compare=_same_batches,
        arg_names=("X (each reader's data, with its batch_size)", "calls"),
        examples=150,
    )


def _reference_int8_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    """The contract's gate: each model's accuracy against y; the drop FP32 minus INT8 in points; drop <= limit."""
    y = np.asarray(y)
    if len(y) == 0:
        raise ValueError("no held-out rows: nothing to measure")
    counts = []
    for predict in (fp32_predict, int8_predict):
        logits = np.asarray(predict(X))
        if logits.ndim != 2 or len(logits) != len(y):
            raise ValueError(f"{logits.shape} logits for {len(y)} labels")
        counts.append(int((logits.argmax(1) == y).sum()))
    fp32, int8 = (c / len(y) for c in counts)
    drop = (counts[0] - counts[1]) * 100 / len(y)
    return {
        "passed": bool(drop <= max_drop_points + 1e-9),
        "fp32_accuracy": fp32,
        "int8_accuracy": int8,
        "drop_points": drop,
    }


def _predict_from(logits: np.ndarray, right: np.ndarray, name: str):
    def predict(X):
        X = np.asarray(X)
        idx = (X[:, 0] if X.ndim == 2 else X).astype(np.int64)
        return logits[idx].copy()

    predict.__name__ = name
    predict.said = f"{name} right on {int(right.sum())} of {len(right)} rows" + (
        f" (rows {np.flatnonzero(right).tolist()})" if len(right) <= 12 else ""
    )
    return predict


def _predictors(labels: np.ndarray, right: list, classes: int, rng, logit_dtype) -> list:
    predictors = []
    for name, ok in zip(("fp32_predict", "int8_predict"), right):
        wrong = (labels + 1 + rng.integers(0, max(classes - 1, 1), len(labels))) % classes
        preds = np.where(ok, labels, wrong)
        logits = rng.normal(size=(len(labels), classes)) - 10
        logits[np.arange(len(labels)), preds] = logits.max(1) + 1.0
        predictors.append(_predict_from(logits.astype(logit_dtype), preds == labels, name))
    return predictors


def _gate_edge(n: int, classes: int, k_fp32: int, k_int8: int, limit: tuple) -> tuple:
    """The contract's corners, as the old checks build them: FP32 right on its first k_fp32 rows, INT8 on k_int8."""
    labels = np.arange(n) % classes
    rows = np.arange(n)
    fp32, int8 = _predictors(labels, [rows < k_fp32, rows < k_int8], classes, np.random.default_rng(n), np.float32)
    return fp32, int8, rows.reshape(-1, 1).astype(np.float32), labels, limit


_GATE_EDGES = (
    (1000, 2, 900, 895, ("default",)),  # a drop of exactly the default 0.5 points passes (in floats, 0.9 - 0.895)
    (1000, 10, 900, 894, ("default",)),  # 0.6 points fails the default
    (7, 3, 5, 6, ("keyword", 0.0)),  # INT8 better: a negative drop passes even a limit of 0
    (1000, 2, 900, 899, ("keyword", 0)),  # a limit of 0 (an int) is a limit: 0.1 points fails it
)


def _gates():
    """Hypothesis: (fp32_predict, int8_predict, X, y, limit), the limit ("default",) or (how, value)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        n = d(st.one_of(st.sampled_from([1, 2, 3, 200, 2000]), st.integers(1, 300)))
        classes = d(st.one_of(st.sampled_from([1, 2, 10]), st.integers(1, 12)))
        rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
        labels = rng.integers(0, classes, n)  # a class may be missing from the labels, even the last one
        right = []
        k_fp32 = d(st.integers(0, n))
        near = st.integers(-2, 3).map(lambda step: min(max(k_fp32 - step, 0), n))  # drops near the limits
        for k in (k_fp32, d(st.one_of(near, st.integers(0, n)))):
            mode = d(st.sampled_from(["first", "last", "random"]))
            rows = np.arange(n) < k if mode == "first" else (np.arange(n) >= n - k if mode == "last" else None)
            right.append(rows if rows is not None else np.isin(np.arange(n), rng.permutation(n)[:k]))
        predictors = _predictors(labels, right, classes, rng, d(st.sampled_from([np.float32, np.float64])))
        order = rng.permutation(n) if d(st.booleans()) else np.arange(n)  # rows in any order
        width = d(st.sampled_from([1, 2, 64]))
        X = np.concatenate([order.reshape(-1, 1), rng.random((n, width - 1))], axis=1)
        X = X.astype(d(st.sampled_from([np.float32, np.float64])))
        y = labels[order].astype(d(st.sampled_from([np.int64, np.int32, np.int16, np.uint8, np.int8])))
        drop_rows = int((predictors[0](X).argmax(1) == y).sum()) - int((predictors[1](X).argmax(1) == y).sum())
        at = drop_rows * 100 / n  # the drop itself: exactly at the limit
        value = d(
            st.sampled_from(
                [at, at, (drop_rows - 1) * 100 / n, (drop_rows + 0.5) * 100 / n, at - 0.05, 0, 0.0, 0.5, 1, 2.0, 100.0]
            )
        )
        if value < 0:
            value = 0.0  # a negative limit is left out: the contract does not say what it means
        how = d(st.sampled_from(["default", "keyword", "positional"]))
        if how != "default" and d(st.booleans()):
            value = np.float64(value)
        return predictors[0], predictors[1], X, y, ("default",) if how == "default" else (how, value)

    return draw()


def _gate_player(gate):
    def play(fp32_predict, int8_predict, X, y, limit):
        if limit[0] == "default":
            return gate(fp32_predict, int8_predict, X, y)
        if limit[0] == "positional":
            return gate(fp32_predict, int8_predict, X, y, limit[1])
        return gate(fp32_predict, int8_predict, X, y, max_drop_points=limit[1])

    return play


def _say_gate_input(fp32_predict, int8_predict, X, y, limit) -> str:
    call = {
        "default": "called without max_drop_points",
        "keyword": f"max_drop_points={limit[-1]!r}",
        "positional": f"the limit {limit[-1]!r} given positionally",
    }[limit[0]]
    return (
        f"{len(y)} row{'s' if len(y) != 1 else ''} (X {X.shape} {X.dtype}, its first column the row index "
        f"{differential.short(X[:, 0].astype(int).tolist())}), y {y.dtype} {differential.short(y.tolist())}, "
        f"{getattr(fp32_predict, 'said', 'fp32_predict')}, {getattr(int8_predict, 'said', 'int8_predict')}, {call}"
    )


def _same_verdict(mine, ref) -> str | None:
    if not isinstance(mine, dict) or not all(k in mine for k in KEYS):
        return f"int8_gate should return a dict with keys {KEYS}; got {differential.short(mine)}"
    wrong = []
    for key in ("fp32_accuracy", "int8_accuracy", "drop_points"):
        if not _is_number(mine[key]):
            wrong.append(f"{key} should be a float like {ref[key]!r}, got {differential.short(mine[key])}")
        elif abs(float(mine[key]) - ref[key]) > 1e-9 or math.isnan(float(mine[key])):
            wrong.append(f"{key} should be {ref[key]:.10g}; yours is {float(mine[key]):.10g}")
    got = mine["passed"]
    if not isinstance(got, (bool, np.bool_)):
        wrong.append(f"passed should be True or False, got {differential.short(got)}")
    elif bool(got) != ref["passed"]:
        wrong.append(
            f"passed should be {ref['passed']} (a drop of {ref['drop_points']:.10g} points); yours is {bool(got)}"
        )
    return "; ".join(wrong) or None


@check(LAB, "gate gives the reference's verdict and numbers on any rows, classes, labels and limit")
def check_gate_same_as_reference(gate):
    differential.same_as_reference(
        _gate_player(gate),
        _gate_player(_reference_int8_gate),
        _gates(),
        describe=_say_gate_input,
        compare=_same_verdict,
        arg_names=("fp32_predict", "int8_predict", "X", "y", "max_drop_points"),
        edges=[_gate_edge(*e) for e in _GATE_EDGES],
        examples=200,
    )
