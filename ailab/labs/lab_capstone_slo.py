"""Checks for the capstone lab: tune a service to meet an SLO (p99 within a bound at a stated rate).

The learner writes two things:
  slo_verdict(result, target_rps, p99_bound_ms, max_error_rate) -> (ok, reason)
      judge one ailab.bench LoadResult against the SLO;
  a server configuration (create_app settings: max_batch_size, max_wait_ms, max_queue, ...)
      that meets the SLO on this machine under an open-loop (Poisson) load at the stated rate.

The checks reject a verdict that looks only at throughput, at the mean, or ignores errors; and a
service that keeps up with the rate but not the p99 (e.g. a long batching wait).
"""
from __future__ import annotations

import numpy as np

from ailab.bench import LoadResult
from ailab.labs.core import check, expect

LAB = "lab_capstone_slo"
TARGET_RPS = 50.0        # the stated rate (open loop, Poisson arrivals)
P99_BOUND_MS = 300.0     # the stated bound
MAX_ERROR_RATE = 0.01
ALLOWED_SETTINGS = {"max_batch_size", "max_wait_ms", "max_queue", "request_timeout_s", "torch_threads"}


def official_verdict(result: LoadResult, target_rps: float = TARGET_RPS, p99_bound_ms: float = P99_BOUND_MS,
                     max_error_rate: float = MAX_ERROR_RATE) -> tuple[bool, str]:
    """The reference judgement the live check uses."""
    if result.n_ok == 0:
        return False, f"no successful response; errors {result.errors_by_status}"
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s, below 90 % of the {target_rps:g} req/s offered")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms is over the {p99_bound_ms:g} ms bound")
    if result.error_rate > max_error_rate:
        problems.append(f"{result.error_rate:.1%} of requests failed {result.errors_by_status}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def synthetic_result(rps: float, latencies_ms, error_share: float = 0.0, seconds: float = 10.0) -> LoadResult:
    """A LoadResult with a given throughput, latency distribution and share of 503s (for checking verdicts)."""
    lat = np.resize(np.asarray(latencies_ms, float), int(rps * seconds))
    n_err = int(round(error_share * len(lat) / (1 - error_share))) if error_share < 1 else len(lat)
    recs = [(i / rps, i / rps, float(v), 200) for i, v in enumerate(lat)]
    recs += [(i / rps, i / rps, 5.0, 503) for i in range(n_err)]
    return LoadResult("open", "http://127.0.0.1:1/v1/predict", None, rps, seconds, 0.0, recs, seconds)


def _cases():
    rng = np.random.default_rng(0)
    good = rng.uniform(40, 120, 1000)                              # p99 ~ 120 ms
    tail = np.concatenate([rng.uniform(40, 80, 960), np.full(40, 900.0)])  # mean ~ 93 ms, p99 900 ms
    return [
        ("meets every part of the SLO", synthetic_result(52, good), True),
        ("keeps up with the rate but p99 is 900 ms", synthetic_result(52, tail), False),
        ("fast answers but only 30 req/s served", synthetic_result(30, good), False),
        ("fast, on rate, but 5 % answered 503", synthetic_result(52, good, error_share=0.05), False),
    ]


@check(LAB, "slo_verdict")
def check_slo_verdict(slo_verdict) -> None:
    for name, result, want in _cases():
        got = slo_verdict(result, TARGET_RPS, P99_BOUND_MS, MAX_ERROR_RATE)
        expect(isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (bool, np.bool_)),
               f"slo_verdict should return (ok: bool, reason: str); it returned {got!r}")
        ok, reason = got
        expect(bool(ok) == want, f"for a run that {name}, slo_verdict said ok={ok} ({reason!r}); expected ok={want}. "
               "An SLO has three parts: throughput, p99 (not the mean) and errors")
        if not want:
            expect(isinstance(reason, str) and reason.strip() != "",
                   f"for a run that {name}, give a reason saying what missed the SLO")


@check(LAB, "service_settings")
def check_service_settings(settings) -> None:
    expect(isinstance(settings, dict) and settings, f"return a dict of server settings, not {settings!r}")
    unknown = set(settings) - ALLOWED_SETTINGS
    expect(not unknown, f"unknown setting(s) {sorted(unknown)}; choose from {sorted(ALLOWED_SETTINGS)}")
    b = settings.get("max_batch_size", 32)
    w = settings.get("max_wait_ms", 10.0)
    expect(isinstance(b, int) and 1 <= b <= 256, f"max_batch_size must be a whole number in 1..256 (got {b!r})")
    expect(isinstance(w, (int, float)) and 0 <= w <= 1000, f"max_wait_ms must be in 0..1000 ms (got {w!r})")


def measure_service(settings: dict, predictor, rate_rps: float = TARGET_RPS, duration_s: float = 6.0,
                    warmup_s: float = 1.5, seed: int = 0) -> LoadResult:
    """Start ailab.server with `settings` on loopback, offer `rate_rps` Poisson arrivals, return the result."""
    from ailab.bench import open_loop
    from ailab.server import create_app, start_in_thread
    from ailab.suites.serving import bench_texts

    app = create_app({"sentiment": lambda: predictor}, "sentiment", **settings)
    payloads = [{"inputs": t} for t in bench_texts(128)]
    with start_in_thread(app) as handle:
        return open_loop(handle.url + "/v1/predict", payloads, rate_rps, duration_s, warmup_s, seed=seed,
                         timeout_s=10.0)


@check(LAB, "service_meets_slo")
def check_service_meets_slo(settings, predictor) -> LoadResult:
    """Live: the service built from `settings` must meet the whole SLO at TARGET_RPS."""
    check_service_settings.__wrapped__(settings)
    result = measure_service(settings, predictor)
    ok, reason = official_verdict(result)
    hint = ""
    if result.rps >= 0.9 * TARGET_RPS and not ok:
        hint = (" It keeps up with the rate, so the time goes to waiting: how long may a request wait for "
                "its batch to fill (max_wait_ms) at this rate?")
    elif result.rps < 0.9 * TARGET_RPS:
        hint = " It cannot keep up: can one forward pass serve several requests?"
    expect(ok, f"at {TARGET_RPS:g} req/s offered: {reason}.{hint} (measured: {result})")
    return result
