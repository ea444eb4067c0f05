"""Lab accuracy_gate: the checks pass the right answers and fail the stub and plausible wrong ones."""
import numpy as np
import pytest
import torch
from onnxruntime.quantization import CalibrationDataReader

from ailab import engine, models
from ailab.labs import LabCheckFailed
from ailab.labs import lab_accuracy_gate as lab


class RightReader(CalibrationDataReader):
    def __init__(self, X, batch_size=32):
        self.X, self.batch_size, self.position = X, batch_size, 0

    def get_next(self):
        if self.position >= len(self.X):
            return None
        rows = self.X[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return {"input": rows.astype(np.float32)}


class NeverEnds(RightReader):  # forgets to return None
    def get_next(self):
        return {"input": self.X[:self.batch_size].astype(np.float32)}


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


def _acc(predict, X, y):
    return float((predict(X).argmax(1) == y).mean())


def right_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):
    f, i = _acc(fp32_predict, X, y), _acc(int8_predict, X, y)
    drop = (f - i) * 100
    return {"passed": drop <= max_drop_points + 1e-9, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": drop}


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
    out = right_gate(fp32_predict, int8_predict, X, y)
    return out


def fraction_gate(fp32_predict, int8_predict, X, y, max_drop_points=0.5):  # compares a fraction with points
    f, i = _acc(fp32_predict, X, y), _acc(int8_predict, X, y)
    return {"passed": f - i <= max_drop_points, "fp32_accuracy": f, "int8_accuracy": i, "drop_points": f - i}


def stub_gate(*args, **kwargs):
    raise NotImplementedError("write it")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    tc = models.digits_mlp(epochs=5)
    path = engine.export_onnx(tc.model, torch.from_numpy(tc.split.X_train[:4]), tmp_path_factory.mktemp("g") / "d.onnx").path
    return tc.split, path


def test_right_answers_pass(digits):
    split, path = digits
    lab.check_reader_batches(RightReader)
    lab.check_reader_calibrates(RightReader, path, split.X_train[:256], split.X_test, split.y_test)
    lab.check_gate_baseline(right_gate)
    lab.check_gate_threshold(right_gate)


@pytest.mark.parametrize("wrong", [NeverEnds, Float64Reader, FirstBatchOnly, WrongName, StubReader])
def test_reader_check_rejects(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_reader_batches(wrong)


def test_calibration_check_rejects_stub(digits):
    split, path = digits
    with pytest.raises(LabCheckFailed):
        lab.check_reader_calibrates(StubReader, path, split.X_train[:256], split.X_test, split.y_test)


@pytest.mark.parametrize("wrong", [agreement_gate, perfect_baseline_gate, published_baseline_gate, stub_gate])
def test_baseline_check_rejects(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_gate_baseline(wrong)


@pytest.mark.parametrize("wrong", [fixed_threshold_gate, fraction_gate, stub_gate])
def test_threshold_check_rejects(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_gate_threshold(wrong)
