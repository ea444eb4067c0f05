import time

import numpy as np
import pytest
import torch

from ailab import device, timing


def test_cpu_fallback_and_dtype():
    assert device.pick_device().type in {"cpu", "cuda", "mps"}
    if not torch.cuda.is_available():
        assert device.pick_device().type == "cpu" and device.pick_dtype() == torch.float32
        with pytest.raises(ValueError, match="no CUDA device"):
            device.pick_device("cuda")


def test_require_gpu_fails_loudly_only_when_asked(monkeypatch):
    monkeypatch.delenv(device.REQUIRE_GPU_ENV, raising=False)
    device.require_gpu()
    monkeypatch.setenv(device.REQUIRE_GPU_ENV, "1")
    if torch.cuda.is_available():
        device.require_gpu()
    else:
        with pytest.raises(device.NoGPUError, match="make test-gpu"):
            device.require_gpu()


def test_describe_hardware_names_the_machine():
    hw = device.describe_hardware()
    assert hw.cpu_cores_usable >= 1 and hw.ram_gib > 0
    assert hw.cpu_model in hw.one_line()


def test_latency_stats_match_numpy():
    samples = np.random.default_rng(0).exponential(5.0, 500)
    s = timing.latency_stats(samples)
    assert s.p99_ms == pytest.approx(np.percentile(samples, 99))
    assert s.p50_ms == pytest.approx(np.median(samples)) and s.n == 500


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0]])
def test_latency_stats_refuse_bad_samples(bad):
    with pytest.raises(ValueError):
        timing.latency_stats(bad)


def test_measure_latency_excludes_warmup():
    calls = {"n": 0}

    def cold():
        calls["n"] += 1
        time.sleep(0.05 if calls["n"] <= 2 else 0.001)

    s = timing.measure_latency(cold, iters=10, warmup=3)
    assert calls["n"] == 13 and s.n == 10 and s.max_ms < 25


def test_measure_latency_bad_arguments():
    with pytest.raises(ValueError, match="iters >= 1"):
        timing.measure_latency(lambda: None, iters=0)


def test_interleaved_takes_turns_and_pairs_rounds():
    order = []
    cmp = timing.interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=4, warmup=1)
    assert order == ["a", "b"] + ["a", "b"] * 4  # warm-up of each, then a, b in every round
    assert [len(v) for v in cmp.samples.values()] == [4, 4] and cmp.stats["a"].n == 4


def test_comparison_ratio_is_the_median_of_paired_rounds():
    # round 3 is a burst of load that hits both alike: a paired ratio ignores it, a ratio of means would not
    cmp = timing.Comparison({"slow": [20.0, 20.0, 2000.0, 20.0, 20.0], "fast": [10.0, 10.0, 1000.0, 10.0, 10.0]})
    assert cmp.ratio("slow", "fast") == pytest.approx(2.0)
    assert cmp.ratio("slow", "fast", scale=0.5) == pytest.approx(1.0)
    assert cmp.ratio_spread("slow", "fast") == pytest.approx((2.0, 2.0))


def test_interleaved_refuses_nonsense():
    with pytest.raises(ValueError, match="rounds"):
        timing.interleaved({"a": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="functions"):
        timing.interleaved({}, rounds=3)
