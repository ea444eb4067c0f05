"""ailab.drift: a fixed reference set catches an injected normalisation change; noise below threshold does not alert."""

import numpy as np
import pytest

from ailab import engine, models
from ailab.drift import DriftDetector, Preprocessed


@pytest.fixture(scope="module")
def setup():
    tc = models.digits_mlp(hidden=64, epochs=5)
    runner = engine.TorchRunner(tc.model, device="cpu", name="digits-fp32")
    return tc, runner, {"input": tc.split.X_test}, tc.split.y_test


def test_same_model_does_not_alert(setup):
    tc, runner, inputs, y = setup
    det = DriftDetector(inputs, y, runner)
    assert det.reference_accuracy == pytest.approx(tc.test_accuracy)
    c = det.check(runner)
    assert not c.alert and c.agreement == 1.0 and c.accuracy_change == 0.0
    tiny_noise = Preprocessed(runner, lambda b: {"input": b["input"] + np.float32(1e-6)})
    assert not det.check(tiny_noise).alert
    assert len(det.history) == 2 and det.alerts == []


def test_changed_normalisation_alerts(setup):
    _, runner, inputs, y = setup
    det = DriftDetector(inputs, y, runner, threshold=0.005)
    # the pipeline was "cleaned up": pixels now divided by 255 (the MNIST constant) instead of 16
    drifted = Preprocessed(runner, lambda b: {"input": b["input"] * np.float32(16 / 255)}, name="digits-/255")
    c = det.check(drifted)
    assert c.alert and c.accuracy_change < -0.005 and c.agreement < 0.995
    assert any("accuracy moved" in r for r in c.reasons) and any("predictions changed" in r for r in c.reasons)
    assert det.alerts == [c] and "ALERT" in str(c)


def test_reference_set_is_fixed(setup):
    _, runner, inputs, y = setup
    x = {"input": inputs["input"].copy()}
    det = DriftDetector(x, y, runner)
    x["input"][:] = 0  # the caller reuses its buffer; the reference set must not change
    assert not det.check(runner).alert


def test_bad_arguments(setup):
    _, runner, inputs, y = setup
    with pytest.raises(ValueError, match="fraction"):
        DriftDetector(inputs, y, runner, threshold=0.5 * 100)
    with pytest.raises(TypeError, match="Runner"):
        DriftDetector(inputs, y, lambda b: b)
    with pytest.raises(ValueError, match="rows"):
        DriftDetector(inputs, y[:10], runner)
    with pytest.raises(TypeError, match="preprocess"):
        Preprocessed(runner, "x/16")


def test_a_change_of_exactly_the_threshold_does_not_alert(setup):
    _, runner, inputs, y = setup
    n = 200  # 1 row in 200 = 0.5 %
    det = DriftDetector({"input": inputs["input"][:n]}, y[:n], runner, threshold=0.005)

    class FlipOne(engine.Runner):
        name, device, precision, input_spec = "flip-one", "cpu", "fp32", runner.input_spec

        def run_all(self, batch):
            out = runner.run_all(batch)[0].copy()
            hit = np.where((batch["input"] == inputs["input"][0]).all(1))[0]
            out[hit] = -out[hit]  # a different prediction for exactly one reference row
            return [out]

    c = det.check(FlipOne())
    assert c.agreement == pytest.approx(1 - 1 / n) and not c.alert, c
