"""Where a step's time goes, from inside: torch.profiler's operator table, grouped into the parts the course names.

    report = profile_steps(lambda: decode_one_token(...), steps=10, label="decode_step")
    report.shares            {"matmul": 0.44, "attention": 0.19, "KV gather": 0.25, ...}: self time by part
    report.table(8)          the operators that took the most self time: calls and ms per step, input shapes
    report.trace_path        a Chrome trace (open it in chrome://tracing or ui.perfetto.dev: a file, offline)

*Self* time is an operator's own time, without the operators it called: summed over every operator it is the whole
time the profiler saw, counted once. Each operator is put in one part by its name (`PARTS`); the ranges a caller
marks with `record_function` (the step itself, its phases) are kept apart in `report.ranges`, with their total
times. On a CUDA device the trace holds the kernels too (ProfilerActivity.CUDA), and the table's times are the
host's: a launch-bound step shows as host time that dwarfs the kernels' own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Which part of a transformer's step an ATen operator belongs to, by its name without "aten::".
PARTS: dict[str, set[str]] = {
    "matmul": {"addmm", "mm", "bmm", "matmul", "linear", "_weight_int8pack_mm", "_weight_int4pack_mm_for_cpu"},
    "attention": {
        "scaled_dot_product_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_softmax",
        "softmax",
    },
    "KV gather": {"index_select", "index", "gather", "embedding", "index_put_", "_index_put_impl_"},
    "layer norm": {"layer_norm", "native_layer_norm"},
    "activation": {"gelu", "tanh", "relu", "silu"},
    "copies and views": {
        "copy_", "contiguous", "clone", "cat", "stack", "to", "_to_copy", "empty", "empty_like", "view",
        "reshape", "_reshape_alias", "transpose", "permute", "expand", "split", "split_with_sizes", "slice",
        "select", "unsqueeze", "as_strided", "t", "detach", "fill_", "zero_", "resize_", "zeros", "arange",
        "unbind", "narrow", "flatten", "_unsafe_view", "lift_fresh", "alias",
    },
}  # fmt: skip


def part_of(name: str) -> str:
    """The part an operator named `name` (aten::addmm, aten::index_select, ...) belongs to, or "other" (the
    residual adds, the masks' comparisons, the sampling)."""
    op = name.removeprefix("aten::")
    return next((part for part, ops in PARTS.items() if op in ops), "other")


@dataclass
class OpRow:
    name: str
    part: str
    calls_per_step: float
    self_ms_per_step: float
    share: float  # of the step's self time
    shapes: str  # the input shapes of its most frequent call


@dataclass
class ProfileReport:
    steps: int
    self_ms_per_step: float  # every operator's self time, summed, per step
    shares: dict[str, float]  # by part; they sum to 1
    calls_per_step: float  # operator calls (at every level), per step
    rows: list[OpRow]
    ranges: dict[str, float] = field(default_factory=dict)  # record_function ranges: ms per step
    trace_path: str | None = None

    def table(self, n: int = 10) -> str:
        """The n operators with the most self time, as text."""
        lines = [f"{'operator':<42} {'part':<16} {'calls':>6} {'self ms':>8} {'share':>6}  input shapes"]
        for r in self.rows[:n]:
            lines.append(
                f"{r.name:<42} {r.part:<16} {r.calls_per_step:6.1f} {r.self_ms_per_step:8.3f} {r.share:6.1%}  {r.shapes}"
            )
        return "\n".join(lines)


def profile_steps(
    fn: Callable[[], object],
    steps: int = 10,
    warmup: int = 2,
    label: str = "step",
    trace_dir: str | Path | None = None,
    device=None,
) -> ProfileReport:
    """Run `fn` `warmup` times unprofiled, then `steps` times under torch.profiler, each call inside a
    record_function range named `label`; the operator table per step, grouped by part, and (with `trace_dir`) the
    Chrome trace written there."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from ailab.device import pick_device, sync

    if steps < 1 or warmup < 0:
        raise ValueError(f"profile_steps needs steps >= 1 and warmup >= 0; got steps={steps}, warmup={warmup}")
    dev = torch.device(device) if device is not None else pick_device()
    for _ in range(warmup):
        fn()
    sync(dev)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            with record_function(label):
                fn()
            sync(dev)
    events = prof.key_averages(group_by_input_shape=True)
    ranges: dict[str, float] = {}
    by_name: dict[str, dict] = {}
    for e in events:
        if not e.key.startswith("aten::"):  # a record_function range, or the profiler's own
            if e.key == label or e.key.startswith(f"{label}/"):
                ranges[e.key] = ranges.get(e.key, 0.0) + e.cpu_time_total / 1e3 / steps
            continue
        row = by_name.setdefault(e.key, {"self_us": 0.0, "calls": 0, "shapes": "", "top_calls": -1})
        row["self_us"] += e.self_cpu_time_total
        row["calls"] += e.count
        if e.count > row["top_calls"]:
            row["top_calls"], row["shapes"] = e.count, str([list(s) for s in e.input_shapes if s])
    total_us = sum(r["self_us"] for r in by_name.values()) or 1.0
    rows = sorted(
        (
            OpRow(
                name,
                part_of(name),
                r["calls"] / steps,
                r["self_us"] / 1e3 / steps,
                r["self_us"] / total_us,
                r["shapes"],
            )
            for name, r in by_name.items()
        ),
        key=lambda r: -r.self_ms_per_step,
    )
    shares: dict[str, float] = {}
    for r in rows:
        shares[r.part] = shares.get(r.part, 0.0) + r.share
    trace_path = None
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        trace_path = str(Path(trace_dir) / f"{label}.trace.json")
        prof.export_chrome_trace(trace_path)
    return ProfileReport(
        steps=steps,
        self_ms_per_step=total_us / 1e3 / steps,
        shares=dict(sorted(shares.items(), key=lambda kv: -kv[1])),
        calls_per_step=sum(r["calls"] for r in by_name.values()) / steps,
        rows=rows,
        ranges=ranges,
        trace_path=trace_path,
    )
