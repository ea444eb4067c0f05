"""ailab.quantize: INT8 models are real (smaller, close to FP32), calibration matters, the gate is exact."""

import numpy as np
import pytest
import torch
from torch import nn

from ailab import engine, models
from ailab import quantize as q


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    tc = models.digits_mlp(hidden=128, epochs=8)
    sp = tc.split
    res = engine.export_onnx(tc.model, torch.from_numpy(sp.X_train[:4]), tmp_path_factory.mktemp("q") / "digits.onnx")
    return tc, res.path, {"input": sp.X_test}, sp.y_test


def test_dynamic_int8_is_smaller_and_agrees(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
    path = engine.export_onnx(model, torch.randn(4, 256), tmp_path / "big.onnx").path
    import logging

    before = logging.getLogger().level
    qpath = q.quantize_dynamic_int8(path)
    from ailab.device import cpu_int8_dot_product

    # 7-bit weights where the CPU has no INT8 dot product (ONNX Runtime's advice: its AVX2 kernel can saturate)
    assert qpath != path and qpath.name.endswith(
        ".int8-dynamic.onnx" if cpu_int8_dot_product() else ".int8-dynamic-7bit.onnx"
    )
    other = q.quantize_dynamic_int8(path, reduce_range=cpu_int8_dot_product())  # the other choice, asked for
    assert other != qpath and other.name.endswith("-7bit.onnx") != qpath.name.endswith("-7bit.onnx")
    fp32, int8 = engine.OnnxRunner(path), engine.OnnxRunner(qpath)
    assert int8.precision == "int8" and fp32.precision == "fp32"
    assert q.model_size_bytes(fp32) / q.model_size_bytes(int8) > 3.0  # 4 bytes -> 1 byte per weight, plus scales
    x = {"input": np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)}
    a, b = fp32.run(x), int8.run(x)
    assert np.abs(a - b).max() > 0  # it really changed the arithmetic
    assert q.mean_cosine(a, b) > 0.99
    assert q.quantize_dynamic_int8(path) == qpath  # reused, not redone
    import logging

    assert logging.getLogger().level == before  # the quantizer's log noise was silenced for the call only


def test_static_int8_calibration_matters(digits, tmp_path):
    tc, path, inputs, y = digits
    sp = tc.split
    base = q.evaluate(engine.OnnxRunner(path), inputs, y)
    assert base.accuracy == pytest.approx(tc.test_accuracy, abs=1e-9)
    good = q.CalibrationReader(q.batches_of({"input": sp.X_train}, 32, drop_last=True))
    bad = q.CalibrationReader(q.batches_of({"input": sp.X_train * 0.3}, 32, drop_last=True))  # darker scans
    acc = {}
    for tag, reader in (("good", good), ("bad", bad)):
        p = q.quantize_static_int8(path, reader, tmp_path / f"{tag}.onnx")
        r = engine.OnnxRunner(p)
        assert r.precision == "int8"
        acc[tag] = q.evaluate(r, inputs, y).accuracy
    assert abs(acc["good"] - base.accuracy) <= 0.01
    assert acc["good"] - acc["bad"] >= 0.01, acc  # unrepresentative calibration costs accuracy


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_methods_and_per_channel(digits, tmp_path, method):
    tc, path, inputs, y = digits
    reader = q.CalibrationReader(q.batches_of({"input": tc.split.X_train[:256]}, 32, drop_last=True))
    p = q.quantize_static_int8(path, reader, tmp_path / f"{method}.onnx", method=method, per_channel=True)
    assert q.evaluate(engine.OnnxRunner(p), inputs, y).accuracy > tc.test_accuracy - 0.03
    uneven = q.CalibrationReader(q.batches_of({"input": tc.split.X_train[:100]}, 32))  # last batch has 4 rows
    with pytest.raises(ValueError, match="same shape"):
        q.quantize_static_int8(path, uneven, tmp_path / "x.onnx", method=method)


def test_calibration_errors_are_clear(digits, tmp_path):
    _, path, _, _ = digits
    with pytest.raises(ValueError, match="calibration set is empty"):
        q.CalibrationReader([])
    with pytest.raises(ValueError, match="calibration set is empty"):
        q.CalibrationReader(q.batches_of({"input": np.zeros((0, 64), np.float32)}, 8))
    wrong = q.CalibrationReader([{"input": np.zeros((8, 64))}])  # float64
    with pytest.raises(TypeError, match=r"float32\[batch, 64\]"):
        q.quantize_static_int8(path, wrong, tmp_path / "w.onnx")
    with pytest.raises(ValueError, match="method"):
        q.quantize_static_int8(path, q.CalibrationReader([{"input": np.zeros((8, 64), np.float32)}]), method="mse")
    with pytest.raises(TypeError, match="CalibrationReader"):
        q.quantize_static_int8(path, [{"input": np.zeros((8, 64), np.float32)}])
    with pytest.raises(FileNotFoundError):
        q.quantize_dynamic_int8(tmp_path / "missing.onnx")


def test_accuracy_gate_boundaries():
    assert q.accuracy_gate(0.90, 0.895).passed  # exactly 0.5 point
    assert not q.accuracy_gate(0.90, 0.894).passed  # 0.6 point
    g = q.accuracy_gate(0.80, 0.81)
    assert g.passed and g.drop_points == pytest.approx(-1.0)
    assert not q.accuracy_gate(0.90, 0.88, max_drop_points=1.0).passed
    assert q.accuracy_gate(0.90, 0.88, max_drop_points=2.5).passed
    with pytest.raises(ValueError, match="fraction"):
        q.accuracy_gate(90.0, 89.0)
    with pytest.raises(ValueError, match="max_drop_points"):
        q.accuracy_gate(0.9, 0.9, -1)


def test_quant_report(digits):
    _, path, inputs, y = digits
    fp32 = engine.OnnxRunner(path)
    int8 = engine.OnnxRunner(q.quantize_dynamic_int8(path))
    rep = q.quant_report(int8, fp32, inputs, y, latency_iters=3, max_seconds=1)
    assert rep.precision == "int8" and rep.size_ratio > 1.5
    assert rep.p50_ms_b1 > 0 and rep.p99_ms_b32 >= rep.p50_ms_b32 and rep.baseline_p50_ms_b32 > 0
    assert rep.speedup_b32 == pytest.approx(rep.baseline_p50_ms_b32 / rep.p50_ms_b32)
    assert rep.passed == (rep.accuracy_drop_points <= 0.5)
    assert rep.accuracy_drop_points == pytest.approx((rep.baseline_accuracy - rep.accuracy) * 100)
    assert 0.95 < rep.agreement <= 1 and rep.embedding_cosine > 0.99
    same = q.quant_report(fp32, fp32, inputs, y, latency_iters=2, max_seconds=1)
    assert same.agreement == 1.0 and same.passed and same.size_ratio == 1.0
    assert same.embedding_cosine == pytest.approx(1.0)
    assert "PASS" in str(same)


def test_evaluate_sorting_restores_order():
    tiny = models.tiny_bert(seed=1)
    clf = models.SentimentClassifier(tiny.model, nn.Linear(tiny.model.config.hidden_size, 2))
    runner = engine.TorchRunner(clf, engine.text_input_spec(), device="cpu")
    texts = ["short", "a much longer sentence with many more words in it", "mid length text", "x y"]
    inputs = q.text_inputs(tiny.tokenizer, texts, 32)
    assert inputs["input_ids"].shape == (4, 32)
    ev = q.evaluate(runner, inputs, np.zeros(4, np.int64), batch_size=3)
    direct = runner.run(inputs)  # one batch, full padding, original order
    np.testing.assert_allclose(ev.outputs, direct, atol=1e-4)
    with pytest.raises(ValueError, match="rows"):
        q.evaluate(runner, inputs, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="no texts"):
        q.text_inputs(tiny.tokenizer, [], 32)


def test_precision_support_and_casts():
    s = q.precision_support("fp16", "cpu")
    assert s.supported and "GPU" in s.note or s.fast
    assert q.precision_support("bf16", "cpu").supported
    with pytest.raises(ValueError, match="unknown precision"):
        q.precision_support("fp8", "cpu")
    with pytest.raises(ValueError, match="INT8"):
        q.cast_runner(nn.Linear(2, 2), "int8", "cpu")
    r = q.cast_runner(nn.Linear(4, 2), "bf16", "cpu")
    assert r.precision == "bf16" and next(r.model.parameters()).dtype == torch.bfloat16
    assert q.model_size_bytes(r) == (4 * 2 + 2) * 2


def test_interleaved_latency_times_each_runner_in_turn():
    order = []

    class Fake(engine.Runner):
        def __init__(self, name):
            self.name, self.device, self.precision, self.input_spec = name, "cpu", "fp32", []

        def run_all(self, batch):
            order.append(self.name)
            return [np.zeros((1, 2), np.float32)]

    stats = q.interleaved_latency({"a": Fake("a"), "b": Fake("b")}, {}, iters=4, warmup=2)
    assert order == ["a", "a", "b", "b"] + ["a", "b"] * 4  # warm-up, then alternating rounds
    assert stats["a"].n == stats["b"].n == 4
