"""MemoryTracker: what the allocator and the process hold, per named phase and over time.

Per phase it records the counters this machine has (ailab.memory.counters: RSS, malloc's bytes, and on a
GPU the CUDA allocator's and NVML's), plus two only a phase can give: the phase's CUDA peak
(max_memory_allocated after reset_peak_memory_stats) and the Python heap allocated during the phase
(tracemalloc, switched on only inside phases because it slows every Python allocation).
A background sampler (ailab.memory.sampler) reads RSS (and CUDA counters) every `interval_s`, for a timeline
and for the RSS peak inside each phase. `available()` says plainly which counters exist here and why not.
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from dataclasses import dataclass, field

import torch

from ailab.memory.counters import MiB, DeviceCounters
from ailab.memory.sampler import TimelineSampler
from ailab.memory.timeline_figure import timeline_figure


@dataclass
class Phase:
    """One named phase: seconds taken and counters in bytes (None where this machine has no such counter)."""

    name: str
    seconds: float
    counters: dict[str, float | None] = field(default_factory=dict)

    def row(self) -> dict:
        """The phase as a table row, bytes shown in MiB."""
        out = {"phase": self.name, "seconds": round(self.seconds, 3)}
        for k, v in self.counters.items():
            out[k if k == "alloc_retries" else f"{k}_mib"] = (
                None if v is None else v if k == "alloc_retries" else round(v / MiB, 2)
            )
        return out


class MemoryTracker:
    """Record memory per named phase, with a background sampler for a timeline.

    >>> tracker = MemoryTracker()
    >>> with tracker.phase("load"):
    ...     enc = load_encoder()
    >>> tracker.rows()   # one dict per phase
    """

    def __init__(
        self,
        device: torch.device | str | None = None,
        interval_s: float = 0.05,
        python_heap: bool = True,
        sample: bool = True,
    ):
        from ailab.device import pick_device

        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.device = torch.device(device) if device is not None else pick_device()
        self.interval_s = interval_s
        self.phases: list[Phase] = []
        self.marks: list[tuple[str, float, float]] = []  # (phase, t_start, t_end) on the timeline clock
        self.counters = DeviceCounters(self.device)
        self._python_heap = python_heap
        self._t0 = time.monotonic()
        self.sampler = TimelineSampler(self.counters, interval_s, self._t0)
        if sample:
            self.start()

    # --- counters -------------------------------------------------------------------------------
    def available(self) -> dict[str, str]:
        """Each counter -> 'yes' or the reason it is missing on this machine."""
        device = self.counters.available()
        heap = "yes (tracemalloc)" if self._python_heap else "no (python_heap=False)"
        return {"rss": device.pop("rss"), "python_heap": heap, **device}

    def rss(self) -> int | None:
        return self.counters.rss()

    def snapshot(self) -> dict[str, float | None]:
        """Current counters, in bytes."""
        return self.counters.snapshot()

    # --- background sampler ------------------------------------------------------------------------
    def start(self) -> None:
        self.sampler.start()

    def wait_ready(self, timeout_s: float = 3.0) -> bool:
        """Block until the sampler has taken its first sample (the child process needs ~50 ms to start)."""
        return self.sampler.wait_ready(timeout_s)

    def stop(self) -> None:
        self.sampler.stop()

    @property
    def sampler_cpu_s(self) -> float:
        """CPU seconds the background sampler has taken (its thread, or its child process)."""
        return self.sampler.cpu_s

    @property
    def timeline(self) -> list[dict]:
        """The samples so far, one dict per sample (t in seconds since the tracker started, bytes)."""
        return self.sampler.timeline

    # --- phases ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str):
        """Measure the enclosed block as phase `name`."""
        if not name:
            raise ValueError("phase name must be a non-empty string")
        cuda = self.device.type == "cuda"
        # tracemalloc slows every Python allocation, so it runs only inside phases (unless it was
        # already on): the counters then read "Python heap allocated during this phase, still alive".
        started_here = self._python_heap and not tracemalloc.is_tracing()
        if started_here:
            tracemalloc.start()
        if self._python_heap:
            tracemalloc.reset_peak()
            heap0 = tracemalloc.get_traced_memory()[0]
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        before = self.snapshot()
        t_start = time.monotonic() - self._t0
        try:
            yield self
        finally:
            if cuda:
                torch.cuda.synchronize(self.device)
            after = self.snapshot()
            t_end = time.monotonic() - self._t0
            counters: dict[str, float | None] = {
                "rss_start": before["rss"],
                "rss_end": after["rss"],
                "malloc_in_use": after["malloc_in_use"],
            }
            sampled = self.sampler.rss_peak_between(t_start, t_end)
            ends = [v for v in (before["rss"], after["rss"], sampled) if v is not None]
            counters["rss_peak"] = max(ends) if ends else None
            if self._python_heap:
                current, peak = tracemalloc.get_traced_memory()
                counters["py_heap_growth"] = float(current - heap0)
                counters["py_heap_peak"] = float(peak - heap0)
                if started_here:
                    tracemalloc.stop()
            if cuda:
                counters["cuda_allocated"] = after["cuda_allocated"]
                counters["cuda_reserved"] = after["cuda_reserved"]
                counters["cuda_peak"] = float(torch.cuda.max_memory_allocated(self.device))
                counters["alloc_retries"] = after["alloc_retries"] - before["alloc_retries"]
                counters["nvml_used"] = after.get("nvml_used")
            self.phases.append(Phase(name, t_end - t_start, counters))
            self.marks.append((name, t_start, t_end))

    def rows(self) -> list[dict]:
        return [p.row() for p in self.phases]

    def timeline_figure(self, title: str = "Process memory over time"):
        """RSS (and CUDA allocated/reserved) over time, with each phase shaded and named."""
        return timeline_figure(self.timeline, self.marks, title)

    def close(self) -> None:
        """Stop the background sampler."""
        self.stop()

    def __enter__(self):
        return self

    def __del__(self):
        with contextlib.suppress(Exception):
            self.stop()  # never leave a sampler process behind

    def __exit__(self, *exc):
        self.close()
