"""What one load run measured: a typed record per request, and the figures drawn from them.

Every request the run measured is kept, failures included: a timeout counts in the latency tail at the
time it took, so p99 cannot look best when things are worst. Throughput (`rps`) counts successes only.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ailab.timing import LatencyStats, latency_stats

MIN_SAMPLES_FOR_P99 = 100  # below this, a "p99" is the maximum of a handful of requests: not reported
SEND_LAG_LIMIT_MS = 10.0  # an open loop whose p99 send lag is above this fell behind its schedule


class Record(NamedTuple):
    """One measured request. Times in seconds since the run started; `status` is the HTTP status or a
    word naming the failure ("timeout", "connect_error", "closed", or an exception's name)."""

    intended_s: float  # when it should have been sent (open loop); equal to sent_s in a closed loop
    sent_s: float  # when it was actually sent
    latency_ms: float  # from intended_s to the answer (or the failure)
    status: int | str

    @property
    def ok(self) -> bool:
        return isinstance(self.status, int) and 200 <= self.status < 300

    @property
    def done_s(self) -> float:
        return self.intended_s + self.latency_ms / 1e3

    @property
    def send_lag_ms(self) -> float:
        return (self.sent_s - self.intended_s) * 1e3


@dataclass
class Window:
    """Figures for one time window of the measured period (by completion time)."""

    t_s: float  # window start, seconds after warm-up ended
    n: int  # responses completed in the window (any status)
    rps: float  # successful responses per second in the window
    p50_ms: float  # over every response of the window, failures at the time they took
    p99_ms: float


@dataclass
class LoadResult:
    """What one load run measured. `rps` counts successful (2xx) responses after warm-up; `stats`
    counts every measured request, failures at the time they took; `ok_stats` successes only."""

    mode: str  # "closed" or "open"
    url: str
    clients: int | None
    rate_rps: float | None
    duration_s: float
    warmup_s: float
    records: list[Record]
    elapsed_s: float  # measured span: warm-up end -> last measured completion
    window_s: float = 1.0
    generator_cpu_s: float | None = None  # CPU seconds the load generator itself used (its own process)
    statuses: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self.records = [r if isinstance(r, Record) else Record(*r) for r in self.records]
        self.statuses = Counter(r.status for r in self.records)

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def n_ok(self) -> int:
        return sum(1 for r in self.records if r.ok)

    @property
    def errors_by_status(self) -> dict:
        """Non-2xx answers and transport failures ("timeout", "connect_error", ...) by kind."""
        return {
            str(k): v for k, v in sorted(self.statuses.items(), key=str) if not (isinstance(k, int) and 200 <= k < 300)
        }

    @property
    def error_rate(self) -> float:
        return 1 - self.n_ok / self.n if self.n else math.nan

    @property
    def rps(self) -> float:
        """Successful responses per second over the measured span (goodput)."""
        return self.n_ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def stats(self) -> LatencyStats:
        """Latency of every measured request, failures included at the time they took."""
        if not self.records:
            raise ValueError(f"no request to {self.url} was measured after warm-up")
        if not self.n_ok:
            raise ValueError(f"no successful response from {self.url} after warm-up; errors: {self.errors_by_status}")
        return latency_stats(r.latency_ms for r in self.records)

    @property
    def ok_stats(self) -> LatencyStats:
        """Latency of the successful responses only (what a client that got an answer saw)."""
        ok = [r.latency_ms for r in self.records if r.ok]
        if not ok:
            raise ValueError(f"no successful response from {self.url} after warm-up; errors: {self.errors_by_status}")
        return latency_stats(ok)

    @property
    def p99_reliable(self) -> bool:
        return self.n >= MIN_SAMPLES_FOR_P99

    @property
    def send_lag_p99_ms(self) -> float:
        """How late the generator sent its requests (open loop): p99 of actual minus intended send time."""
        return float(np.percentile([r.send_lag_ms for r in self.records], 99)) if self.records else math.nan

    @property
    def generator_behind(self) -> bool:
        """An open loop that could not keep its schedule measured itself, not the server: flag it."""
        return self.mode == "open" and self.send_lag_p99_ms > SEND_LAG_LIMIT_MS

    @property
    def generator_cpu_share(self) -> float | None:
        """The generator's CPU time over the run's wall time (1.0 = one core busy all along)."""
        if self.generator_cpu_s is None:
            return None
        return self.generator_cpu_s / (self.warmup_s + self.elapsed_s)

    @property
    def windows(self) -> list[Window]:
        """Per-window throughput and latency, by completion time, over the measured span."""
        n_win = max(1, int(self.elapsed_s // self.window_s))
        buckets: list[list[Record]] = [[] for _ in range(n_win)]
        for r in self.records:
            i = int((r.done_s - self.warmup_s) // self.window_s)
            if 0 <= i < n_win:
                buckets[i].append(r)
        out = []
        for i, b in enumerate(buckets):
            lat = [r.latency_ms for r in b]
            p50, p99 = np.percentile(lat, [50, 99]) if lat else (math.nan, math.nan)
            out.append(Window(i * self.window_s, len(b), sum(r.ok for r in b) / self.window_s, float(p50), float(p99)))
        return out

    def stable(self, tolerance_pct: float = 10.0, consecutive: int = 3) -> bool:
        """True when some `consecutive` windows in a row all have throughput within `tolerance_pct` %
        of their own mean: the run reached a steady state worth reporting."""
        rps = [w.rps for w in self.windows]
        for i in range(len(rps) - consecutive + 1):
            chunk = rps[i : i + consecutive]
            mean = sum(chunk) / consecutive
            if mean > 0 and max(abs(x - mean) for x in chunk) <= mean * tolerance_pct / 100:
                return True
        return False

    def summary(self) -> dict:
        """One flat JSON-able dict of the headline figures. p99 is left out (None) below
        MIN_SAMPLES_FOR_P99 requests: the tail of a few dozen requests is not a p99."""
        s = self.stats.as_dict() if self.n_ok else {}
        if s and not self.p99_reliable:
            s["p99_ms"] = None
        share = self.generator_cpu_share
        return {
            "mode": self.mode,
            "url": self.url,
            "clients": self.clients,
            "rate_rps": self.rate_rps,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "requests": self.n,
            "ok": self.n_ok,
            "rps": round(self.rps, 2),
            "error_rate": round(self.error_rate, 4) if self.n else None,
            "errors_by_status": self.errors_by_status,
            "stable": self.stable(),
            "p99_reliable": self.p99_reliable,
            "send_lag_p99_ms": round(self.send_lag_p99_ms, 3),
            "generator_behind": self.generator_behind,
            "generator_cpu_share": round(share, 3) if share is not None else None,
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()},
        }

    def to_json(self, path: str | None = None) -> str:
        """Summary plus per-window figures as JSON (written to `path` when given)."""
        doc = {**self.summary(), "windows": [vars(w) for w in self.windows]}
        text = json.dumps(doc, indent=1, default=float)
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def to_csv(self, path: str | None = None) -> str:
        """One row per measured request: intended and actual send time, latency, status."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["intended_s", "sent_s", "latency_ms", "status"])
        for r in self.records:
            w.writerow([f"{r.intended_s:.6f}", f"{r.sent_s:.6f}", f"{r.latency_ms:.3f}", r.status])
        if path:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(buf.getvalue())
        return buf.getvalue()

    def __str__(self) -> str:
        head = f"{self.mode} loop, " + (
            f"{self.clients} clients" if self.mode == "closed" else f"{self.rate_rps:g} req/s offered"
        )
        lat = str(self.stats) if self.n_ok else "no successful responses"
        return f"{head}: {self.rps:.1f} req/s ok, {lat}, errors {self.errors_by_status or 'none'}"
