"""Checks for the capstone lab: tune a service to meet an SLO (p99 within a bound at a stated rate; topics A1, A2).

The learner writes two things:
  slo_verdict(result, target_rps, p99_bound_ms, max_error_rate) -> (ok, reason)
      judge one ailab.bench LoadResult against the SLO;
  a server configuration (create_app settings: max_batch_size, max_wait_ms, length_bucket_tokens, ...)
      that meets the SLO on this machine under an open-loop (Poisson) load at the stated rate.

The workload mixes short texts with a share of long ones, and the rate is measured on this machine
(target_rate()): a share of what batches of like lengths serve flat out here, now. The server's
defaults (batches padded to their longest text) and no batching cannot keep up with it, and a long
batching wait misses the p99 bound; batches of like lengths meet it.

slo_verdict's checks are derived from what a verdict must guarantee: each of the three parts on its own,
on both sides of its bound (a p99 exactly at the bound meets it; 92 % of the target served meets it,
30 of 50 does not; 0.8 % errors within 1 % meets it, 5 % does not); the p99 and not the mean, the median,
the p95 or the maximum (a run with 3 requests of 520 at 2 s meets a 500 ms p99); the bounds and the
target are the arguments (the same run judged against other bounds); throughput against target_rps, not
the rate the load test offered; and a (bool, str) with a reason whenever it says no.
"""

from __future__ import annotations

import warnings

import numpy as np

from ailab.bench import LoadResult
from ailab.labs.core import check, expect
from ailab.labs.differential import same_as_reference
from ailab.server.config import ServerConfig

LAB = "lab_capstone_slo"
RATE_SHARE = 0.6  # the stated rate: this share of what REFERENCE_SERVICE serves flat out here, now,
NO_BATCHING_MARGIN = 1.5  # or this many times what one text per forward pass serves,
PADDED_MARGIN = 1.15  # or this many times what the server's padded defaults serve, where that is more,
MAX_SHARE = 0.75  # but never more than this share of the reference (see target_rate)
# The server's defaults, as a learner who tunes nothing runs them (256 is the defaults' own max_queue).
PADDED_SERVICE = {"max_queue": 256}
# What the reference load-tests: batches that keep short texts apart from long ones (one good answer of many).
REFERENCE_SERVICE = {"max_batch_size": 32, "max_wait_ms": 10, "length_bucket_tokens": 16}
P99_BOUND_MS = 500.0  # the stated bound (a long batch wait of 600 ms cannot meet it)
MAX_ERROR_RATE = 0.01
LONG_SHARE = 0.15  # share of long texts in the workload (past the model's 64 word pieces)
CASE_RPS = 50.0  # the rate the judge's (synthetic) test cases were offered
_RATE_CACHE: dict = {}
ALLOWED_SETTINGS = {
    "max_batch_size",
    "max_wait_ms",
    "max_queue",
    "request_timeout_s",
    "torch_threads",
    "length_bucket_tokens",
}


def workload_texts(n: int = 200, seed: int = 0) -> list[str]:
    """What the service is offered: short reviews (3-8 words) and LONG_SHARE long ones (three 20-40-word
    reviews joined), shuffled. A batch is padded to its longest text, so one long text in a batch of
    short ones makes every one of them cost as much as it does."""
    from ailab.data import bench_texts

    n_long = round(LONG_SHARE * n)
    short = bench_texts(n - n_long, min_words=3, max_words=8, seed=seed)
    pieces = bench_texts(3 * n_long, min_words=20, max_words=40, seed=seed + 1)
    texts = short + [" ".join(pieces[3 * i : 3 * i + 3]) for i in range(n_long)]
    return [texts[i] for i in np.random.default_rng(seed).permutation(len(texts))]


def offered_rps(result: LoadResult, target_rps: float) -> float:
    """Poisson arrivals: over a few seconds the realised offered rate differs from the nominal one by
    chance, so throughput is judged against what was actually offered in the measured window."""
    return min(target_rps, result.n / result.duration_s) if result.mode == "open" else target_rps


def official_verdict(
    result: LoadResult, target_rps: float, p99_bound_ms: float = P99_BOUND_MS, max_error_rate: float = MAX_ERROR_RATE
) -> tuple[bool, str]:
    """The reference judgement the live check uses."""
    if result.n_ok == 0:
        return False, f"no successful response; errors {result.errors_by_status}"
    problems = []
    offered = offered_rps(result, target_rps)
    if result.rps < 0.9 * offered:
        problems.append(f"served {result.rps:.1f} req/s, below 90 % of the {offered:.1f} req/s offered")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms is over the {p99_bound_ms:g} ms bound")
    if result.error_rate > max_error_rate:
        problems.append(f"{result.error_rate:.1%} of requests failed {result.errors_by_status}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def synthetic_result(
    offered_rps: float, served_rps: float, latencies_ms, error_share: float = 0.0, seconds: float = 10.0
) -> LoadResult:
    """An open-loop LoadResult: `offered_rps` arrivals for `seconds`, answered at `served_rps`, with the given
    latency distribution and share of 503s (for checking verdicts without a server)."""
    n = int(offered_rps * seconds)
    n_err = int(round(error_share * n))
    lat = np.resize(np.asarray(latencies_ms, float), n - n_err)
    recs = [(i / offered_rps, i / offered_rps, float(v), 200) for i, v in enumerate(lat)]
    recs += [(i / offered_rps, i / offered_rps, 5.0, 503) for i in range(n_err)]
    return LoadResult(
        "open", "http://127.0.0.1:1/v1/predict", None, offered_rps, seconds, 0.0, recs, len(lat) / served_rps
    )


def _latencies(n: int, fast: int, slow_ms: float, seed: int = 0) -> np.ndarray:
    """n latencies: `fast` of them 40-120 ms, the rest `slow_ms`, shuffled."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.concatenate([rng.uniform(40, 120, fast), np.full(n - fast, slow_ms)]))


def _cases():
    """(what the run did, result, target_rps, p99_bound_ms, max_error_rate, the right ok, what to look at).

    Each part of the SLO is tried on its own, on both sides of its bound, with the bounds given as arguments;
    520 requests each (52 req/s for 10 s), so the p99 is that of exactly these latencies."""
    good = _latencies(520, 520, 0.0)  # p99 ~ 120 ms, max ~ 120 ms
    tail = _latencies(520, 490, 900.0, seed=1)  # 5.8 % at 900 ms: mean ~ 130, p95 900
    thin_tail = _latencies(520, 510, 900.0, seed=2)  # 1.9 % at 900 ms: p95 and p98 ~ 120, p99 900
    at_bound = _latencies(520, 510, 500.0, seed=3)  # p99 exactly 500 ms
    one_slow = _latencies(520, 517, 2000.0, seed=4)  # 0.6 % at 2 s: p99 ~ 120, max 2000
    p99_part = "p99 latency (result.stats.p99_ms) against p99_bound_ms"
    return [
        ("meets every part of the SLO", synthetic_result(52, 52, good), 50, 500, 0.01, True, "all three parts"),
        (
            "keeps up with the rate but p99 is 900 ms (mean ~130 ms)",
            synthetic_result(52, 52, tail),
            50,
            500,
            0.01,
            False,
            p99_part + ", not the mean or the median",
        ),
        (
            "has 1.9 % of requests at 900 ms: p95 and p98 ~120 ms, p99 900 ms",
            synthetic_result(52, 52, thin_tail),
            50,
            500,
            0.01,
            False,
            p99_part + ": 1 request in 100, not 1 in 20",
        ),
        (
            "has 3 requests of 520 at 2 s: p99 ~120 ms, the maximum 2000 ms",
            synthetic_result(52, 52, one_slow),
            50,
            500,
            0.01,
            True,
            p99_part + ": the SLO bounds the 99th percentile, not the slowest request",
        ),
        (
            "has p99 exactly 500 ms, the bound",
            synthetic_result(52, 52, at_bound),
            50,
            500,
            0.01,
            True,
            p99_part + ": 'at most 500 ms' includes 500",
        ),
        (
            "keeps a p99 of 900 ms against a bound of 1000 ms",
            synthetic_result(52, 52, tail),
            50,
            1000,
            0.01,
            True,
            "the bound given as p99_bound_ms (not a number of your own)",
        ),
        (
            "keeps a p99 of ~120 ms against a bound of 100 ms",
            synthetic_result(52, 52, good),
            50,
            100,
            0.01,
            False,
            "the bound given as p99_bound_ms (not a number of your own)",
        ),
        (
            "fast answers but only 30 req/s served",
            synthetic_result(50, 30, good),
            50,
            500,
            0.01,
            False,
            "served throughput (result.rps) against 90 % of target_rps",
        ),
        (
            "serves 46 req/s of a 50 req/s target (92 %)",
            synthetic_result(50, 46, good),
            50,
            500,
            0.01,
            True,
            "served throughput: Poisson arrivals fall short by chance, so 90 % of target_rps is enough",
        ),
        (
            "was offered 100 req/s and served 60, against a target of 60 req/s",
            synthetic_result(100, 60, good),
            60,
            500,
            0.01,
            True,
            "throughput against the target_rps argument (not the rate the load test offered)",
        ),
        (
            "was offered 100 req/s and served 60, against a target of 100 req/s",
            synthetic_result(100, 60, good),
            100,
            500,
            0.01,
            False,
            "throughput against the target_rps argument (not a number of your own)",
        ),
        (
            "fast, on rate, but 5 % answered 503",
            synthetic_result(52, 52, good, error_share=0.05),
            50,
            500,
            0.01,
            False,
            "the error rate (result.error_rate) against max_error_rate",
        ),
        (
            "fast, on rate, 0.8 % answered 503 (at most 1 % may fail)",
            synthetic_result(52, 52, good, error_share=0.008),
            50,
            500,
            0.01,
            True,
            "the error rate against max_error_rate: a few failures within it are allowed",
        ),
        (
            "fast, on rate, 0.8 % answered 503, with max_error_rate 0.1 %",
            synthetic_result(52, 52, good, error_share=0.008),
            50,
            500,
            0.001,
            False,
            "the error rate against the max_error_rate argument (not a number of your own)",
        ),
    ]


@check(LAB, "slo_verdict")
def check_slo_verdict(slo_verdict) -> None:
    for name, result, target, bound, max_errors, want, look_at in _cases():
        got = slo_verdict(result, target, bound, max_errors)
        expect(
            isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (bool, np.bool_)),
            f"slo_verdict should return (ok: bool, reason: str); it returned {got!r}",
        )
        ok, reason = got
        expect(
            bool(ok) == want,
            f"for a run that {name}, judged with target_rps={target}, p99_bound_ms={bound}, "
            f"max_error_rate={max_errors}: slo_verdict said ok={ok} ({reason!r}); expected ok={want}. Look at "
            f"{look_at}",
        )
        expect(
            isinstance(reason, str) and (want or reason.strip() != ""),
            f"for a run that {name}, give a reason (a str) saying what missed the SLO; got {reason!r}",
        )


@check(LAB, "service_settings")
def check_service_settings(settings) -> None:
    """`settings` is the dict, or the learner's function that returns it."""
    settings = settings() if callable(settings) else settings
    expect(isinstance(settings, dict) and settings, f"return a dict of server settings, not {settings!r}")
    unknown = set(settings) - ALLOWED_SETTINGS
    expect(not unknown, f"unknown setting(s) {sorted(unknown)}; choose from {sorted(ALLOWED_SETTINGS)}")
    b = settings.get("max_batch_size", 32)
    w = settings.get("max_wait_ms", 10.0)
    expect(
        isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 256,
        f"max_batch_size must be a whole number in 1..256 (got {b!r})",
    )
    expect(
        isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w <= 1000,
        f"max_wait_ms must be a number of milliseconds in 0..1000 (got {w!r})",
    )
    width = settings.get("length_bucket_tokens")
    expect(
        width is None or (isinstance(width, int) and not isinstance(width, bool) and 1 <= width <= 512),
        f"length_bucket_tokens must be None (off) or a whole number of word pieces in 1..512 (got {width!r})",
    )
    flags = sorted(k for k, v in settings.items() if isinstance(v, bool))
    expect(not flags, f"{flags} must be numbers, not True/False")
    try:
        ServerConfig(**settings)
    except ValueError as e:  # pydantic's ValidationError: name each setting the server refuses, with its bound
        bad = "; ".join(f"{err['loc'][0]}={err['input']!r}: {err['msg']}" for err in getattr(e, "errors", list)())
        expect(False, f"the server refuses these settings: {bad or e}")


def _served_flat_out(predictor, settings: dict, clients: int, duration_s: float, warmup_s: float) -> float:
    from ailab.bench import in_subprocess
    from ailab.server import create_app, start_in_thread

    app = create_app({"sentiment": lambda: predictor}, "sentiment", **settings)
    payloads = [{"inputs": t} for t in workload_texts()]
    with start_in_thread(app) as handle:
        return in_subprocess(
            "closed_loop",
            handle.url + "/v1/predict",
            payloads,
            clients=clients,
            duration_s=duration_s,
            warmup_s=warmup_s,
            timeout_s=10.0,
        ).rps


def reference(predictor, fresh: bool = False, duration_s: float = 3.0, warmup_s: float = 1.0) -> dict:
    """What this machine serves of the workload flat out (closed loops), now, through the same HTTP stack
    and load generator as the check, so the figures carry their cost and whatever else the machine is doing:
      reference_rps:   REFERENCE_SERVICE, where no short text pays for a long one's padding (32 clients);
      padded_rps:      PADDED_SERVICE, every batch padded to its longest text (32 clients);
      no_batching_rps: one text per forward pass (4 clients keep it busy; more would only queue);
      separable:       whether a rate exists that padded batches and one text per pass miss by a clear
                       margin (PADDED_MARGIN, NO_BATCHING_MARGIN) and like lengths meet with room
                       (MAX_SHARE). How far apart they are depends on the CPU: on Intel Xeons with
                       AVX-512 VNNI, whose matrix products are cheap next to the per-request HTTP work,
                       padded batches served 0.52-0.64 of the reference (0.41 beside a busy process).
    Kept for the predictor unless `fresh`.

    (The model alone, timed in-process, was the reference before. Beside a busy neighbour its two threads
    wait on each other far longer than the served model's do, and the rate it implied was one that the
    defaults and no batching met.)"""
    cached = _RATE_CACHE.get("for")
    if fresh or cached is None or cached[0] is not predictor:
        figures = {
            "reference_rps": _served_flat_out(predictor, REFERENCE_SERVICE, 32, duration_s, warmup_s),
            "padded_rps": _served_flat_out(predictor, PADDED_SERVICE, 32, duration_s, warmup_s),
            "no_batching_rps": _served_flat_out(predictor, {"max_batch_size": 1}, 4, duration_s, warmup_s),
        }
        naive_floor = max(NO_BATCHING_MARGIN * figures["no_batching_rps"], PADDED_MARGIN * figures["padded_rps"])
        figures["separable"] = naive_floor <= MAX_SHARE * figures["reference_rps"]
        _RATE_CACHE["for"] = (predictor, figures)
    return dict(_RATE_CACHE["for"][1])


def target_rate(predictor, fresh: bool = False) -> float:
    """The stated rate for this machine, from reference(): RATE_SHARE of what like lengths serve, raised to
    PADDED_MARGIN times what padded batches serve and NO_BATCHING_MARGIN times what one text per pass serves
    where those are more (beside a busy neighbour, one text per pass loses less than batches do), and never
    past MAX_SHARE of the reference. Padded batches cannot keep up with it, nor can one text per pass, while
    batches of like lengths serve it with room (on an Intel Xeon they met 0.8 of the reference at a p99 of
    230-240 ms, and missed the bound at 0.88-0.95)."""
    return stated_rate(**{k: v for k, v in reference(predictor, fresh).items() if k != "separable"})


def stated_rate(reference_rps: float, no_batching_rps: float, padded_rps: float = 0.0) -> float:
    """target_rate() from the figures of reference()."""
    naive_floor = max(NO_BATCHING_MARGIN * no_batching_rps, PADDED_MARGIN * padded_rps)
    rate = min(MAX_SHARE * reference_rps, max(RATE_SHARE * reference_rps, naive_floor))
    return float(max(5.0, round(rate)))


def measure_service(
    settings: dict,
    predictor,
    rate_rps: float | None = None,
    duration_s: float = 5.0,
    warmup_s: float = 1.5,
    seed: int = 0,
) -> LoadResult:
    """Start ailab.server with `settings` on loopback, offer `rate_rps` Poisson arrivals of the workload
    (workload_texts), return the result."""
    from ailab.bench import in_subprocess
    from ailab.server import create_app, start_in_thread

    rate_rps = rate_rps if rate_rps is not None else target_rate(predictor)
    app = create_app({"sentiment": lambda: predictor}, "sentiment", **settings)
    payloads = [{"inputs": t} for t in workload_texts(seed=seed)]
    with start_in_thread(app) as handle:
        # The load generator runs in its own process: sharing this one's GIL would slow the server it measures.
        return in_subprocess(
            "open_loop",
            handle.url + "/v1/predict",
            payloads,
            rate_rps=rate_rps,
            duration_s=duration_s,
            warmup_s=warmup_s,
            seed=seed,
            timeout_s=10.0,
        )


@check(LAB, "service_meets_slo")
def check_service_meets_slo(settings, predictor) -> LoadResult:
    """Live: the service built from `settings` (or the function returning them) must meet the whole SLO."""
    settings = settings() if callable(settings) else settings
    check_service_settings.__wrapped__(settings)
    # The rate is measured right before the run it judges: on a shared machine the capacity drifts, and a
    # reference taken during a burst of load elsewhere would state a rate the naive settings meet.
    rate = target_rate(predictor, fresh=True)
    if not reference(predictor)["separable"]:  # perhaps a burst of load elsewhere: measure once more
        rate = target_rate(predictor, fresh=True)
    for attempt in range(2):
        result = measure_service(settings, predictor, rate, seed=attempt)
        ok, reason = official_verdict(result, rate)
        if ok or attempt == 1:
            break
        # A second try forgives a burst of load during the run, never at a lower rate than the first.
        rate = max(rate, target_rate(predictor, fresh=True))
    hint = ""
    keeps_up = result.rps >= 0.9 * offered_rps(result, rate)
    chosen = ServerConfig(**settings)  # what the server ran with: the learner's settings over its defaults
    # The waiting hint only where the wait is long: the defaults (10 ms) can keep up and still miss on padding.
    if not ok and keeps_up and chosen.max_wait_ms >= 100:
        hint = (
            " It keeps up with the rate, so the time goes to waiting: how long may a request wait for "
            "its batch to fill (max_wait_ms) at this rate?"
        )
    elif not ok and chosen.max_batch_size == 1:
        hint = " It cannot keep up: can one forward pass serve several requests?"
    elif not ok:
        hint = (
            " It batches and its requests still take too long: a batch is padded to its longest text. What "
            "does a batch of short texts cost once one long text joins it, and how often does that happen in "
            "this workload?"
        )
    expect(ok, f"at {rate:g} req/s offered: {reason}.{hint} (measured: {result})")
    ref = reference(predictor)
    if not ref["separable"]:
        warnings.warn(
            f"the check cannot tell settings apart by a clear margin here right now: one text per "
            f"forward pass served {ref['no_batching_rps']:.0f} req/s, padded batches "
            f"{ref['padded_rps']:.0f} and batches of like lengths {ref['reference_rps']:.0f} (it needs "
            f"the reference {NO_BATCHING_MARGIN / MAX_SHARE:.1f}x and {PADDED_MARGIN / MAX_SHARE:.2f}x "
            f"ahead of them). The pass holds at {rate:g} req/s here, now; close other programs and run "
            "the check again before you trust it.",
            stacklevel=2,
        )
    return result


# --------------------------------------------------------------------------- the differential check (slo_verdict)


def _reference_slo_verdict(result, target_rps, p99_bound_ms, max_error_rate):
    """From the notebook's contract: served >= 90 % of target_rps, p99 <= its bound, errors <= theirs; all three."""
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s < 90% of {target_rps:g}")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms > {p99_bound_ms:g} ms")
    if result.error_rate > max_error_rate:
        problems.append(f"error rate {result.error_rate:.1%} > {max_error_rate:.0%}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def _load_results():
    """Hypothesis: (result, target_rps, p99_bound_ms, max_error_rate) with each part at, above and below its bound."""
    from hypothesis import assume
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        n_ok = d(st.integers(1, 240))
        n_err = d(st.one_of(st.just(0), st.integers(0, 8), st.integers(0, 120)))
        n_slow = d(st.integers(0, n_ok))  # a tail: 0, a few (under 1 %), or many
        slow_ms = d(st.sampled_from([499.5, 500.0, 500.4, 900.0, 2000.0, 120.0]))
        rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
        latencies = rng.permutation(np.concatenate([rng.uniform(1.0, 400.0, n_ok - n_slow), np.full(n_slow, slow_ms)]))
        status = d(st.sampled_from([503, 500, 429, "timeout", "connect_error"]))
        err_latency = d(st.sampled_from([5.0, 10_000.0, 450.0]))
        mode = d(st.sampled_from(["open", "closed"]))
        seconds = d(st.sampled_from([1.0, 2.0, 5.0, 10.0, 3.7]))
        offered = d(st.sampled_from([10.0, 50.0, 100.0, 1000.0]))
        recs = [(0.0, 0.0, float(v), 200) for v in latencies] + [(0.0, 0.0, err_latency, status)] * n_err
        recs = [recs[i] for i in rng.permutation(len(recs))]
        recs = [(i * seconds / len(recs), i * seconds / len(recs), v, s) for i, (_, _, v, s) in enumerate(recs)]
        result = LoadResult(
            mode,
            "http://127.0.0.1:1/v1/predict",
            None if mode == "open" else 8,
            offered if mode == "open" else None,
            seconds,
            0.0,
            recs,
            seconds,
        )
        rps, p99, errors = result.rps, result.stats.p99_ms, result.error_rate
        target = d(
            st.one_of(
                st.just(rps / 0.9),  # served exactly 90 %
                st.just(rps),
                st.sampled_from([10, 50, 100, 30.0, 0.5]),
                st.floats(0.01, 500.0),
                st.floats(0.8, 1.2).map(lambda f: rps / 0.9 * f),
            )
        )
        bound = d(
            st.one_of(
                st.just(p99),  # exactly at the bound
                st.sampled_from([500, 500.0, 100, 1000, 250.0]),
                st.floats(1.0, 3000.0),
                st.floats(0.9, 1.1).map(lambda f: p99 * f),
                st.just(round(p99)),
            )
        )
        max_errors = d(st.one_of(st.just(errors), st.sampled_from([0, 0.0, 0.01, 0.001, 0.05, 1.0]), st.floats(0, 1)))
        as_numpy = d(st.booleans())
        if as_numpy:
            target, bound = np.float64(target), np.float64(bound)
        # where served throughput sits a float's rounding from 90 %, the ways of writing "90 % of" differ: skip
        assume((rps >= 0.9 * target) == (rps / target >= 0.9) == (rps * 10 >= 9 * target))
        return result, target, bound, max_errors

    return draw()


def _compare_verdicts(mine, ref) -> str | None:
    if not (isinstance(mine, tuple) and len(mine) == 2 and isinstance(mine[0], (bool, np.bool_))):
        return f"slo_verdict should return (ok: bool, reason: str); it returned {mine!r}"
    ok, reason = mine
    if not isinstance(reason, str):
        return f"the reason should be a str; got {reason!r}"
    if bool(ok) != ref[0]:
        return f"yours said ok={bool(ok)} ({reason!r}); the SLO's three parts say ok={ref[0]} ({ref[1]!r})"
    if not reason.strip():
        if ok:
            return "yours said yes with an empty reason; a verdict always says why: that the run meets the SLO"
        return f"yours said no with an empty reason; say which part missed (the reference: {ref[1]!r})"
    return None


def _describe_run(result, target_rps, p99_bound_ms, max_error_rate) -> str:
    return (
        f"a run with result.rps={result.rps!r}, result.stats.p99_ms={result.stats.p99_ms!r}, "
        f"result.error_rate={result.error_rate!r} ({result.n} requests, {result.mode} loop, offered "
        f"{result.rate_rps!r} req/s), judged with target_rps={target_rps!r}, p99_bound_ms={p99_bound_ms!r}, "
        f"max_error_rate={max_error_rate!r}"
    )


@check(LAB, "slo_verdict agrees with the SLO's three parts on every run tried")
def check_slo_verdict_same_as_reference(slo_verdict) -> None:
    same_as_reference(
        slo_verdict,
        _reference_slo_verdict,
        _load_results(),
        describe=_describe_run,
        compare=_compare_verdicts,
        arg_names=("result", "target_rps", "p99_bound_ms", "max_error_rate"),
        examples=200,
    )
