"""Sweeps: a closed loop at rising concurrency (the best throughput within an SLO), and an open loop at
rising offered rates (the capacity knee: the highest rate the server keeps up with).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ailab.bench.loops import closed_loop, open_loop
from ailab.bench.process import process_cpu_s
from ailab.bench.records import LoadResult


@dataclass
class SweepResult:
    """A closed-loop sweep: `results` holds every run, round after round (each round visits every concurrency
    once, in order). A figure of one concurrency is its median over the rounds; a comparison of two is the
    median of their per-round ratios (`ratio`), since both ran within the same minute of the machine's load."""

    slo_p99_ms: float
    max_error_rate: float
    results: list[LoadResult]
    server_cpu_s: list[float] | None = None  # per run, the server's CPU seconds over it (sweep's server_pid)

    @property
    def concurrencies(self) -> list[int]:
        return list(dict.fromkeys(r.clients for r in self.results))

    def _by_clients(self) -> dict[int, list[tuple[LoadResult, float | None]]]:
        by: dict[int, list[tuple[LoadResult, float | None]]] = {}
        cpu = self.server_cpu_s or [None] * len(self.results)
        for r, c in zip(self.results, cpu):
            by.setdefault(r.clients, []).append((r, c))
        return by

    @staticmethod
    def _figures(run: tuple[LoadResult, float | None]) -> dict:
        r, cpu_s = run
        figures = {
            "rps": r.rps,
            "p50_ms": r.stats.p50_ms if r.n_ok else math.inf,
            "p99_ms": r.stats.p99_ms if r.n_ok else math.inf,  # failures count in the tail
            "error_rate": r.error_rate,
        }
        if cpu_s is not None:
            # The run's CPU (warm-up included) over the requests it measured: every step spends the same share of
            # its time warming up, so steps compare. What batching saves, whatever else the machine is doing.
            figures["server_cpu_ms_per_request"] = 1e3 * cpu_s / r.n_ok if r.n_ok else math.inf
        return figures

    def points(self) -> list[dict]:
        out = []
        for clients, runs in self._by_clients().items():
            figs = [self._figures(r) for r in runs]
            point = {"clients": clients, **{k: float(np.median([f[k] for f in figs])) for k in figs[0]}}
            point["within_slo"] = point["p99_ms"] <= self.slo_p99_ms and point["error_rate"] <= self.max_error_rate
            out.append(point)
        return out

    def ratio(self, a: int, b: int, key: str = "rps") -> float:
        """`key` at `a` clients over `key` at `b` clients: the median of the per-round ratios. One round's figure
        against another's would compare the neighbour's load in those seconds as much as the concurrencies."""
        by = self._by_clients()
        if a not in by or b not in by:
            raise ValueError(f"this sweep ran {self.concurrencies} clients; ratio() asked for {a} and {b}")
        if key not in self._figures(by[a][0]):
            raise ValueError(
                f"this sweep has no {key!r} (it has {sorted(self._figures(by[a][0]))}; server_cpu_ms_per_request "
                "needs sweep(..., server_pid=the server's process id))"
            )
        pairs = [(self._figures(x)[key], self._figures(y)[key]) for x, y in zip(by[a], by[b])]
        return float(np.median([x / y if y else math.inf for x, y in pairs]))

    @property
    def best_within_slo(self) -> dict | None:
        """The point with the highest throughput whose p99 (and error rate) stays within the SLO.

        Not a knee: a closed loop cannot offer more than its clients ask for. The capacity knee comes from
        an open-loop sweep by rate (`rate_sweep`)."""
        good = [p for p in self.points() if p["within_slo"]]
        return max(good, key=lambda p: p["rps"]) if good else None


def sweep(
    url: str,
    payloads: Sequence | None,
    concurrencies: Sequence[int] = (1, 2, 4, 8, 16, 32),
    slo_p99_ms: float = 200.0,
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
    max_error_rate: float = 0.01,
    progress: bool | None = None,
    rounds: int = 1,
    server_pid: int | None = None,
    **kw,
) -> SweepResult:
    """A closed loop at each concurrency; `.best_within_slo` is the best throughput that still meets the SLO.

    rounds: visit every concurrency `rounds` times, in turn (1, 4, 16, 1, 4, 16, ...), each for `duration_s`.
    On a shared machine the load drifts: in one pass, a busy minute lands on some concurrencies and not others.
    server_pid: the server's process, to count the CPU it spends per request at each concurrency
    (`server_cpu_ms_per_request`). Throughput depends on how much of the cores the server gets; the CPU a request
    costs it hardly does, so this is what shows batching's saving beside a busy neighbour."""
    if not concurrencies or any(not isinstance(c, int) or c < 1 for c in concurrencies):
        raise ValueError(f"concurrencies must be whole numbers >= 1 (got {concurrencies!r})")
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ValueError(f"rounds must be a whole number >= 1 (got {rounds!r})")
    results, cpu = [], []
    steps = [c for _ in range(rounds) for c in dict.fromkeys(concurrencies)]
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="sweep")
    for c in steps:
        before = process_cpu_s(server_pid) if server_pid is not None else 0.0
        results.append(closed_loop(url, payloads, c, duration_s, warmup_s, progress=False, **kw))
        cpu.append(process_cpu_s(server_pid) - before if server_pid is not None else None)
    return SweepResult(float(slo_p99_ms), float(max_error_rate), results, cpu if server_pid is not None else None)


# --------------------------------------------------------------------------- by offered rate (open loop)


@dataclass
class RateSweepResult:
    slo_p99_ms: float
    max_error_rate: float
    keep_up: float  # the share of arrivals the server must serve as they come (see keeps_up)
    results: list[LoadResult]

    def points(self) -> list[dict]:
        out = []
        for r in self.results:
            p99 = r.stats.p99_ms if r.n_ok else math.inf
            kept = keeps_up(r, self.keep_up, self.max_error_rate)
            out.append(
                {
                    "offered_rps": r.rate_rps,
                    "rps": r.rps,
                    "p50_ms": r.stats.p50_ms if r.n_ok else math.inf,
                    "p99_ms": p99,
                    "error_rate": r.error_rate,
                    "send_lag_p99_ms": r.send_lag_p99_ms,
                    "generator_behind": r.generator_behind,
                    "keeps_up": kept,
                    "within_slo": kept and p99 <= self.slo_p99_ms,
                }
            )
        return out

    @property
    def capacity_knee(self) -> dict | None:
        """The highest offered rate the server kept up with (see `keeps_up`; errors within
        bound) while its p99 stayed within the SLO: past it, the queue grows for as long as the load lasts."""
        good = [p for p in self.points() if p["within_slo"]]
        return max(good, key=lambda p: p["offered_rps"]) if good else None


def keeps_up(r: LoadResult, keep_up: float = 0.9, max_error_rate: float = 0.01) -> bool:
    """Did the server keep up with an open loop's arrivals? Its errors stay within bound, and no queue
    builds: a server that serves a share c of what arrives makes each arrival wait (1 - c) s longer per
    second of load, so the least-squares slope of latency against arrival time is 1 - c. It kept up when
    that slope is at most 1 - keep_up. (Poisson arrivals offer more or fewer than the nominal rate over a
    few seconds, so a throughput compared with the nominal rate would judge chance, not the server.)"""
    if r.n < 3 or r.n_ok < (1 - max_error_rate) * r.n:
        return False
    t = np.array([x.intended_s for x in r.records])
    lat_s = np.array([x.latency_ms for x in r.records]) / 1e3
    slope = float(np.polyfit(t, lat_s, 1)[0]) if np.ptp(t) > 0 else 0.0
    return slope <= 1 - keep_up


def rate_sweep(
    url: str,
    payloads: Sequence | None,
    rates_rps: Sequence[float],
    slo_p99_ms: float = 200.0,
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
    max_error_rate: float = 0.01,
    keep_up: float = 0.9,
    ramp: int = 0,
    **kw,
) -> RateSweepResult:
    """An open loop at each offered rate, lowest first; `.capacity_knee` is where the server stops keeping up.

    ramp: while the highest rate so far was kept up with, offer 1.5x it again, at most `ramp` more times.
    Rates chosen from an earlier measurement can all fall short of the capacity (on a shared machine it
    drifts by half within a minute); a sweep that never saw the server fall behind has found no knee.
    """
    if not rates_rps or any(not (isinstance(r, (int, float)) and r > 0) for r in rates_rps):
        raise ValueError(f"rates_rps must be positive numbers of requests per second (got {rates_rps!r})")
    if not (isinstance(ramp, int) and ramp >= 0):
        raise ValueError(f"ramp must be a whole number of extra rates, 0 or more (got {ramp!r})")
    results = [
        open_loop(url, payloads, float(r), duration_s, warmup_s, progress=False, **kw) for r in sorted(rates_rps)
    ]
    for _ in range(ramp):
        if not keeps_up(results[-1], keep_up, max_error_rate):
            break
        results.append(open_loop(url, payloads, 1.5 * results[-1].rate_rps, duration_s, warmup_s, progress=False, **kw))
    return RateSweepResult(float(slo_p99_ms), float(max_error_rate), float(keep_up), results)


def rate_view(points: Sequence[dict], offered_rps: float, slo_p99_ms: float, keep_up: float = 0.9) -> dict:
    """What the offered-rate widget draws, replaying a rate sweep's measured `points` (RateSweepResult.points()):
    goodput as a share of the offered rate and p99 as a share of the SLO, against the offered rate, on one
    axis where 100 % is the line p99 must stay under; "keeps up" is `keeps_up`'s verdict (no queue building).
    The title reads the measured point at `offered_rps`. Returns viz.line_chart kwargs.
    """
    pts = sorted(points, key=lambda p: p["offered_rps"])
    rates = [p["offered_rps"] for p in pts]
    chosen = [p for p in pts if math.isclose(p["offered_rps"], offered_rps, rel_tol=1e-9)]
    if not chosen:
        raise ValueError(f"offered_rps={offered_rps!r} was not measured; choose one of {rates}")
    if not slo_p99_ms > 0:
        raise ValueError(f"slo_p99_ms must be positive, got {slo_p99_ms!r}")
    c = chosen[0]

    def p99_share(p):
        return None if math.isinf(p["p99_ms"]) else 100 * p["p99_ms"] / slo_p99_ms

    verdict = (
        ("keeps up" if c["keeps_up"] else "falls behind")
        + ", "
        + ("within" if c["within_slo"] else "breaks")
        + " the SLO"
    )
    p99 = "no answer" if math.isinf(c["p99_ms"]) else f"{c['p99_ms']:.0f} ms"
    return {
        "x": rates,
        "series": {
            "goodput, % of offered": [100 * p["rps"] / p["offered_rps"] for p in pts],
            f"p99, % of the {slo_p99_ms:g} ms SLO": [p99_share(p) for p in pts],
            "100 %": [100.0] * len(pts),
        },
        "title": f"offered {c['offered_rps']:.1f} req/s: served {c['rps']:.1f} "
        f"({c['rps'] / c['offered_rps']:.0%}), p99 {p99}: {verdict}",
        "x_title": "offered rate (requests/s, open loop)",
        "y_title": "%",
        "subtitle": f"measured points replayed; keeping up means serving at least {keep_up:.0%} of arrivals as they "
        "come (latency does not grow with the load), no errors",
    }
