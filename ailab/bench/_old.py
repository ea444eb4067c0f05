"""Load generation against any HTTP endpoint: closed loop, open loop, concurrency sweep with knee, soak.

- `closed_loop(url, payloads, clients, duration_s, warmup_s)`: N clients, each sends, waits, sends again.
  Throughput is what the server gives back; it can never exceed what N clients ask for.
- `open_loop(url, payloads, rate_rps, duration_s, warmup_s, seed)`: Poisson arrivals at a target rate.
  Latency is measured from the *intended* send time, so when the server stalls the requests that queue
  behind it count their wait (a closed loop, or an open loop that times from the actual send, would
  quietly stop sending and hide it: "coordinated omission").
- `sweep(...)` runs closed loops at rising concurrency and finds the knee: the highest throughput whose
  p99 stays within an SLO. `soak(...)` holds a fixed load and samples the server's RSS and latency, fits
  slopes and gives a verdict.

Warm-up requests are sent but excluded from every figure. The functions are synchronous wrappers over
asyncio + httpx.AsyncClient; they also work inside Jupyter (the loop runs on a helper thread there).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import csv
import io
import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import urlparse

import httpx
import numpy as np

from ailab.timing import LatencyStats, latency_stats


class BenchTargetError(ConnectionError):
    """The URL under test does not answer at all (refused, no route, wrong scheme)."""


@dataclass
class Window:
    """Figures for one time window of the measured period (by completion time)."""

    t_s: float        # window start, seconds after warm-up ended
    n: int            # responses completed in the window (any status)
    rps: float        # successful responses per second in the window
    p50_ms: float
    p99_ms: float


@dataclass
class LoadResult:
    """What one load run measured. `rps` and `stats` count successful (2xx) responses after warm-up."""

    mode: str                     # "closed" or "open"
    url: str
    clients: int | None
    rate_rps: float | None
    duration_s: float
    warmup_s: float
    records: list[tuple[float, float, float, Any]]  # (intended_s, sent_s, latency_ms, status) after warm-up
    elapsed_s: float              # measured span: warm-up end -> last measured completion
    window_s: float = 1.0
    statuses: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self.statuses = Counter(r[3] for r in self.records)

    @property
    def n_ok(self) -> int:
        return sum(v for k, v in self.statuses.items() if isinstance(k, int) and 200 <= k < 300)

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def errors_by_status(self) -> dict:
        """Non-2xx answers and transport failures ("timeout", "connect_error", ...) by kind."""
        return {str(k): v for k, v in sorted(self.statuses.items(), key=str)
                if not (isinstance(k, int) and 200 <= k < 300)}

    @property
    def error_rate(self) -> float:
        return 1 - self.n_ok / self.n if self.n else math.nan

    @property
    def rps(self) -> float:
        """Successful responses per second over the measured span (goodput)."""
        return self.n_ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def stats(self) -> LatencyStats:
        ok = [r[2] for r in self.records if isinstance(r[3], int) and 200 <= r[3] < 300]
        if not ok:
            raise ValueError(f"no successful response from {self.url} after warm-up; errors: {self.errors_by_status}")
        return latency_stats(ok)

    @property
    def windows(self) -> list[Window]:
        """Per-window throughput and latency, by completion time, over the measured span."""
        n_win = max(1, int(self.elapsed_s // self.window_s))
        buckets: list[list[tuple]] = [[] for _ in range(n_win)]
        for r in self.records:
            done = r[0] + r[2] / 1e3 - self.warmup_s  # intended + latency = completion (open) / sent (closed)
            i = int(done // self.window_s)
            if 0 <= i < n_win:
                buckets[i].append(r)
        out = []
        for i, b in enumerate(buckets):
            ok = [r[2] for r in b if isinstance(r[3], int) and 200 <= r[3] < 300]
            p50, p99 = (np.percentile(ok, [50, 99]) if ok else (math.nan, math.nan))
            out.append(Window(i * self.window_s, len(b), len(ok) / self.window_s, float(p50), float(p99)))
        return out

    def stable(self, tolerance_pct: float = 10.0, consecutive: int = 3) -> bool:
        """True when some `consecutive` windows in a row all have throughput within `tolerance_pct` %
        of their own mean: the run reached a steady state worth reporting."""
        rps = [w.rps for w in self.windows]
        for i in range(len(rps) - consecutive + 1):
            chunk = rps[i:i + consecutive]
            mean = sum(chunk) / consecutive
            if mean > 0 and max(abs(x - mean) for x in chunk) <= mean * tolerance_pct / 100:
                return True
        return False

    def summary(self) -> dict:
        """One flat JSON-able dict of the headline figures."""
        s = self.stats.as_dict() if self.n_ok else {}
        return {"mode": self.mode, "url": self.url, "clients": self.clients, "rate_rps": self.rate_rps,
                "duration_s": self.duration_s, "warmup_s": self.warmup_s, "requests": self.n, "ok": self.n_ok,
                "rps": round(self.rps, 2), "error_rate": round(self.error_rate, 4) if self.n else None,
                "errors_by_status": self.errors_by_status, "stable": self.stable(),
                **{k: round(v, 3) if isinstance(v, float) else v for k, v in s.items()}}

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
            w.writerow([f"{r[0]:.6f}", f"{r[1]:.6f}", f"{r[2]:.3f}", r[3]])
        if path:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(buf.getvalue())
        return buf.getvalue()

    def __str__(self) -> str:
        head = f"{self.mode} loop, " + (f"{self.clients} clients" if self.mode == "closed" else f"{self.rate_rps:g} req/s offered")
        lat = str(self.stats) if self.n_ok else "no successful responses"
        return f"{head}: {self.rps:.1f} req/s ok, {lat}, errors {self.errors_by_status or 'none'}"


# --------------------------------------------------------------------------- input checks and transport

def _check_args(url: str, payloads, duration_s: float, warmup_s: float) -> list:
    parsed = urlparse(url) if isinstance(url, str) else None
    if not parsed or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"url must be an http(s) URL such as http://127.0.0.1:8000/predict (got {url!r})")
    if not (duration_s > 0) or not (warmup_s >= 0):
        raise ValueError(f"duration_s must be > 0 and warmup_s >= 0 (got {duration_s}, {warmup_s})")
    if payloads is None:
        return [None]  # GET requests
    if isinstance(payloads, (dict, str, bytes)):
        raise TypeError("payloads is a list of request bodies (one per request, reused in turn); wrap one body as [body]")
    payloads = list(payloads)
    if not payloads:
        raise ValueError("payloads is empty: give at least one request body, or None to send GET requests")
    return payloads


async def _send(client: httpx.AsyncClient, url: str, body) -> Any:
    """One request; returns the HTTP status, or a word naming the transport failure."""
    try:
        r = await (client.get(url) if body is None else client.post(url, json=body))
        return r.status_code
    except httpx.TimeoutException:
        return "timeout"
    except httpx.ConnectError:
        return "connect_error"
    except httpx.HTTPError as e:
        return type(e).__name__


async def _preflight(client: httpx.AsyncClient, url: str, body, connect_timeout_s: float) -> None:
    """Fail fast and clearly when nothing answers at `url`, instead of a run full of errors (or a hang)."""
    try:
        await (client.get(url, timeout=connect_timeout_s) if body is None
               else client.post(url, json=body, timeout=httpx.Timeout(30.0, connect=connect_timeout_s)))
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as e:
        raise BenchTargetError(f"cannot reach {url}: {type(e).__name__}: {e or 'no answer'}. "
                               "Is the server running, and is the host and port right?") from None


def _run(coro_fn):
    """asyncio.run(coro_fn()), or on a helper thread when a loop already runs here (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(lambda: asyncio.run(coro_fn())).result()


class _Progress:
    """A tqdm bar over wall-clock seconds, only for long runs (or when asked)."""

    def __init__(self, total_s: float, desc: str, enabled: bool | None):
        self.bar = None
        if enabled or (enabled is None and total_s >= 20):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=round(total_s), desc=desc, unit="s")
        self.shown = 0

    def update(self, t: float):
        if self.bar is not None and int(t) > self.shown:
            self.bar.update(min(int(t), self.bar.total) - self.shown)
            self.shown = min(int(t), self.bar.total)

    def close(self):
        if self.bar is not None:
            self.bar.close()


async def _ticker(progress: _Progress, t0: float, end: float, hooks=()):
    while (now := time.perf_counter() - t0) < end:
        progress.update(now)
        for hook in hooks:
            hook(now)
        await asyncio.sleep(0.25)
    progress.update(end)


# --------------------------------------------------------------------------- closed and open loop

def closed_loop(url: str, payloads: Sequence | None, clients: int = 8, duration_s: float = 10.0,
                warmup_s: float = 2.0, timeout_s: float = 10.0, window_s: float = 1.0,
                connect_timeout_s: float = 2.0, progress: bool | None = None, _hooks=()) -> LoadResult:
    """`clients` concurrent clients, each sending its next request as soon as the last one is answered."""
    payloads = _check_args(url, payloads, duration_s, warmup_s)
    if not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients must be a whole number >= 1 (got {clients!r})")
    end = warmup_s + duration_s

    async def main():
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            await _preflight(client, url, payloads[0], connect_timeout_s)
            records, counter = [], iter(range(1 << 62))
            t0 = time.perf_counter()

            async def one_client():
                while (sent := time.perf_counter() - t0) < end:
                    status = await _send(client, url, payloads[next(counter) % len(payloads)])
                    lat = (time.perf_counter() - t0 - sent) * 1e3
                    if sent >= warmup_s:  # warm-up requests are sent, not counted
                        records.append((sent, sent, lat, status))

            bar = _Progress(end, f"closed loop x{clients}", progress)
            await asyncio.gather(_ticker(bar, t0, end, _hooks), *(one_client() for _ in range(clients)))
            bar.close()
            last = max((r[1] + r[2] / 1e3 for r in records), default=end)
            return LoadResult("closed", url, clients, None, duration_s, warmup_s, records,
                              max(last, end) - warmup_s, window_s)

    return _run(main)


def open_loop(url: str, payloads: Sequence | None, rate_rps: float = 50.0, duration_s: float = 10.0,
              warmup_s: float = 2.0, seed: int = 0, timeout_s: float = 10.0, max_in_flight: int = 256,
              window_s: float = 1.0, connect_timeout_s: float = 2.0, progress: bool | None = None,
              _hooks=()) -> LoadResult:
    """Poisson arrivals at `rate_rps`; each latency counts from the request's intended send time.

    At most `max_in_flight` connections are open; a request that waits for one is still timed from
    when it *should* have been sent, so client-side queueing shows up as latency, never as a lower rate.
    """
    payloads = _check_args(url, payloads, duration_s, warmup_s)
    if not (isinstance(rate_rps, (int, float)) and rate_rps > 0):
        raise ValueError(f"rate_rps must be a positive number of requests per second (got {rate_rps!r})")
    end = warmup_s + duration_s
    rng = np.random.default_rng(seed)
    # Exponential gaps between arrivals = a Poisson process (independent users, not a metronome).
    gaps = rng.exponential(1.0 / rate_rps, size=int(rate_rps * end * 1.5) + 16)
    intended = np.cumsum(gaps)
    intended = intended[intended < end]

    async def main():
        limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=None)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            await _preflight(client, url, payloads[0], connect_timeout_s)
            records = []
            t0 = time.perf_counter()

            async def one_request(i: int, at: float):
                await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
                sent = time.perf_counter() - t0
                status = await _send(client, url, payloads[i % len(payloads)])
                lat = (time.perf_counter() - t0 - at) * 1e3  # from the intended time, not `sent`
                if at >= warmup_s:
                    records.append((float(at), sent, lat, status))

            bar = _Progress(end, f"open loop {rate_rps:g}/s", progress)
            await asyncio.gather(_ticker(bar, t0, end, _hooks), *(one_request(i, at) for i, at in enumerate(intended)))
            bar.close()
            last = max((r[0] + r[2] / 1e3 for r in records), default=end)
            return LoadResult("open", url, None, float(rate_rps), duration_s, warmup_s, records,
                              max(last, end) - warmup_s, window_s)

    return _run(main)


# --------------------------------------------------------------------------- in a child process

def in_subprocess(kind: str, url: str, payloads: Sequence | None, process_timeout_s: float = 900.0,
                  **kwargs) -> LoadResult:
    """Run closed_loop or open_loop in a child Python process and return its LoadResult here.

    Use it when the server runs inside this process (start_in_thread): the load generator's JSON and
    socket work then has its own GIL instead of taking turns with the server it measures.
    """
    import subprocess
    import sys

    if kind not in ("closed_loop", "open_loop"):
        raise ValueError(f"kind must be 'closed_loop' or 'open_loop' (got {kind!r})")
    spec = json.dumps({"kind": kind, "url": url, "payloads": payloads, "kwargs": kwargs})
    proc = subprocess.run([sys.executable, "-m", "ailab.bench"], input=spec, capture_output=True, text=True,
                          timeout=process_timeout_s)
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
        if "BenchTargetError" in proc.stderr:
            raise BenchTargetError(err.split(": ", 1)[-1])
        raise RuntimeError(f"the load generator process failed: {err}")
    d = json.loads(proc.stdout)
    return LoadResult(d["mode"], d["url"], d["clients"], d["rate_rps"], d["duration_s"], d["warmup_s"],
                      [tuple(r) for r in d["records"]], d["elapsed_s"], d["window_s"])


def _child_main() -> None:
    spec = json.loads(sys.stdin.read())
    fn = {"closed_loop": closed_loop, "open_loop": open_loop}[spec["kind"]]
    r = fn(spec["url"], spec["payloads"], progress=False, **spec["kwargs"])
    print(json.dumps({"mode": r.mode, "url": r.url, "clients": r.clients, "rate_rps": r.rate_rps,
                      "duration_s": r.duration_s, "warmup_s": r.warmup_s, "records": r.records,
                      "elapsed_s": r.elapsed_s, "window_s": r.window_s}, default=float))


# --------------------------------------------------------------------------- sweep and knee

@dataclass
class SweepResult:
    slo_p99_ms: float
    max_error_rate: float
    results: list[LoadResult]

    @property
    def concurrencies(self) -> list[int]:
        return [r.clients for r in self.results]

    def points(self) -> list[dict]:
        out = []
        for r in self.results:
            p99 = r.stats.p99_ms if r.n_ok else math.inf
            ok = p99 <= self.slo_p99_ms and r.error_rate <= self.max_error_rate
            out.append({"clients": r.clients, "rps": r.rps, "p50_ms": r.stats.p50_ms if r.n_ok else math.inf,
                        "p99_ms": p99, "error_rate": r.error_rate, "within_slo": ok})
        return out

    @property
    def knee(self) -> dict | None:
        """The point with the highest throughput whose p99 (and error rate) stays within the SLO."""
        good = [p for p in self.points() if p["within_slo"]]
        return max(good, key=lambda p: p["rps"]) if good else None

    def figure(self):
        from ailab.viz import line_chart
        import plotly.graph_objects as go

        pts = self.points()
        fig = line_chart([p["clients"] for p in pts], {"p99 ms": [p["p99_ms"] for p in pts],
                                                        "p50 ms": [p["p50_ms"] for p in pts]},
                         "Concurrency sweep: latency rises once the server saturates", "concurrent clients",
                         "latency (ms)", log_x=True)
        fig.add_trace(go.Scatter(x=[p["clients"] for p in pts], y=[p["rps"] for p in pts], name="req/s",
                                 yaxis="y2", mode="lines+markers", line={"dash": "dot"}))
        fig.add_hline(y=self.slo_p99_ms, line_dash="dash", annotation_text=f"SLO p99 {self.slo_p99_ms:g} ms")
        fig.update_layout(yaxis2={"title": "req/s", "overlaying": "y", "side": "right"})
        if self.knee:
            fig.add_vline(x=self.knee["clients"], line_dash="dot", annotation_text="knee")
        return fig


def sweep(url: str, payloads: Sequence | None, concurrencies: Sequence[int] = (1, 2, 4, 8, 16, 32),
          slo_p99_ms: float = 200.0, duration_s: float = 5.0, warmup_s: float = 1.0,
          max_error_rate: float = 0.01, progress: bool | None = None, **kw) -> SweepResult:
    """A closed loop at each concurrency; `.knee` is the best throughput that still meets the SLO."""
    if not concurrencies or any(not isinstance(c, int) or c < 1 for c in concurrencies):
        raise ValueError(f"concurrencies must be whole numbers >= 1 (got {concurrencies!r})")
    results = []
    steps = list(concurrencies)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="sweep")
    for c in steps:
        results.append(closed_loop(url, payloads, c, duration_s, warmup_s, progress=False, **kw))
    return SweepResult(float(slo_p99_ms), float(max_error_rate), results)


# --------------------------------------------------------------------------- soak

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

    def figure(self):
        from ailab.viz import line_chart
        import plotly.graph_objects as go

        t = [s["t_s"] / 60 for s in self.samples]
        fig = line_chart(t, {"RSS (MB)": [s["rss_mb"] for s in self.samples]},
                         f"Soak: RSS slope {self.rss_slope_mb_per_min:+.2f} MB/min, verdict: {self.verdict}",
                         "minutes", "RSS (MB)")
        fig.add_trace(go.Scatter(x=t, y=[s["p99_ms"] for s in self.samples], name="p99 ms", yaxis="y2",
                                 mode="lines+markers", line={"dash": "dot"}))
        fig.update_layout(yaxis2={"title": "p99 (ms)", "overlaying": "y", "side": "right"})
        return fig


def soak(url: str, payloads: Sequence | None, duration_s: float = 60.0, clients: int = 8,
         pid: int | None = None, sample_every_s: float = 5.0, warmup_s: float = 2.0,
         rss_limit_mb_per_min: float = 1.0, p99_limit_ms_per_min: float = 20.0,
         progress: bool | None = None, **kw) -> SoakResult:
    """Hold `clients` of closed-loop load for `duration_s`, sampling RSS of `pid` (this process when None)
    and the latency of each sample period. Slopes are least-squares fits per minute."""
    import os

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
        lats = [r[2] for r in load.records if t - sample_every_s <= r[1] - warmup_s < t and isinstance(r[3], int)
                and 200 <= r[3] < 300]
        p50, p99 = np.percentile(lats, [50, 99]) if lats else (math.nan, math.nan)
        samples.append({"t_s": t, "rss_mb": mb, "p50_ms": float(p50), "p99_ms": float(p99),
                        "rps": len(lats) / sample_every_s})
    return SoakResult(load, samples, pid, rss_limit_mb_per_min, p99_limit_ms_per_min)


if __name__ == "__main__":
    _child_main()
