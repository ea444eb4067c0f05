"""Leaks: fit memory against iteration over a soak, and a planted leak to practise on.

A leak is a *trend*, not a difference between two readings: memory on a healthy loop wobbles
(allocator caching, GC timing), so "last minus first" flags clean loops and misses slow leaks.
Fitting a line through every sample after warm-up uses all the evidence, and its standard error
says how sure the slope is.
"""

from __future__ import annotations

import math
import tracemalloc
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ailab.memory.counters import malloc_in_use, trim_malloc
from ailab.memory.tracker import MemoryTracker

KiB = 1024


@dataclass
class LeakReport:
    slope_bytes_per_iter: float
    stderr_bytes_per_iter: float
    n_used: int
    leaking: bool
    reason: str

    def __str__(self) -> str:
        return (
            f"{'LEAK' if self.leaking else 'no leak'}: {self.slope_bytes_per_iter / KiB:+.1f} KiB/iteration "
            f"(± {self.stderr_bytes_per_iter / KiB:.1f}, n={self.n_used}) - {self.reason}"
        )


def leak_slope(samples, warmup_frac: float = 0.2, min_slope_bytes: float = 4 * KiB, z: float = 4.0) -> LeakReport:
    """Least-squares slope of memory (bytes) against iteration, after dropping the warm-up.

    Verdict: leaking when the slope is above `min_slope_bytes` per iteration (smaller growth is not
    worth an alarm) AND at least `z` standard errors above zero (the trend is not noise).
    """
    y = np.asarray(list(samples), dtype=np.float64)
    if y.ndim != 1 or y.size < 8:
        raise ValueError(f"samples must be a 1-D series of at least 8 memory readings, got {y.size}")
    if not np.all(np.isfinite(y)):
        raise ValueError("samples contain NaN or infinity; drop unreadable readings first")
    if not 0 <= warmup_frac < 0.9:
        raise ValueError(f"warmup_frac must be in [0, 0.9), got {warmup_frac!r}")
    skip = int(len(y) * warmup_frac)  # allocator and caches grow during the first iterations
    y = y[skip:]
    x = np.arange(len(y), dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    dof = max(len(y) - 2, 1)
    stderr = math.sqrt(float(resid @ resid) / dof / float(((x - x.mean()) ** 2).sum()))
    big = slope > min_slope_bytes
    sure = slope > z * stderr
    leaking = bool(big and sure)
    if leaking:
        reason = f"grows {slope / KiB:.1f} KiB per iteration, {slope / max(stderr, 1e-9):.0f} standard errors above 0"
    elif not big:
        reason = f"slope below the {min_slope_bytes / KiB:.0f} KiB/iteration alarm threshold"
    else:
        reason = "slope within the noise (fewer than {:.0f} standard errors)".format(z)
    return LeakReport(float(slope), stderr, len(y), leaking, reason)


def soak(
    step: Callable[[int], object],
    iters: int,
    device: torch.device | str | None = None,
    counter: str | tuple[str, ...] = "auto",
    warmup: int = 0,
) -> list[float] | dict[str, list[float]]:
    """Run `step(i)` `warmup` times unread, then `iters` times; return a memory reading (bytes) after each.

    counter: "cuda" (memory_allocated), "malloc" (glibc bytes in use: exact, the CPU default when
    available), "rss" (pages the process holds: moves in steps as the heap grows), or "auto".
    A tuple of counters reads them all in the same run and returns {counter: readings}.
    """
    if iters < 8:
        raise ValueError(f"iters must be >= 8 for a slope to mean anything, got {iters}")
    tracker = MemoryTracker(device=device, python_heap=False, sample=False)
    readers = {"cuda": lambda: torch.cuda.memory_allocated(tracker.device), "malloc": malloc_in_use, "rss": tracker.rss}
    names = (counter,) if isinstance(counter, str) else tuple(counter)
    auto = "cuda" if tracker.device.type == "cuda" else "malloc" if malloc_in_use() is not None else "rss"
    names = tuple(auto if n == "auto" else n for n in names)
    for n in names:
        if n not in readers:
            raise ValueError(f"counter must be one of {sorted(readers)} or 'auto', got {n!r}")
        if n == "malloc" and malloc_in_use() is None:
            raise ValueError("counter='malloc' needs glibc >= 2.33; use counter='rss'")
        if n == "cuda" and tracker.device.type != "cuda":
            raise ValueError("counter='cuda' needs a CUDA device")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for i in range(warmup):  # caches, bounded histories and allocator pools fill up here
        step(-1 - i)
    trim_malloc()
    out: dict[str, list[float]] = {n: [] for n in names}
    for i in range(iters):
        step(i)
        if tracker.device.type == "cuda":
            torch.cuda.synchronize(tracker.device)
        for n in names:
            out[n].append(float(readers[n]()))
    return out[names[0]] if isinstance(counter, str) else out


# --- a planted leak: a "debug history" that keeps every batch's hidden states -----------------------
DEBUG_HISTORY: list = []


def leaky_step(model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """One inference step that leaks: it keeps each batch's hidden states in a global list."""
    with torch.inference_mode():
        hidden = model.bert(**inputs).last_hidden_state  # (B, T, H)
        DEBUG_HISTORY.append(hidden.clone())  # the leak: grows by B*T*H*4 bytes every call
        return hidden.mean(1)  # (B, H)


def fixed_step(model, inputs: dict[str, torch.Tensor], keep_last: int = 4) -> torch.Tensor:
    """The same step, fixed: the debug history is bounded (any global container needs a cap)."""
    with torch.inference_mode():
        hidden = model.bert(**inputs).last_hidden_state  # (B, T, H)
        DEBUG_HISTORY.append(hidden.clone())
        del DEBUG_HISTORY[:-keep_last]  # keep only the last few batches
        return hidden.mean(1)  # (B, H)


def top_growth(
    snapshot_before: tracemalloc.Snapshot, snapshot_after: tracemalloc.Snapshot, limit: int = 5, key: str = "lineno"
) -> list[dict]:
    """The source lines whose Python-heap allocations grew most between two tracemalloc snapshots.

    tracemalloc sees Python objects (the tensor wrappers, list slots), not tensor storage, which the
    torch allocator takes from the OS directly: it points at the *line*, RSS tells the *bytes*.
    """
    noise = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen*>"),
        tracemalloc.Filter(False, "<unknown>"),
    ]
    after, before = snapshot_after.filter_traces(noise), snapshot_before.filter_traces(noise)
    rows = []
    for stat in after.compare_to(before, key)[:limit]:
        frame = stat.traceback[0]
        rows.append(
            {
                "file": frame.filename,
                "line": frame.lineno,
                "size_diff_bytes": stat.size_diff,
                "count_diff": stat.count_diff,
            }
        )
    return rows


def graph_keeping_step(model, inputs: dict[str, torch.Tensor], keep: list, detach: bool) -> None:
    """A forward with autograd on, keeping the output. Without detach() the output drags its whole
    graph - every activation saved for backward - into `keep`: a retained-graph leak."""
    with torch.enable_grad():
        out = model(**inputs)  # (B, H), requires grad: its graph holds the saved activations
    keep.append(out.detach() if detach else out)
