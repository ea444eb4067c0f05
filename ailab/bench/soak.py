"""A soak: hold a fixed load for minutes, sample the server's RSS and latency, fit slopes, give a verdict."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ailab.bench.loops import closed_loop
from ailab.bench.records import LoadResult


def _slope_per_min(t_s: Sequence[float], ys: Sequence[float]) -> float:
    t, y = np.asarray(t_s, float), np.asarray(ys, float)
    keep = np.isfinite(y)
    if keep.sum() < 3:
        return math.nan
    return float(np.polyfit(t[keep] / 60.0, y[keep], 1)[0])


def process_rss_mb(pid: int, children: bool = True) -> float:
    """Resident memory of `pid` (plus its children: worker processes count too), in MB."""
    import psutil

    proc = psutil.Process(pid)
    procs = [proc] + (proc.children(recursive=True) if children else [])
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


@dataclass
class SoakResult:
    load: LoadResult
    samples: list[dict]           # {"t_s", "rss_mb", "p50_ms", "p99_ms", "rps"}
    pid: int | None
    rss_limit_mb_per_min: float
    p99_limit_ms_per_min: float

    @property
    def minutes(self) -> float:
        return self.load.duration_s / 60

    @property
    def rss_slope_mb_per_min(self) -> float:
        return _slope_per_min([s["t_s"] for s in self.samples], [s["rss_mb"] for s in self.samples])

    @property
    def p99_slope_ms_per_min(self) -> float:
        return _slope_per_min([s["t_s"] for s in self.samples], [s["p99_ms"] for s in self.samples])

    @property
    def verdict(self) -> str:
        """"steady", "memory grows", "latency drifts" or "memory grows, latency drifts"."""
        bad = []
        if self.rss_slope_mb_per_min > self.rss_limit_mb_per_min:
            bad.append("memory grows")
        if self.p99_slope_ms_per_min > self.p99_limit_ms_per_min:
            bad.append("latency drifts")
        return ", ".join(bad) or "steady"

    def summary(self) -> dict:
        return {"soak_minutes": round(self.minutes, 3), "soak_rss_slope_mb_per_min": round(self.rss_slope_mb_per_min, 4),
                "soak_p99_slope_ms_per_min": round(self.p99_slope_ms_per_min, 3), "soak_verdict": self.verdict,
                "soak_rss_start_mb": round(self.samples[0]["rss_mb"], 1) if self.samples else None,
                "soak_rss_end_mb": round(self.samples[-1]["rss_mb"], 1) if self.samples else None,
                "soak_rps": round(self.load.rps, 2), "soak_p99_ms": round(self.load.stats.p99_ms, 2)}


def soak(url: str, payloads: Sequence | None, duration_s: float = 60.0, clients: int = 8,
         pid: int | None = None, sample_every_s: float = 5.0, warmup_s: float = 2.0,
         rss_limit_mb_per_min: float = 1.0, p99_limit_ms_per_min: float = 20.0,
         progress: bool | None = None, **kw) -> SoakResult:
    """Hold `clients` of closed-loop load for `duration_s`, sampling RSS of `pid` (this process when None)
    and the latency of each sample period. Slopes are least-squares fits per minute."""
    if not sample_every_s > 0:
        raise ValueError(f"sample_every_s must be > 0 (got {sample_every_s})")
    if duration_s < 3 * sample_every_s:
        raise ValueError(f"a soak needs at least 3 samples to fit a slope: duration_s ({duration_s}) "
                         f">= 3 * sample_every_s ({sample_every_s})")
    target = pid if pid is not None else os.getpid()
    process_rss_mb(target)  # fail now (NoSuchProcess) rather than after the run
    rss: list[tuple[float, float]] = []
    next_at = [warmup_s]

    def sample(now: float):
        if now >= next_at[0]:
            rss.append((now - warmup_s, process_rss_mb(target)))
            next_at[0] += sample_every_s

    load = closed_loop(url, payloads, clients, duration_s, warmup_s, progress=progress, _hooks=(sample,), **kw)
    samples = []
    for t, mb in rss:
        lats = [r.latency_ms for r in load.records if t - sample_every_s <= r.sent_s - warmup_s < t]
        p50, p99 = np.percentile(lats, [50, 99]) if lats else (math.nan, math.nan)
        samples.append({"t_s": t, "rss_mb": mb, "p50_ms": float(p50), "p99_ms": float(p99),
                        "rps": len(lats) / sample_every_s})
    return SoakResult(load, samples, pid, rss_limit_mb_per_min, p99_limit_ms_per_min)
