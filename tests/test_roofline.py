"""ailab.roofline: the roofline arithmetic, FLOP counts checked against torch's FlopCounterMode,
and the microbenchmarks returning sane, positive figures."""

import pytest

from ailab import roofline


def test_roofline_is_min_of_roof_and_slope():
    assert roofline.roofline(10, 100, 1) == 10  # memory-bound: 10 GB/s x 1 FLOP/B
    assert roofline.roofline(10, 100, 50) == 100  # compute-bound: capped by the peak
    with pytest.raises(ValueError):
        roofline.roofline(0, 100, 1)


def test_classify_uses_the_ridge_point():
    rows = [{"op": "a", "intensity": 0.5, "gflops": 1}, {"op": "b", "intensity": 20, "gflops": 1}]
    out = roofline.classify(rows, bandwidth_gbps=10, peak_gflops=100)  # ridge at 10 FLOP/B
    assert [r["bound"] for r in out] == ["memory", "compute"]
    assert out[0]["ridge"] == 10


def test_encoder_op_flops_match_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    ops = {op.name: op for op in roofline.encoder_ops(batch=2, seq_len=16, device="cpu")}
    for name in ("QKV projection (linear H->3H)", "FFN up (linear H->4H)"):
        with FlopCounterMode(display=False) as counter:
            ops[name].fn()
        assert counter.get_total_flops() == ops[name].flops, name
    # element-wise ops move more bytes than they compute on: intensity below 1 FLOP/B
    assert ops["residual add"].intensity < 1


def test_microbenchmarks_return_positive_figures():
    bw = roofline.measure_bandwidth(mib=16, iters=3, device="cpu")
    assert bw["bandwidth_gbps"] > 0
    mm = roofline.measure_matmul(sizes=(64, 128), iters=3, device="cpu")
    assert [r["n"] for r in mm] == [64, 128] and all(r["gflops"] > 0 for r in mm)
    rows = roofline.time_ops(roofline.encoder_ops(batch=1, seq_len=8, device="cpu"), iters=2, device="cpu")
    assert len(rows) == 6 and all(r["gflops"] > 0 for r in rows)
    fig = roofline.roofline_figure(bw["bandwidth_gbps"], max(r["gflops"] for r in mm), rows)
    assert len(fig.data) == 1 + len(rows)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="mib"):
        roofline.measure_bandwidth(mib=0)
    with pytest.raises(ValueError, match="size"):
        roofline.measure_matmul(sizes=(-1,))
    with pytest.raises(ValueError, match="batch"):
        roofline.encoder_ops(batch=0)


def test_clock_info_and_sustained_run():
    info = roofline.clock_info("cpu")
    assert info["device"] == "cpu" and "cpu_mhz_now" in info
    series = roofline.sustained_matmul(n=64, seconds=0.3, device="cpu")
    assert len(series) >= 2 and all(g > 0 for g in series)
