"""MemoryTracker: what the allocator and the process hold, per named phase and over time.

Per phase it records the counters this machine has:
  CUDA: memory_allocated (live tensors), memory_reserved (allocator cache), the phase's peak
        (max_memory_allocated after reset_peak_memory_stats), num_alloc_retries (cudaMalloc retried
        after freeing the cache: the fragmentation signal), and device-used from NVML when present.
  always: process RSS (psutil, else /proc/self/statm) and the Python heap allocated during the phase
  (tracemalloc, switched on only inside phases because it slows every Python allocation);
  on CPU with glibc: malloc_in_use (mallinfo2), the exact bytes malloc has handed out.
A background sampler reads RSS (and CUDA counters) every `interval_s`, for a timeline and for the
RSS peak inside each phase: a tiny child process on CPU (it never takes this process's GIL), a
thread on a GPU. `available()` says plainly which counters exist here and why not.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from dataclasses import dataclass, field

import torch

from ailab.memory.counters import (
    _CHILD_SAMPLER,
    _child_cpu_s,
    _import_psutil,
    _import_pynvml,
    _statm_rss,
    malloc_in_use,
    trim_malloc,  # noqa: F401 - re-exported
)

MiB = 2**20


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
        self._raw: list[tuple] = []  # (t, rss[, cuda_allocated, cuda_reserved, nvml_used]) per sample
        self._statm_fd = None
        self._child: subprocess.Popen | None = None
        self._child_path = ""
        self._cpu_at_ready: float | None = None
        self.sampler_cpu_s = 0.0
        self._psutil = _import_psutil()
        self._proc = self._psutil.Process() if self._psutil else None
        self._nvml = self._nvml_handle() if self.device.type == "cuda" else None
        self._python_heap = python_heap
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = None
        if sample:
            self.start()

    # --- counters -------------------------------------------------------------------------------
    def _nvml_handle(self):
        pynvml = _import_pynvml()
        if pynvml is None:
            return None
        try:
            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - no driver / no permission: NVML is simply unavailable
            return None

    def available(self) -> dict[str, str]:
        """Each counter -> 'yes' or the reason it is missing on this machine."""
        cuda = self.device.type == "cuda"
        no_cuda = f"no (device is {self.device.type}; CUDA allocator counters exist only on a GPU)"
        return {
            "rss": "yes (psutil)"
            if self._proc
            else ("yes (/proc/self/statm; psutil not installed)" if _statm_rss() else "no (no psutil, no /proc)"),
            "python_heap": "yes (tracemalloc)" if self._python_heap else "no (python_heap=False)",
            "malloc_in_use": "yes (glibc mallinfo2)" if malloc_in_use() is not None else "no (not glibc >= 2.33)",
            "cuda_allocated": "yes" if cuda else no_cuda,
            "cuda_reserved": "yes" if cuda else no_cuda,
            "cuda_peak": "yes" if cuda else no_cuda,
            "alloc_retries": "yes" if cuda else no_cuda,
            "nvml_used": ("yes" if self._nvml else "no (nvidia-ml-py missing or no NVIDIA driver)")
            if cuda
            else no_cuda,
        }

    def rss(self) -> int | None:
        if self._proc is not None:
            return self._proc.memory_info().rss
        return _statm_rss()

    def _cuda_now(self) -> dict[str, float | None]:
        if self.device.type != "cuda":
            return {}
        stats = torch.cuda.memory_stats(self.device)
        out = {
            "cuda_allocated": float(torch.cuda.memory_allocated(self.device)),
            "cuda_reserved": float(torch.cuda.memory_reserved(self.device)),
            "alloc_retries": float(stats.get("num_alloc_retries", 0)),
        }
        if self._nvml:
            pynvml, handle = self._nvml
            out["nvml_used"] = float(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        return out

    def snapshot(self) -> dict[str, float | None]:
        """Current counters, in bytes."""
        snap = {"rss": self.rss(), "malloc_in_use": malloc_in_use()}
        snap.update(self._cuda_now())
        return snap

    # --- background sampler ------------------------------------------------------------------------
    # On CPU the timeline comes from a tiny child process that reads this process's /proc/<pid>/statm
    # (as memory-profiler does): it never takes our GIL, so it cannot stall the forward pass even on
    # an oversubscribed machine. On a GPU a thread is needed (CUDA counters are in-process); it does
    # the least possible per sample.
    def start(self) -> None:
        if self._thread is not None or self._child is not None:
            return
        if self.device.type != "cuda" and os.path.exists(f"/proc/{os.getpid()}/statm"):
            fd, self._child_path = tempfile.mkstemp(prefix="ailab-rss-", suffix=".txt")
            os.close(fd)
            self._child = subprocess.Popen(
                [sys.executable, "-S", "-c", _CHILD_SAMPLER, str(os.getpid()), repr(self.interval_s), self._child_path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ailab-memory-sampler", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout_s: float = 3.0) -> bool:
        """Block until the sampler has taken its first sample (the child process needs ~50 ms to start)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self._child is not None:
                self._read_child()
            if self._raw:
                self._cpu_at_ready = _child_cpu_s(self._child.pid) if self._child is not None else None
                return True
            time.sleep(0.005)
        return False

    def _read_child(self) -> None:
        try:
            with open(self._child_path) as f:
                lines = f.read().splitlines()
        except OSError:
            return
        rows = []
        for line in lines:
            parts = line.split()
            if len(parts) == 2:  # the last line may still be being written
                rows.append((float(parts[0]) - self._t0, int(parts[1])))
        self._raw = rows

    def stop(self) -> None:
        if self._child is not None:
            cpu = _child_cpu_s(self._child.pid)
            self._read_child()
            self._child.terminate()
            self._child.wait(timeout=5)
            if cpu is not None:
                self.sampler_cpu_s += cpu - (self._cpu_at_ready or 0.0)
            with contextlib.suppress(OSError):
                os.unlink(self._child_path)
            self._child = None
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    def _sample_fn(self):
        """The cheapest reading that serves the timeline, built once.

        The sampler competes with the forward pass for the GIL and, on a busy machine, for a core;
        every microsecond it holds the GIL can stall the main thread. So: RSS from a pre-opened
        /proc/self/statm (one pread), CUDA counters on a GPU, and no mallinfo2 (it takes malloc's
        arena lock, which would block the main thread's allocations).
        """
        page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            fd = None
        self._statm_fd = fd

        def rss() -> int | None:
            if fd is not None:
                return int(os.pread(fd, 128, 0).split()[1]) * page
            return self.rss()

        if self.device.type != "cuda":
            return lambda: (time.monotonic() - self._t0, rss())
        dev, nvml = self.device, self._nvml

        def with_cuda():
            used = float(nvml[0].nvmlDeviceGetMemoryInfo(nvml[1]).used) if nvml else None
            return (
                time.monotonic() - self._t0,
                rss(),
                torch.cuda.memory_allocated(dev),
                torch.cuda.memory_reserved(dev),
                used,
            )

        return with_cuda

    def _run(self) -> None:
        cpu0 = time.thread_time()
        sample, raw = self._sample_fn(), self._raw
        while not self._stop.wait(self.interval_s):
            raw.append(sample())  # list.append is atomic under the GIL: no lock needed
        self.sampler_cpu_s += time.thread_time() - cpu0
        if self._statm_fd is not None:
            os.close(self._statm_fd)

    @property
    def timeline(self) -> list[dict]:
        """The samples so far, one dict per sample (t in seconds since the tracker started, bytes)."""
        if self._child is not None:
            self._read_child()
        keys = (
            ("t", "rss") if self.device.type != "cuda" else ("t", "rss", "cuda_allocated", "cuda_reserved", "nvml_used")
        )
        return [dict(zip(keys, row)) for row in list(self._raw)]

    def _rss_peak_between(self, t_start: float, t_end: float) -> float | None:
        if self._child is not None:
            self._read_child()
        values = [row[1] for row in list(self._raw) if t_start <= row[0] <= t_end and row[1] is not None]
        return max(values) if values else None

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
            sampled = self._rss_peak_between(t_start, t_end)
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

    def timeline_figure(self, title: str = "Process memory over time"):
        """RSS (and CUDA allocated/reserved) over time, with each phase shaded and named."""
        import plotly.graph_objects as go

        from ailab.device import describe_hardware

        samples = self.timeline
        fig = go.Figure()
        ts = [s["t"] for s in samples]
        for key in ("rss", "malloc_in_use", "cuda_allocated", "cuda_reserved", "nvml_used"):
            ys = [s.get(key) for s in samples]
            if any(y is not None for y in ys):
                fig.add_trace(go.Scatter(x=ts, y=[None if y is None else y / MiB for y in ys], name=key, mode="lines"))
        for i, (name, a, b) in enumerate(self.marks):
            fig.add_vrect(
                x0=a,
                x1=b,
                fillcolor="LightSkyBlue" if i % 2 else "LightGreen",
                opacity=0.25,
                line_width=0,
                annotation_text=name,
                annotation_position="top left",
            )
        fig.update_layout(
            title={"text": f"{title}<br><sup>measured on {describe_hardware().one_line()}</sup>"},
            xaxis_title="seconds",
            yaxis_title="MiB",
            template="plotly_white",
            height=420,
        )
        return fig


def sampler_overhead(fn, pairs: int = 12, calls_per_block: int = 3, interval_s: float = 0.05) -> dict:
    """How much the background sampler slows `fn` (a forward pass): interleaved A/B blocks.

    Blocks with and without a running sampler alternate (AB BA AB ...), so drift on a shared machine
    hits both arms. Two estimates are returned: `overhead_frac` compares each arm's fastest call
    (timeit's convention: the least-disturbed run shows the cost that is always paid), and
    `overhead_median_frac` is the median of per-pair ratios (it also carries scheduling noise: on a
    loaded machine its spread can be tens of percent). `sampler_cpu_frac` is the sampler's own CPU
    time over the sampled wall time, which does not depend on noise in `fn` at all.
    """
    if pairs < 2 or calls_per_block < 1:
        raise ValueError(f"pairs must be >= 2 and calls_per_block >= 1 (got {pairs}, {calls_per_block})")
    import statistics

    fn()  # warm-up outside the measurement
    ratios, cpu, wall = [], 0.0, 0.0
    calls: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(pairs):
        block = {}
        for arm in ("off", "on") if i % 2 == 0 else ("on", "off"):
            tracker = MemoryTracker(interval_s=interval_s, python_heap=False, sample=(arm == "on"))
            if arm == "on":
                tracker.wait_ready()  # time the sampling, not the sampler's start-up
            t_block = time.perf_counter()
            for _ in range(calls_per_block):
                t0 = time.perf_counter()
                fn()
                calls[arm].append(time.perf_counter() - t0)
            block[arm] = time.perf_counter() - t_block
            tracker.stop()
            if arm == "on":
                cpu += tracker.sampler_cpu_s
                wall += block[arm]
        ratios.append(block["on"] / block["off"])
    return {
        "overhead_frac": min(calls["on"]) / min(calls["off"]) - 1,
        "overhead_median_frac": statistics.median(ratios) - 1,
        "sampler_cpu_frac": cpu / wall if wall else 0.0,
        "pairs": pairs,
        "interval_s": interval_s,
        "fn_median_s": statistics.median(calls["off"]),
    }
