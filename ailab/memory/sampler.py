"""The background sampler behind a tracker's timeline: RSS (and the CUDA counters on a GPU) every `interval_s`.

On CPU the samples come from a tiny child process that reads this process's /proc/<pid>/statm (as
memory-profiler does): it never takes our GIL, so it cannot stall the forward pass even on an oversubscribed
machine. On a GPU a thread is needed (CUDA counters are in-process); it does the least possible per sample.
Either way the sampler counts the CPU it took (`cpu_s`), so its own cost can be stated.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch

from ailab.memory.counters import DeviceCounters

# The RSS sampler process: stdlib only, started with -S, so it starts fast and stays tiny.
_CHILD_SAMPLER = r"""
import os, sys, time
pid, interval, path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
page = os.sysconf("SC_PAGE_SIZE")
fd = os.open("/proc/%d/statm" % pid, os.O_RDONLY)
with open(path, "w", buffering=1) as out:
    while os.getppid() == pid:
        try:
            rss = int(os.pread(fd, 128, 0).split()[1]) * page
        except (OSError, ValueError, IndexError):
            break
        out.write("%r %d\n" % (time.monotonic(), rss))
        time.sleep(interval)
"""


def _child_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class TimelineSampler:
    """Samples `counters` every `interval_s` in the background, each sample timed in seconds since `t0`
    (a time.monotonic() reading: the tracker's clock, so samples and phases share one timeline)."""

    def __init__(self, counters: DeviceCounters, interval_s: float, t0: float):
        self.counters, self.device = counters, counters.device
        self.interval_s = interval_s
        self.t0 = t0
        self.cpu_s = 0.0  # CPU seconds the sampler has taken (its thread, or its child process)
        self._raw: list[tuple] = []  # (t, rss[, cuda_allocated, cuda_reserved, nvml_used]) per sample
        self._statm_fd = None
        self._child: subprocess.Popen | None = None
        self._child_path = ""
        self._cpu_at_ready: float | None = None
        self._stop = threading.Event()
        self._thread = None

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
                rows.append((float(parts[0]) - self.t0, int(parts[1])))
        self._raw = rows

    def stop(self) -> None:
        if self._child is not None:
            cpu = _child_cpu_s(self._child.pid)
            self._read_child()
            self._child.terminate()
            self._child.wait(timeout=5)
            if cpu is not None:
                self.cpu_s += cpu - (self._cpu_at_ready or 0.0)
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
            return self.counters.rss()

        if self.device.type != "cuda":
            return lambda: (time.monotonic() - self.t0, rss())
        dev, nvml = self.device, self.counters.nvml

        def with_cuda():
            used = float(nvml[0].nvmlDeviceGetMemoryInfo(nvml[1]).used) if nvml else None
            return (
                time.monotonic() - self.t0,
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
        self.cpu_s += time.thread_time() - cpu0
        if self._statm_fd is not None:
            os.close(self._statm_fd)

    @property
    def timeline(self) -> list[dict]:
        """The samples so far, one dict per sample (t in seconds since t0, bytes)."""
        if self._child is not None:
            self._read_child()
        keys = (
            ("t", "rss") if self.device.type != "cuda" else ("t", "rss", "cuda_allocated", "cuda_reserved", "nvml_used")
        )
        return [dict(zip(keys, row)) for row in list(self._raw)]

    def rss_peak_between(self, t_start: float, t_end: float) -> float | None:
        """The highest RSS sampled from t_start to t_end (seconds since t0), or None if no sample fell there."""
        if self._child is not None:
            self._read_child()
        values = [row[1] for row in list(self._raw) if t_start <= row[0] <= t_end and row[1] is not None]
        return max(values) if values else None

    def __del__(self):
        with contextlib.suppress(Exception):
            self.stop()  # never leave a sampler process behind
