"""Lab 0 checks: a latency timer that excludes warm-up, syncs the device and reports percentiles.

The learner writes `measure_latency(fn, sync=..., warmup=5, iters=30) -> dict` returning
p50_ms, p95_ms, p99_ms and n. Each check drives it with a fake device and a fake clock: while a
check runs, `time.perf_counter` reads a clock that moves only when the fake `fn()` or `sync()` runs,
so every sample the learner's timer takes is exact, the checks are deterministic, take no real time,
and a load on the machine cannot flake them. The fake records the order of events (clock readings,
calls, syncs), so "sync after the call, before the clock" is checked as an order, not guessed from
durations.

What the timer must guarantee, one check each:
- it calls fn warmup + iters times and n counts the timed calls only, for any warmup and iters;
- warm-up calls are not timed;
- p50, p95 and p99 are each the right percentile of the timed samples (a mean, the max or a
  neighbouring percentile in one field fails, and the message names the field);
- after every timed call, sync() runs before the clock is read, and once after the warm-up;
- one timed call gives that call's time in every field; zero timed calls is not a latency of 0;
- an exception from fn or sync reaches the caller (a timer that swallows it reports a broken run
  as a measurement);
- against a reference timer on generated fake devices (warmup 0 to 6, iters 1 to 150 or the defaults, calls
  from 0 ms and 4 us to 250 ms with fractions of a ms, slow spikes anywhere, work queued on the device): fn
  runs as often, n is the same, the order is clock, fn, sync, clock, and each percentile lies between the two
  sorted samples around its position (any usual percentile definition does), to 1 % or 10 ns. iters=0 and
  errors are left to the checks above.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import threading
import time

import numpy as np

from ailab.labs.core import check, expect
from ailab.labs.differential import same_as_reference, short

LAB = "lab00_latency"
KEYS = ("p50_ms", "p95_ms", "p99_ms", "n")


class DeviceError(RuntimeError):
    """What the fake device raises when told to fail (a lost device, an out-of-memory)."""


def _caused_by(e: BaseException, kind: type) -> bool:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kind):
            return True
        seen.add(id(e))
        e = e.__cause__ if e.__cause__ is not None else None if e.__suppress_context__ else e.__context__
    return False


class FakeDevice:
    """A fake accelerator and the clock `time.perf_counter` reads while a check runs.

    Call k of `fn` costs `launch_ms[k]` of clock time on the host and queues `work_ms[k]` on a stream
    (work runs one item after another, like a CUDA stream); `sync()` moves the clock to when the
    queued work is done. Reading the clock costs nothing. `fail_fn_at` / `fail_sync_at` make the k-th
    call raise, like a device error.
    """

    def __init__(
        self,
        launch_ms=lambda k: 0.0,
        work_ms=lambda k: 0.0,
        fail_fn_at: int | None = None,
        fail_sync_at: int | None = None,
    ):
        self.launch_ms, self.work_ms = launch_ms, work_ms
        self.fail_fn_at, self.fail_sync_at = fail_fn_at, fail_sync_at
        self.now = 1000.0  # seconds; a perf_counter origin is arbitrary
        self.busy_until = self.now
        self.calls = self.syncs = self.reads = 0
        self.events: list[tuple[str, int]] = []  # ("clock" | "fn" | "sync", index)
        self._thread = threading.get_ident()
        self._real = time.perf_counter
        self._real_ns = time.perf_counter_ns

    def fn(self) -> None:
        k = self.calls
        self.calls += 1
        self.events.append(("fn", k))
        if self.fail_fn_at == k:
            raise DeviceError(f"the device reported an error on call {k + 1}")
        self.now += self.launch_ms(k) / 1e3
        self.busy_until = max(self.now, self.busy_until) + self.work_ms(k) / 1e3

    def sync(self) -> None:
        k = self.syncs
        self.syncs += 1
        self.events.append(("sync", k))
        if self.fail_sync_at == k:
            raise DeviceError(f"the device reported an error on sync {k + 1}")
        self.now = max(self.now, self.busy_until)

    def perf_counter(self) -> float:
        if threading.get_ident() != self._thread:  # another thread of the kernel: the real clock
            return self._real()
        self.reads += 1
        self.events.append(("clock", self.reads))
        return self.now

    def perf_counter_ns(self) -> int:
        if threading.get_ident() != self._thread:
            return self._real_ns()
        return round(self.perf_counter() * 1e9)

    @contextlib.contextmanager
    def installed(self):
        """Replace time.perf_counter (and perf_counter_ns) with this fake clock, and put them back."""
        saved = time.perf_counter, time.perf_counter_ns
        time.perf_counter, time.perf_counter_ns = self.perf_counter, self.perf_counter_ns
        try:
            yield self
        finally:
            time.perf_counter, time.perf_counter_ns = saved


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _run(measure, dev: FakeDevice, *, use_sync: bool = True, **kwargs) -> dict:
    """Call the learner's timer on the fake device; check the result's shape and types."""
    with dev.installed():
        out = measure(dev.fn, sync=dev.sync, **kwargs) if use_sync else measure(dev.fn, **kwargs)
    expect(isinstance(out, dict), f"measure_latency should return a dict with keys {KEYS}, got {type(out).__name__}")
    missing = [k for k in KEYS if k not in out]
    expect(not missing, f"the result is missing {missing}; return a dict with keys {KEYS}")
    expect(
        dev.reads > 0,
        "your timer never called time.perf_counter(): the checks drive it with a fake clock that "
        "stands in for time.perf_counter, so time the calls with it (as `time.perf_counter()`, "
        "not time.time() or a copy imported with `from time import ...`)",
    )
    for k in KEYS[:3]:
        expect(_is_number(out[k]), f"{k} should be a number of milliseconds, got {type(out[k]).__name__} {out[k]!r}")
    expect(
        isinstance(out["n"], numbers.Integral) and not isinstance(out["n"], (bool, np.bool_)),
        f"n should be an int (how many calls were timed), got {type(out['n']).__name__} {out['n']!r}",
    )
    return out


def _field(out: dict, key: str, want: float, why: str) -> None:
    """One field against its exact value (1 % slack for rounding): a wrong field fails on its own."""
    got = float(out[key])
    if math.isclose(got, want, rel_tol=0.01, abs_tol=1e-6):
        return
    if want and math.isclose(got * 1e3, want, rel_tol=0.01):
        why = "that is the right time in seconds, but the result is in milliseconds"
    elif want and math.isclose(got / 1e3, want, rel_tol=0.01):
        why = "that is 1000x too big: the clock counts seconds, the result is in milliseconds"
    expect(False, f"{key} is {got:.4g} ms, expected {want:.4g} ms: {why}.")


@check(LAB, "returns one sample per timed run")
def check_counts_runs(measure):
    """fn is called warmup + iters times and n == iters, for several (warmup, iters) and for the defaults."""
    for warmup, iters in ((3, 12), (0, 7), (4, 1), (11, 23)):
        dev = FakeDevice(launch_ms=lambda k: 1.0)
        out = _run(measure, dev, warmup=warmup, iters=iters)
        expect(
            dev.calls == warmup + iters,
            f"with warmup={warmup} and iters={iters}, fn should be called "
            f"{warmup + iters} times; it was called {dev.calls}. Use the arguments, "
            "not fixed numbers.",
        )
        expect(
            out["n"] == iters,
            f"with warmup={warmup} and iters={iters}, n should count the {iters} timed calls "
            f"only (not the warm-up); got n={out['n']}",
        )
    dev = FakeDevice(launch_ms=lambda k: 1.0)
    out = _run(measure, dev, use_sync=False)
    expect(
        dev.calls == 35 and out["n"] == 30,
        "called as measure_latency(fn), with the defaults warmup=5 and "
        f"iters=30, fn should run 35 times and n be 30; got {dev.calls} calls "
        f"and n={out['n']}",
    )


@check(LAB, "excludes warm-up")
def check_excludes_warmup(measure):
    """The first `warmup` calls pay a 80 ms cold start, the rest take 2 ms: no field may see the cold start."""
    for warmup, iters in ((5, 20), (2, 40)):
        dev = FakeDevice(launch_ms=lambda k, w=warmup: 80.0 if k < w else 2.0)
        out = _run(measure, dev, warmup=warmup, iters=iters)
        for key in KEYS[:3]:
            _field(
                out,
                key,
                2.0,
                f"with warmup={warmup}, the {warmup} warm-up calls take 80 ms (a cold start) and "
                f"each of the {iters} calls after them 2 ms, so every percentile is 2 ms. A cold "
                "call was timed: time only the calls after the warm-up",
            )


# 200 timed calls: 186 take 2 ms, 10 take 9 ms, 3 take 30 ms, 1 takes 250 ms (mean 4.01 ms). Each
# percentile sits on a plateau, so every usual definition (numpy's interpolation, nearest rank, ...)
# gives the same p50 (2), p95 (9) and p99 (30); the max (250), the mean, p90 (2) or p98 (9) do not.
_DIST = [2.0] * 186 + [9.0] * 10 + [30.0] * 3 + [250.0]
_ORDER = np.random.default_rng(7).permutation(len(_DIST))  # the slow calls come in no particular order
_SHUFFLED = [_DIST[i] for i in _ORDER]
_WHY = (
    "of the 200 timed calls 186 take 2 ms, 10 take 9 ms, 3 take 30 ms and 1 takes 250 ms (in no order; the "
    "mean is 4.01 ms, the max 250 ms), so p50 = 2, p95 = 9 and p99 = 30 ms. Is this field the right percentile "
    "of the sorted samples, in percent (not a fraction), and not the mean or the max"
)


@check(LAB, "reports percentiles, not the mean")
def check_percentiles(measure):
    """Each of p50, p95 and p99 against the exact percentile of a skewed distribution, field by field."""
    warmup = 3
    dev = FakeDevice(launch_ms=lambda k: 1.0 if k < warmup else _SHUFFLED[(k - warmup) % len(_SHUFFLED)])
    out = _run(measure, dev, warmup=warmup, iters=len(_DIST))
    for key, want in (("p50_ms", 2.0), ("p95_ms", 9.0), ("p99_ms", 30.0)):
        _field(out, key, want, _WHY)


def _sync_order(dev: FakeDevice, warmup: int) -> str | None:
    """What is wrong with the order of calls, syncs and clock readings, or None."""
    ev = dev.events
    fn_at = {k: i for i, (kind, k) in enumerate(ev) if kind == "fn"}

    def synced_before_next_clock(i: int) -> bool | None:
        for kind, _ in ev[i + 1 :]:
            if kind == "sync":
                return True
            if kind == "clock":
                return False
        return None  # no clock reading after it at all

    for k in range(warmup, dev.calls):
        ok = synced_before_next_clock(fn_at[k])
        if ok is None:
            return (
                f"after timed call {k - warmup + 1} the clock was never read again: read it after fn() and "
                "sync() to end the sample"
            )
        if not ok:
            return (
                f"after timed call {k - warmup + 1}, the clock was read before sync() ran, so the sample holds "
                "only the launch, not the work fn() queued. The order inside a sample must be: read the clock, "
                "fn(), sync(), read the clock"
            )
    if warmup and synced_before_next_clock(fn_at[warmup - 1]) is False:
        return (
            "after the last warm-up call the clock was read before any sync(): the work the warm-up calls "
            "queued is still running and lands in the first timed sample. Sync once after the warm-up loop, "
            "before timing starts"
        )
    return None


@check(LAB, "syncs the device before stopping the clock")
def check_syncs(measure):
    """Like a CUDA launch: fn() returns at once (0.05 ms) and its work (10 ms) finishes later; sync() waits.

    Warm-up calls queue 60 ms each. The order of events must be clock, fn, sync, clock for every timed
    call, with a sync between the warm-up and the first timed sample; then every field is 10.05 ms.
    """
    warmup, iters = 3, 15
    dev = FakeDevice(launch_ms=lambda k: 0.05, work_ms=lambda k: 60.0 if k < warmup else 10.0)
    out = _run(measure, dev, warmup=warmup, iters=iters)
    expect(
        dev.syncs > 0,
        "sync() was never called: on a GPU fn() returns when the work is queued, so without "
        "sync() you time the launch (0.05 ms here), not the 10 ms of work",
    )
    problem = _sync_order(dev, warmup)
    expect(problem is None, problem or "")
    for key in KEYS[:3]:
        _field(
            out,
            key,
            10.05,
            "each timed call launches in 0.05 ms and its work finishes 10 ms later, so every "
            "sample is 10.05 ms once sync() waits for it",
        )


@check(LAB, "one timed call, and none")
def check_boundaries(measure):
    """iters=1: every field is that one sample and n == 1. iters=0: no latency may be reported as a number."""
    dev = FakeDevice(launch_ms=lambda k: 50.0 if k < 2 else 3.0)
    out = _run(measure, dev, warmup=2, iters=1)
    expect(out["n"] == 1, f"with iters=1, n should be 1; got {out['n']}")
    for key in KEYS[:3]:
        _field(
            out,
            key,
            3.0,
            "with iters=1 the one timed call takes 3 ms (the 2 warm-up calls 50 ms), so each "
            "percentile of that single sample is 3 ms",
        )
    dev = FakeDevice(launch_ms=lambda k: 2.0)
    try:
        with dev.installed():
            out = measure(dev.fn, sync=dev.sync, warmup=2, iters=0)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - raising on "nothing to measure" is right
        return
    if isinstance(out, dict):
        reported = {k: out.get(k) for k in KEYS[:3] if _is_number(out.get(k)) and math.isfinite(out.get(k))}
        expect(
            not reported,
            f"with iters=0 nothing was timed, yet your timer reported {reported}: a latency of a "
            "run that never happened. Let it raise an error (or report NaN), not a number.",
        )


@check(LAB, "errors reach the caller")
def check_errors_propagate(measure):
    """An exception from fn (in the warm-up or a timed call) or from sync must not be swallowed."""
    cases = (
        ("fn", dict(fail_fn_at=5), "fn() raised on its 6th call (the 3rd timed one)"),
        ("fn", dict(fail_fn_at=1), "fn() raised during the warm-up (its 2nd call)"),
        ("sync", dict(fail_sync_at=4), "sync() raised on its 5th call (a device error surfaces at the sync)"),
    )
    for source, fail, what in cases:
        dev = FakeDevice(launch_ms=lambda k: 2.0, **fail)
        try:
            with dev.installed():
                out = measure(dev.fn, sync=dev.sync, warmup=3, iters=10)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            expect(
                _caused_by(e, DeviceError),
                f"{what}: DeviceError('the device reported an error ...'), but your timer raised "
                f"{type(e).__name__}: {e} instead, which hides the cause: let the original error through",
            )
            continue
        if source == "sync" and dev.syncs <= fail["fail_sync_at"]:
            continue  # this timer syncs less often than that: check_syncs tells it what is missing
        expect(
            False,
            f"{what}, but your timer returned {out!r} as if the run had worked: do not catch the "
            "error; a measurement of a failing function is not a measurement",
        )


# --------------------------------------------------------------------------- the differential check (issue 42)


def _reference_samples(fn, sync=lambda: None, warmup=5, iters=30) -> list[float]:
    """The solution's loop: untimed warm-up, one sync, then clock, fn, sync, clock per sample (ms)."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def _reference_measure_latency(fn, sync=lambda: None, warmup=5, iters=30) -> dict:
    samples = _reference_samples(fn, sync, warmup, iters)
    p50, p95, p99 = np.percentile(samples, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(samples)}


_MS = (0.0, 0.004, 0.05, 0.25, 1.0, 1.5, 2.0, 2.25, 9.0, 33.3, 250.0)  # launch or queued work of one call, in ms


def _device_for(warmup, iters, cold, launch, work, spikes) -> FakeDevice:
    """Warm-up call k launches in cold[k % len] ms; timed call k in launch[k % len] ms (plus a spike's ms where
    one falls on it) and queues work[k % len] ms."""
    w = 5 if warmup is None else warmup
    extra: dict[int, float] = {}
    for at, ms in spikes:
        extra[at] = extra.get(at, 0.0) + ms

    def launch_ms(k):
        return cold[k % len(cold)] if k < w else launch[(k - w) % len(launch)] + extra.get(k - w, 0.0)

    return FakeDevice(
        launch_ms=launch_ms,
        work_ms=lambda k: cold[k % len(cold)] if k < w else work[(k - w) % len(work)],
    )


def _kwargs(warmup, iters) -> dict:
    return {k: v for k, v in (("warmup", warmup), ("iters", iters)) if v is not None}  # None: the default


def _observe(measure):
    """An adapter: drive a timer on a fake device built from the drawn durations; return what the contract makes
    observable - its result, how many times fn ran, and what is wrong with the order of calls, syncs and clock."""

    def observed(warmup, iters, cold, launch, work, spikes):
        dev = _device_for(warmup, iters, cold, launch, work, spikes)
        with dev.installed():
            out = measure(dev.fn, sync=dev.sync, **_kwargs(warmup, iters))
        w, n = (5 if warmup is None else warmup), (30 if iters is None else iters)
        order = _sync_order(dev, w) if dev.calls == w + n else None
        return {"result": out, "calls": dev.calls, "order": order, "reads": dev.reads}

    return observed


def _reference_observed(warmup, iters, cold, launch, work, spikes):
    dev = _device_for(warmup, iters, cold, launch, work, spikes)
    with dev.installed():
        samples = _reference_samples(dev.fn, dev.sync, **_kwargs(warmup, iters))
    p50, p95, p99 = np.percentile(samples, [50, 95, 99])
    result = {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(samples)}
    return {"result": result, "calls": dev.calls, "order": None, "samples": sorted(samples)}


def _timings():
    """Hypothesis: (warmup, iters, cold, launch, work, spikes) - warmup 0 to 6 and iters 1 to 40, 101 or 150 or
    left to their defaults (None); warm-up calls that cost cold[k] ms, timed calls whose launch and queued work
    cycle through short patterns of durations from 0 ms and 4 us to 250 ms (fractions of a ms included), and a
    few slow calls (spikes) anywhere, so the slowest samples differ and p95, p99 and the max part."""
    from hypothesis import strategies as st

    ms = st.sampled_from(_MS)
    return st.tuples(
        st.one_of(st.integers(0, 6), st.none()),
        st.one_of(st.integers(1, 40), st.sampled_from([101, 150]), st.none()),
        st.lists(st.sampled_from((80.0, 2.0, 0.0, 60.0)), min_size=1, max_size=3),
        st.lists(ms, min_size=1, max_size=8),
        st.lists(ms, min_size=1, max_size=8),
        st.lists(st.tuples(st.integers(0, 149), st.sampled_from((3.5, 17.0, 41.25, 120.0, 500.0))), max_size=4),
    )


def _bracket(samples: list[float], q: float) -> tuple[float, float]:
    """The two sorted samples around the q-th percentile's position: every usual definition (numpy's
    interpolation, nearest rank, lower, higher) lands between them."""
    pos = (len(samples) - 1) * q
    return samples[math.floor(pos)], samples[math.ceil(pos)]


def _same_latency(mine, ref):
    out, want = mine.get("result") if isinstance(mine, dict) else None, ref["result"]
    if not isinstance(out, dict) or any(k not in out for k in KEYS):
        return f"measure_latency should return a dict with keys {KEYS}; got {short(out)}"
    if mine.get("reads", 0) == 0:
        return "your timer never called time.perf_counter() (or perf_counter_ns): time the calls with it"
    if mine["calls"] != ref["calls"]:
        return f"fn was called {mine['calls']} times; it should be called {ref['calls']} times (warmup + iters)"
    if mine["order"]:
        return mine["order"]
    if not isinstance(out["n"], numbers.Integral) or isinstance(out["n"], (bool, np.bool_)) or out["n"] != want["n"]:
        return f"n is {out['n']!r}; it should be {want['n']}, the number of timed calls"
    samples = ref["samples"]
    for key, q in (("p50_ms", 0.50), ("p95_ms", 0.95), ("p99_ms", 0.99)):
        got = out[key]
        if not _is_number(got):
            return f"{key} should be a number of milliseconds; got {short(got)}"
        lo, hi = _bracket(samples, q)
        if not (lo * 0.99 - 1e-5 <= float(got) <= hi * 1.01 + 1e-5):
            between = f"{lo:.6g} ms" if lo == hi else f"between {lo:.6g} and {hi:.6g} ms"
            return (
                f"{key} is {float(got)!r} ms; the {len(samples)} timed calls took {_sorted_samples(samples)} ms "
                f"(sorted), so {key} is {between} (the reference says {want[key]:.6g} ms)"
            )
    return None


def _sorted_samples(samples: list[float]) -> str:
    """The sorted samples, the slowest always shown: they decide p95 and p99."""
    shown = [f"{x:.6g}" for x in samples]
    return f"[{', '.join(shown)}]" if len(shown) <= 12 else f"[{', '.join(shown[:3])}, ..., {', '.join(shown[-6:])}]"


def _describe_timings(warmup, iters, cold, launch, work, spikes):
    args = ", ".join(f"{k}={v}" for k, v in _kwargs(warmup, iters).items()) or "the default warmup and iters"
    slow = [(at, ms) for at, ms in spikes if at < (30 if iters is None else iters)]
    return (
        f"measure_latency(fn, sync, {args}) where each warm-up call costs {cold} ms (in turn) and the timed calls "
        f"launch in {launch} ms and queue {work} ms of device work (in turn)"
        + (f"; timed call {', '.join(f'{at} takes {ms} ms more' for at, ms in slow)}" if slow else "")
    )


@check(LAB, "agrees with the reference timer on every device tried")
def check_same_as_reference(measure):
    same_as_reference(
        _observe(measure),
        _reference_observed,
        _timings(),
        describe=_describe_timings,
        compare=_same_latency,
        edges=[
            (0, 1, [0.0], [0.25], [1.5], []),  # no warm-up, one timed call of 1.75 ms
            (1, 2, [80.0], [0.05], [2.25], []),  # one warm-up call
            (None, None, [80.0], [1.5, 0.004], [0.0], [(3, 17.0)]),  # the defaults
        ],
        arg_names=("warmup", "iters", "cold", "launch", "work", "spikes"),
        examples=150,
    )
