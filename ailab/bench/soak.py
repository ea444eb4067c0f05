"""A soak: hold a fixed load for minutes, sample the server's RSS and latency, fit slopes, give a verdict.

A verdict needs data behind it. A slope is a least-squares fit, and it is called only when its 95 % interval
lies wholly on one side of the limit; memory is said to grow only when the fitted growth over the run also
exceeds what one allocator step explains (RSS moves in arena-sized steps while caches and pools fill during
the first minutes: a 1-minute soak once fitted 2.0 MB/min from 631.1 -> 632.6 MB on a server that a 10-minute
soak showed flat). Otherwise the verdict is "too short to tell", with the reason."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ailab.bench.loops import closed_loop
from ailab.bench.process import process_tree_rss_mib
from ailab.bench.records import LoadResult


# Growth in total below this is within one allocator step (pymalloc arenas are 1 MiB, glibc grows its heaps in
# chunks, and caches fill early); it is not evidence of a leak however steep the fitted line.
RSS_STEP_MB = 4.0


def _fit_per_min(t_s: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope per minute, its standard error); nan where fewer than 3 finite points (se: fewer than 4)."""
    t, y = np.asarray(t_s, float), np.asarray(ys, float)
    keep = np.isfinite(y)
    n = int(keep.sum())
    if n < 3:
        return math.nan, math.nan
    x = t[keep] / 60.0
    (slope, intercept) = np.polyfit(x, y[keep], 1)
    spread = float(((x - x.mean()) ** 2).sum())
    if n < 4 or spread == 0:
        return float(slope), math.nan
    residual = y[keep] - (slope * x + intercept)
    return float(slope), float(math.sqrt((residual**2).sum() / (n - 2) / spread))


def _slope_per_min(t_s: Sequence[float], ys: Sequence[float]) -> float:
    return _fit_per_min(t_s, ys)[0]


def _call(slope: float, se: float, limit: float) -> str:
    """ "over" or "under" when the slope's 95 % interval (about 2 standard errors) is on one side of the limit."""
    if not (math.isfinite(slope) and math.isfinite(se)):
        return "unknown"
    if slope - 2 * se > limit:
        return "over"
    if slope + 2 * se <= limit:
        return "under"
    return "unknown"


_WORDS = {"over": "over the limit", "under": "under the limit", "unknown": "not enough data to tell"}


@dataclass
class SoakResult:
    load: LoadResult
    samples: list[dict]  # {"t_s", "rss_mib", "p50_ms", "p99_ms", "rps"}
    pid: int | None
    rss_limit_mb_per_min: float
    p99_limit_ms_per_min: float

    @property
    def minutes(self) -> float:
        return self.load.duration_s / 60

    @property
    def rss_slope_mb_per_min(self) -> float:
        return _slope_per_min([s["t_s"] for s in self.samples], [s["rss_mib"] for s in self.samples])

    @property
    def p99_slope_ms_per_min(self) -> float:
        return _slope_per_min([s["t_s"] for s in self.samples], [s["p99_ms"] for s in self.samples])

    def _column(self, key: str) -> tuple[list[float], list[float]]:
        return [s["t_s"] for s in self.samples], [s[key] for s in self.samples]

    def _calls(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """For memory and for latency: ("over" | "under" | "unknown", why in words)."""
        rss, rss_se = _fit_per_min(*self._column("rss_mib"))
        p99, p99_se = _fit_per_min(*self._column("p99_ms"))
        memory = _call(rss, rss_se, self.rss_limit_mb_per_min)
        growth = rss * self.minutes if math.isfinite(rss) else math.nan
        memory_why = (
            f"RSS slope {rss:+.2f} ± {2 * rss_se:.2f} MB/min (95 %) against a limit of {self.rss_limit_mb_per_min:g}"
        )
        if memory == "over" and not growth > RSS_STEP_MB:
            memory = "unknown"
            memory_why += (
                f", but that is {growth:.1f} MB over {self.minutes:.1f} min, within one allocator step "
                f"({RSS_STEP_MB:g} MB): run longer"
            )
        latency_why = (
            f"p99 slope {p99:+.1f} ± {2 * p99_se:.1f} ms/min (95 %) against a limit of {self.p99_limit_ms_per_min:g}"
        )
        return (memory, memory_why), (_call(p99, p99_se, self.p99_limit_ms_per_min), latency_why)

    @property
    def verdict(self) -> str:
        """ "steady", "memory grows", "latency drifts", "memory grows, latency drifts" or "too short to tell":
        a drift is named only when the data show it, and "steady" only when they rule both out."""
        (memory, _), (latency, _) = self._calls()
        bad = [name for name, call in (("memory grows", memory), ("latency drifts", latency)) if call == "over"]
        if bad:
            return ", ".join(bad)
        return "steady" if memory == latency == "under" else "too short to tell"

    @property
    def verdict_reason(self) -> str:
        (memory, memory_why), (latency, latency_why) = self._calls()
        return f"{memory_why}: {_WORDS[memory]}; {latency_why}: {_WORDS[latency]}"

    def summary(self) -> dict:
        return {
            "soak_minutes": round(self.minutes, 3),
            "soak_rss_slope_mb_per_min": round(self.rss_slope_mb_per_min, 4),
            "soak_p99_slope_ms_per_min": round(self.p99_slope_ms_per_min, 3),
            "soak_verdict": self.verdict,
            "soak_verdict_reason": self.verdict_reason,
            "soak_rss_start_mb": round(self.samples[0]["rss_mib"], 1) if self.samples else None,
            "soak_rss_end_mb": round(self.samples[-1]["rss_mib"], 1) if self.samples else None,
            "soak_rps": round(self.load.rps, 2),
            "soak_p99_ms": round(self.load.stats.p99_ms, 2),
        }


def soak(
    url: str,
    payloads: Sequence | None,
    duration_s: float = 60.0,
    clients: int = 8,
    pid: int | None = None,
    sample_every_s: float = 5.0,
    warmup_s: float = 2.0,
    rss_limit_mb_per_min: float = 1.0,
    p99_limit_ms_per_min: float = 20.0,
    progress: bool | None = None,
    **kw,
) -> SoakResult:
    """Hold `clients` of closed-loop load for `duration_s`, sampling RSS of `pid` (this process when None)
    and the latency of each sample period. Slopes are least-squares fits per minute."""
    if not sample_every_s > 0:
        raise ValueError(f"sample_every_s must be > 0 (got {sample_every_s})")
    if duration_s < 3 * sample_every_s:
        raise ValueError(
            f"a soak needs at least 3 samples to fit a slope: duration_s ({duration_s}) "
            f">= 3 * sample_every_s ({sample_every_s})"
        )
    target = pid if pid is not None else os.getpid()
    process_tree_rss_mib(target)  # fail now (NoSuchProcess) rather than after the run
    rss: list[tuple[float, float]] = []
    next_at = [warmup_s]

    def sample(now: float):
        if now >= next_at[0]:
            rss.append((now - warmup_s, process_tree_rss_mib(target)))
            next_at[0] += sample_every_s

    load = closed_loop(url, payloads, clients, duration_s, warmup_s, progress=progress, _hooks=(sample,), **kw)
    samples = []
    for t, mib in rss:
        lats = [r.latency_ms for r in load.records if t - sample_every_s <= r.sent_s - warmup_s < t]
        p50, p99 = np.percentile(lats, [50, 99]) if lats else (math.nan, math.nan)
        samples.append(
            {"t_s": t, "rss_mib": mib, "p50_ms": float(p50), "p99_ms": float(p99), "rps": len(lats) / sample_every_s}
        )
    return SoakResult(load, samples, pid, rss_limit_mb_per_min, p99_limit_ms_per_min)
