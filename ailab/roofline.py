"""Device microbenchmarks: memory bandwidth and matmul FLOP/s, and a roofline to read them by.

An operation that does F floating-point operations while moving B bytes has arithmetic intensity
I = F / B. It cannot run faster than min(peak FLOP/s, bandwidth x I): below the ridge point
(peak / bandwidth) it is memory-bound - a faster ALU would not help, fewer bytes would.
All figures here are measured on this machine (warm-up excluded, medians, device synced).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from ailab.device import pick_device, sync
from ailab.timing import measure_latency


def _check_positive(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")


def measure_bandwidth(mib: int = 256, iters: int = 10, device=None) -> dict:
    """Copy a `mib`-MiB buffer into another: each copy reads and writes it, 2 x size bytes moved.

    The buffer must be much larger than the last-level cache, or this measures the cache.
    """
    _check_positive(mib=mib, iters=iters)
    dev = torch.device(device) if device is not None else pick_device()
    n = mib * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=dev)  # (n,)
    dst = torch.empty_like(src)
    stats = measure_latency(lambda: dst.copy_(src), iters=iters, warmup=2, device=dev, max_seconds=5)
    gbps = 2 * src.numel() * 4 / (stats.p50_ms / 1e3) / 1e9
    return {"bandwidth_gbps": gbps, "mib": mib, "p50_ms": stats.p50_ms, "device": dev.type}


def measure_matmul(
    sizes=(128, 256, 512, 1024), dtype: torch.dtype = torch.float32, device=None, iters: int = 8
) -> list[dict]:
    """GFLOP/s of an n x n by n x n matmul (2 n^3 FLOPs) at each size; the largest is the 'peak'."""
    dev = torch.device(device) if device is not None else pick_device()
    out = []
    for n in sizes:
        _check_positive(size=n)
        a = torch.randn(n, n, device=dev, dtype=dtype)  # (n, n)
        b = torch.randn(n, n, device=dev, dtype=dtype)  # (n, n)
        stats = measure_latency(lambda: a @ b, iters=iters, warmup=2, device=dev, max_seconds=3)
        flops = 2 * n**3
        out.append(
            {
                "n": n,
                "gflops": flops / (stats.p50_ms / 1e3) / 1e9,
                "p50_ms": stats.p50_ms,
                "intensity": flops / (3 * n * n * a.element_size()),
            }
        )
    return out


@dataclass
class Op:
    """One operation of an encoder layer at a given (batch, seq_len), with its work and its traffic."""

    name: str
    flops: float
    bytes: float
    fn: object  # a zero-argument callable that runs it

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def encoder_ops(
    batch: int = 8, seq_len: int = 128, hidden: int = 384, intermediate: int = 1536, heads: int = 12, device=None
) -> list[Op]:
    """The main operations of one MiniLM layer, as real tensors on `device`, with FLOPs and bytes moved.

    Bytes count each input read once and the output written once (fp32), the minimum traffic.
    """
    _check_positive(batch=batch, seq_len=seq_len)
    dev = torch.device(device) if device is not None else pick_device()
    tokens, hd = batch * seq_len, hidden // heads
    x = torch.randn(tokens, hidden, device=dev)  # (B*T, H)
    w_qkv = torch.randn(3 * hidden, hidden, device=dev)  # (3H, H)
    w_up = torch.randn(intermediate, hidden, device=dev)  # (I, H)
    u = torch.randn(tokens, intermediate, device=dev)  # (B*T, I)
    q = torch.randn(batch, heads, seq_len, hd, device=dev)  # (B, h, T, d)
    ln = torch.nn.LayerNorm(hidden).to(dev)
    f4 = 4
    ops = [
        Op(
            "QKV projection (linear H->3H)",
            2 * tokens * hidden * 3 * hidden,
            f4 * (tokens * hidden + 3 * hidden * hidden + tokens * 3 * hidden),
            lambda: x @ w_qkv.T,
        ),
        Op(
            "FFN up (linear H->4H)",
            2 * tokens * hidden * intermediate,
            f4 * (tokens * hidden + hidden * intermediate + tokens * intermediate),
            lambda: x @ w_up.T,
        ),
        Op(
            "attention (SDPA)",
            4 * batch * heads * seq_len * seq_len * hd,
            f4 * 4 * batch * heads * seq_len * hd,
            lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q),
        ),
        Op("GELU", 8 * tokens * intermediate, f4 * 2 * tokens * intermediate, lambda: torch.nn.functional.gelu(u)),
        Op("LayerNorm", 8 * tokens * hidden, f4 * 2 * tokens * hidden, lambda: ln(x)),
        Op("residual add", tokens * hidden, f4 * 3 * tokens * hidden, lambda: x + x),
    ]
    return ops


def time_ops(ops: list[Op], iters: int = 8, device=None) -> list[dict]:
    """Run each op (inference mode), and report achieved GFLOP/s and GB/s next to its intensity."""
    dev = torch.device(device) if device is not None else pick_device()
    rows = []
    with torch.inference_mode():
        for op in ops:
            stats = measure_latency(op.fn, iters=iters, warmup=2, device=dev, max_seconds=2)
            s = stats.p50_ms / 1e3
            rows.append(
                {
                    "op": op.name,
                    "intensity": op.intensity,
                    "gflops": op.flops / s / 1e9,
                    "gbps": op.bytes / s / 1e9,
                    "p50_ms": stats.p50_ms,
                }
            )
    return rows


def roofline(bandwidth_gbps: float, peak_gflops: float, intensity: float) -> float:
    """Attainable GFLOP/s at `intensity` FLOP/byte: min(peak, bandwidth x intensity)."""
    if bandwidth_gbps <= 0 or peak_gflops <= 0 or intensity <= 0:
        raise ValueError("bandwidth_gbps, peak_gflops and intensity must all be positive")
    return min(peak_gflops, bandwidth_gbps * intensity)


def classify(rows: list[dict], bandwidth_gbps: float, peak_gflops: float) -> list[dict]:
    """Mark each op memory-bound (left of the ridge point) or compute-bound (right of it)."""
    ridge = peak_gflops / bandwidth_gbps
    return [
        {
            **r,
            "bound": "memory" if r["intensity"] < ridge else "compute",
            "ridge": ridge,
            "attainable_gflops": roofline(bandwidth_gbps, peak_gflops, r["intensity"]),
        }
        for r in rows
    ]


ROOF_RANGE = (0.01, 1000.0)  # FLOP per byte: the x range every roofline figure here draws


def roofline_figure(bandwidth_gbps: float, peak_gflops: float, op_rows: list[dict], title: str = "Roofline"):
    """Log-log roofline with the measured ops placed on it."""
    import numpy as np
    import plotly.graph_objects as go

    from ailab import viz
    from ailab.device import describe_hardware

    xs = np.logspace(np.log10(ROOF_RANGE[0]), np.log10(ROOF_RANGE[1]), 60)
    fig = go.Figure(
        [
            go.Scatter(
                x=xs,
                y=[roofline(bandwidth_gbps, peak_gflops, x) for x in xs],
                mode="lines",
                name=f"roof: {bandwidth_gbps:.1f} GB/s, {peak_gflops:.0f} GFLOP/s",
            )
        ]
    )
    for r in op_rows:
        fig.add_trace(
            go.Scatter(
                x=[r["intensity"]],
                y=[r["gflops"]],
                mode="markers+text",
                text=[r["op"]],
                textposition="top center",
                name=r["op"],
                marker={"size": 11},
            )
        )
    fig.update_xaxes(**viz.log_axis([x for t in fig.data for x in t.x]), title="arithmetic intensity (FLOP per byte)")
    fig.update_yaxes(**viz.log_axis([y for t in fig.data for y in t.y]), title="GFLOP/s")
    fig.update_layout(
        title={"text": f"{title}<br><sup>measured on {describe_hardware().one_line()}</sup>"},
        template="plotly_white",
        height=480,
        showlegend=False,
    )
    return fig


def attainable(bandwidth_gbps: float, peak_gflops: float, intensity: float, op_rows: list[dict] = ()) -> dict:
    """What the roofline says at `intensity` FLOP/byte: attainable GFLOP/s, its share of the peak, which
    roof limits it, the ridge point, and the measured op (of `op_rows`) whose intensity is nearest."""
    lo, hi = ROOF_RANGE[0] * (1 - 1e-9), ROOF_RANGE[1] * (1 + 1e-9)  # a log slider's ends are off by rounding
    if not (isinstance(intensity, (int, float)) and not isinstance(intensity, bool) and lo <= intensity <= hi):
        raise ValueError(
            f"intensity must be a number of FLOP per byte in [{ROOF_RANGE[0]}, {ROOF_RANGE[1]}], got {intensity!r}"
        )
    gflops = roofline(bandwidth_gbps, peak_gflops, intensity)
    ridge = peak_gflops / bandwidth_gbps
    nearest = min(op_rows, key=lambda r: abs(math.log(r["intensity"] / intensity)), default=None)
    return {
        "intensity": float(intensity),
        "attainable_gflops": gflops,
        "share_of_peak": gflops / peak_gflops,
        "bound": "memory" if intensity < ridge else "compute",
        "ridge": ridge,
        "nearest_op": nearest["op"] if nearest else None,
    }


def attainable_figure(bandwidth_gbps: float, peak_gflops: float, op_rows: list[dict], intensity: float):
    """Widget callback: the measured roofline and ops, with the point at `intensity` marked and its
    attainable FLOP/s in the title. Redraws from numbers already measured; runs nothing."""
    import plotly.graph_objects as go

    a = attainable(bandwidth_gbps, peak_gflops, intensity, op_rows)
    fig = roofline_figure(
        bandwidth_gbps,
        peak_gflops,
        op_rows,
        title=f"{intensity:.3g} FLOP/B: at most {a['attainable_gflops']:.1f} GFLOP/s "
        f"({a['share_of_peak']:.0%} of peak), {a['bound']}-bound; ridge at {a['ridge']:.1f} FLOP/B"
        + (f"; nearest measured op: {a['nearest_op']}" if a["nearest_op"] else ""),
    )
    fig.add_trace(
        go.Scatter(
            x=[intensity],
            y=[a["attainable_gflops"]],
            mode="markers",
            name="chosen intensity",
            marker={"size": 16, "symbol": "x", "color": "black"},
        )
    )
    fig.add_vline(x=a["ridge"], line_dash="dot")
    return fig


def clock_info(device=None) -> dict:
    """Clock speeds now, and on a GPU the throttle reasons NVML reports (topic H5)."""
    dev = torch.device(device) if device is not None else pick_device()
    info: dict = {"device": dev.type}
    mhz = []
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    except OSError:
        pass
    info["cpu_mhz_now"] = mhz or None
    path = "/sys/devices/system/cpu/cpu0/cpufreq/"
    for key, fname in (("cpu_mhz_max", "cpuinfo_max_freq"), ("cpu_governor", "scaling_governor")):
        try:
            with open(os.path.join(path, fname)) as f:
                raw = f.read().strip()
            info[key] = float(raw) / 1000 if key == "cpu_mhz_max" else raw
        except OSError:
            info[key] = None  # virtual machines often hide cpufreq: the hypervisor owns the clock
    if dev.type == "cuda":
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)
            info["gpu_sm_mhz"] = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            info["gpu_sm_mhz_max"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
            info["gpu_temp_c"] = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            info["gpu_throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        except Exception as e:  # noqa: BLE001 - NVML missing or no permission
            info["gpu_clock_error"] = str(e)
    return info


def sustained_matmul(n: int = 512, seconds: float = 3.0, device=None) -> list[float]:
    """GFLOP/s of back-to-back matmuls, one figure per ~0.1 s, for `seconds`: drift shows throttling
    (or, on a shared machine, neighbours)."""
    import time

    _check_positive(n=n)
    dev = torch.device(device) if device is not None else pick_device()
    a = torch.randn(n, n, device=dev)  # (n, n)
    a @ a
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.1:
            a @ a
            k += 1
        sync(dev)
        out.append(2 * n**3 * k / (time.perf_counter() - t0) / 1e9)
    return out
