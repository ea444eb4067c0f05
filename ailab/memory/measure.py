"""Measured peaks of a forward pass, and find_max_batch() on top of them.

CPU: torch keeps no `memory_allocated` counter for CPU tensors, and RSS is a poor stand-in (it is a
high-water mark of pages, moved by glibc's caching as much as by tensors). So the CPU peak comes from
the allocator itself: torch.profiler(profile_memory=True) records every allocation and free with its
size; replaying them in time order gives the exact peak of bytes held by tensors during the call.
The same input gives the same number every run. RSS above a trimmed baseline is offered as a
cross-check (`rss_peak_delta`).
CUDA: reset_peak_memory_stats(), run, max_memory_allocated() minus what was allocated before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ailab.memory.counters import trim_malloc
from ailab.memory.estimate import safe_line
from ailab.memory.tracker import MemoryTracker


def _allocations(prof) -> list[tuple[int, int]]:
    """(time_ns, +bytes | -bytes) for every CPU allocation event in a finished profile.

    The one place ailab touches a private torch API (the profiler's event tree): a torch upgrade that
    moves it makes this raise ImportError or AttributeError, and cpu_peak_bytes() falls back to RSS.
    """
    from torch._C._profiler import _EventType

    out, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation and node.typed[1].device.type == "cpu":
            out.append((node.start_time_ns, int(node.typed[1].alloc_size)))
        stack.extend(node.children)
    return sorted(out)


def cpu_peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes held by CPU tensors allocated while `fn()` runs (0 = nothing new was held).

    Exact from the profiler's allocation events; if this torch no longer exposes them, the RSS peak
    above a trimmed baseline instead (page-granular and noisy, but public API), with a warning.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:
        events = _allocations(prof)
    except (ImportError, AttributeError) as e:
        import warnings

        warnings.warn(
            f"torch's profiler event tree is not available ({type(e).__name__}: {e}); measuring the "
            "CPU peak from RSS instead, which is coarser",
            RuntimeWarning,
            stacklevel=2,
        )
        return max(0, rss_peak_delta(fn))
    held = peak = 0
    for _, delta in events:
        held += delta
        peak = max(peak, held)
    return peak


def cuda_peak_bytes(fn: Callable[[], object], device=None) -> int:
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def peak_bytes(fn: Callable[[], object], device: torch.device | str | None = None) -> int:
    """Peak extra bytes allocated by `fn()` on `device` (the activations of a forward pass)."""
    from ailab.device import pick_device

    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda":
        return cuda_peak_bytes(fn, dev)
    if dev.type == "cpu":
        return cpu_peak_bytes(fn)
    raise ValueError(f"device={dev.type!r}: peak measurement supports cpu and cuda")


def rss_peak_delta(fn: Callable[[], object], interval_s: float = 0.002) -> int:
    """RSS peak while `fn()` runs minus RSS just before it (after gc + malloc_trim): the noisy cross-check."""
    trim_malloc()
    with MemoryTracker(device="cpu", interval_s=interval_s, python_heap=False) as tracker:
        tracker.wait_ready()
        with tracker.phase("call"):
            fn()
    phase = tracker.phases[0].counters
    return int(phase["rss_peak"] - phase["rss_start"])


def encoder_inputs(
    batch: int,
    seq_len: int,
    vocab: int = 30522,
    pad_frac: float = 0.25,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """A (batch, seq_len) batch of token ids in which a quarter of the positions of half the rows are
    padding, as in a real padded batch (that padding is what makes BERT build its attention mask)."""
    if batch <= 0 or seq_len <= 0:
        raise ValueError(f"batch and seq_len must be positive (got batch={batch}, seq_len={seq_len})")
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch, seq_len), generator=gen)  # (B, T)
    mask = torch.ones(batch, seq_len, dtype=torch.long)  # (B, T)
    n_pad = int(seq_len * pad_frac)
    if n_pad and seq_len > 1:
        mask[: max(1, batch // 2), seq_len - n_pad :] = 0
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def forward_peak(model: torch.nn.Module, batch: int, seq_len: int, device=None) -> int:
    """Measured peak activation bytes of one inference forward of `model` at (batch, seq_len)."""
    dev = next(model.parameters()).device if device is None else torch.device(device)
    inputs = encoder_inputs(batch, seq_len, device=dev)
    with torch.inference_mode():
        return peak_bytes(lambda: model(**inputs), dev)


@dataclass
class MaxBatch:
    """Result of find_max_batch: the largest batch that fits, and every trial (batch, need, fits)."""

    batch: int
    budget_bytes: float
    base_bytes: float
    trials: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def _is_oom(err: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return (oom and isinstance(err, oom)) or "out of memory" in str(err).lower()


def find_max_batch(
    model: torch.nn.Module,
    budget_bytes: float,
    seq_len: int = 128,
    max_batch: int = 1024,
    headroom: float = 1.2,
    measure: Callable[[int], int] | None = None,
) -> MaxBatch:
    """The largest batch whose safe line, (base + measured peak) x headroom, stays within `budget_bytes`.

    Doubling (1, 2, 4, ...) until a batch does not fit, then binary search between the last two.
    base is memory_allocated on CUDA and process RSS on CPU (so on CPU the budget is an RSS budget).
    On CUDA a real out-of-memory error is caught, the cache freed, and the batch counted as not fitting.
    `measure(batch) -> peak bytes` replaces the real measurement (tests use it).
    """
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes!r}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
    dev = next(model.parameters()).device
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = float(torch.cuda.memory_allocated(dev))
    else:
        trim_malloc()
        base = float(MemoryTracker(device=dev, python_heap=False, sample=False).rss())
    measure = measure or (lambda b: forward_peak(model, b, seq_len))
    trials: list[dict] = []
    t0 = time.perf_counter()

    def fits(b: int) -> bool:
        try:
            peak = measure(b)
        except RuntimeError as err:  # torch.cuda.OutOfMemoryError is a RuntimeError
            if not _is_oom(err):
                raise
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            trials.append({"batch": b, "peak_bytes": None, "need_bytes": None, "fits": False, "oom": True})
            return False
        need = safe_line(base, peak, headroom)
        trials.append({"batch": b, "peak_bytes": peak, "need_bytes": need, "fits": need <= budget_bytes, "oom": False})
        return need <= budget_bytes

    if not fits(1):
        return MaxBatch(0, budget_bytes, base, trials, time.perf_counter() - t0)
    good, bad = 1, None
    while bad is None:
        nxt = min(good * 2, max_batch)
        if nxt == good:
            break
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return MaxBatch(good, budget_bytes, base, trials, time.perf_counter() - t0)


def predicted_vs_measured(model: torch.nn.Module, batch: int, seq_len: int) -> dict:
    """Estimate and measurement of one forward's peak activations, side by side (bytes)."""
    from ailab.memory.estimate import EncoderShape, activation_bytes

    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("predicted_vs_measured() needs a BERT-style model with a .config (e.g. load_encoder().model)")
    dtype = next(model.parameters()).dtype
    predicted = activation_bytes(batch, seq_len, EncoderShape.from_config(config), dtype)
    measured = forward_peak(model, batch, seq_len)
    return {
        "batch": batch,
        "seq_len": seq_len,
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "rel_error": (predicted - measured) / measured if measured else float("nan"),
    }


def predicted_vs_measured_figure(model: torch.nn.Module, batch: int = 8, seq_len: int = 128):
    """The widget's callback: two bars (predicted, measured) in MiB for one (batch, seq_len)."""
    import plotly.graph_objects as go

    from ailab.device import describe_hardware

    r = predicted_vs_measured(model, batch, seq_len)
    mib = [r["predicted_bytes"] / 2**20, r["measured_bytes"] / 2**20]
    fig = go.Figure(
        [
            go.Bar(
                x=["predicted (formula)", "measured (allocator)"],
                y=mib,
                text=[f"{v:.1f} MiB" for v in mib],
                textposition="outside",
            )
        ]
    )
    fig.update_layout(
        title={
            "text": f"Peak activations at batch {batch}, {seq_len} tokens: "
            f"error {r['rel_error']:+.1%}<br><sup>measured on "
            f"{describe_hardware().one_line()}</sup>"
        },
        yaxis_title="MiB",
        template="plotly_white",
        height=380,
    )
    return fig
