"""Exercise checks: alert states over a metric series, with Prometheus's semantics (chapter 4.03; topic S9).

The learner writes
  alert_states(series, threshold, for_s) -> list[str]
      one state per (timestamp, value) sample, in order: "inactive" where the condition `value > threshold`
      does not hold; "pending" where it holds but has not yet held for `for_s` seconds; "firing" where it
      has held at every sample since it first held, for at least `for_s` seconds (ts - start >= for_s).

The checks are derived from what the function must guarantee:
  - a list of str, one per sample (an empty series gives []); the three state names exactly;
  - the condition is strict (a value equal to the threshold does not hold) and uses the threshold given
    (200, 0.01, a negative one);
  - the clock is the samples' timestamps, not their count: uneven spacing, timestamps near 1.7e9, `for_s`
    reached exactly (>=), `for_s = 0` fires at once, `for_s` longer than the series never fires;
  - one sample that does not hold resets the alert, and the clock restarts at the next holding sample;
    firing is not latched; NaN (no data) never holds and resets too, while +inf is data and holds (-inf does not);
  - on random series (spacing, NaNs, thresholds, for_s) the states equal ailab.monitoring.evaluate's;
  - on generated series (Hypothesis: timestamps from 0, negative, int or near 1.7e9 and 2**31; steps that make
    `ts - start == for_s` exact; values at, just above and just below the threshold, NaN, +-inf; int thresholds
    and for_s; for_s = 0) every state equals the evaluator's, and the series given is left as it was.
"""

from __future__ import annotations

import math
import random

from ailab.labs.core import check, expect
from ailab.labs.differential import exactly, same_as_reference, short
from ailab.monitoring import Rule, evaluate

LAB = "ex_alert_states"
STATES = ("inactive", "pending", "firing")


def reference(series, threshold, for_s):
    """The course's evaluator on the same series (ailab.monitoring.evaluate with an ad-hoc rule)."""
    rule = Rule("exercise", "", float(for_s), "value", ">", float(threshold), 60.0)
    return [state for _, state, _ in evaluate(rule, list(series)).states]


def _run(alert_states, series, threshold, for_s, what):
    out = alert_states(list(series), threshold, for_s)
    expect(isinstance(out, list), f"{what}: alert_states should return a list of str; got {type(out).__name__}")
    expect(len(out) == len(series), f"{what}: {len(series)} samples should give {len(series)} states; got {len(out)}")
    bad = [s for s in out if not isinstance(s, str) or s not in STATES]
    expect(not bad, f"{what}: every state is one of {list(STATES)}; got {(bad or [None])[0]!r}")
    return out


def _same(alert_states, series, threshold, for_s, what, why=""):
    got = _run(alert_states, series, threshold, for_s, what)
    want = reference(series, threshold, for_s)
    if got != want:
        i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        lo = max(0, i - 3)
        shown = ", ".join(f"({ts:.12g}, {v:.6g})" for ts, v in series[lo : i + 1])
        expect(
            False,
            f"{what} (threshold={threshold:g}, for_s={for_s:g}): sample {i} (t={series[i][0]:.12g}, "
            f"value={series[i][1]:g}) should be {want[i]!r}, got {got[i]!r}. Samples {lo}..{i}: {shown}. "
            f"Expected states {want}, got {got}" + (f" - {why}" if why else ""),
        )
    return got


@check(LAB, "pending, then firing once the condition has held for for_s")
def check_pending_then_firing(alert_states):
    expect(_run(alert_states, [], 200.0, 5.0, "an empty series") == [], "an empty series gives no states: []")
    series = [(0.0, 120.0), (1.0, 250.0), (2.0, 260.0), (3.0, 240.0), (4.0, 300.0), (5.0, 310.0)]
    _same(
        alert_states,
        series,
        200.0,
        3.0,
        "p99 above 200 from t=1 s on",
        "pending while the condition has held for less than for_s, firing from t=4 (held 3 s since t=1)",
    )
    _same(
        alert_states,
        [(0.0, 250.0)],
        200.0,
        5.0,
        "a single sample above the threshold",
        "the condition holds but has not held for 5 s yet",
    )
    _same(alert_states, [(0.0, 150.0)], 200.0, 0.0, "a single sample below the threshold")
    _same(
        alert_states,
        series,
        200.0,
        60.0,
        "a rule whose for_s is longer than the whole series",
        "it never held for 60 s, so it never fires",
    )


@check(LAB, "boundaries: value == threshold, held exactly for_s, for_s = 0")
def check_boundaries(alert_states):
    _same(
        alert_states,
        [(0.0, 200.0), (1.0, 200.0), (2.0, 200.0), (3.0, 200.0)],
        200.0,
        1.0,
        "a value exactly at the threshold",
        "the rule is `p99_ms > 200`: 200 itself does not hold",
    )
    _same(
        alert_states,
        [(0.0, 201.0), (2.5, 201.0), (5.0, 201.0)],
        200.0,
        5.0,
        "held for exactly for_s = 5 s at t=5",
        "an alert fires once the condition has held for AT LEAST for_s",
    )
    _same(
        alert_states,
        [(0.0, 50.0), (1.0, 201.0), (2.0, 202.0), (3.0, 90.0)],
        200.0,
        0.0,
        "for_s = 0 (a rule without `for:`)",
        "with for_s = 0 the first sample that holds already fires",
    )
    _same(
        alert_states,
        [(10.0, 0.02), (11.0, 0.01), (12.0, 0.011), (13.0, 0.03), (14.0, 0.05)],
        0.01,
        2.0,
        "an error rate against threshold 0.01",
        "use the threshold argument; 0.01 itself does not hold",
    )
    _same(
        alert_states,
        [(0.0, -3.0), (1.0, -1.0), (2.0, -0.5), (3.0, -2.0)],
        -2.0,
        1.0,
        "a negative threshold (-2)",
        "every value above -2 holds, including -1 and -0.5",
    )


@check(LAB, "one sample that does not hold resets; NaN never holds")
def check_reset_and_nan(alert_states):
    series = [
        (0.0, 250.0),
        (1.0, 250.0),
        (2.0, 250.0),
        (3.0, 150.0),
        (4.0, 250.0),
        (5.0, 250.0),
        (6.0, 250.0),
        (7.0, 250.0),
    ]
    _same(
        alert_states,
        series,
        200.0,
        2.0,
        "one sample below the threshold at t=3",
        "one sample that does not hold resets the alert; the clock starts again at the next sample that holds "
        "(t=4), so it fires again only at t=6",
    )
    series = [(0.0, 300.0), (1.0, 300.0), (2.0, 300.0), (3.0, 100.0), (4.0, 100.0)]
    _same(
        alert_states,
        series,
        200.0,
        1.0,
        "a firing alert whose metric recovers at t=3",
        "firing is not forever: when the condition stops holding the alert is inactive again",
    )
    nan = float("nan")
    series = [(0.0, 250.0), (1.0, 250.0), (2.0, nan), (3.0, 250.0), (4.0, 250.0), (5.0, 250.0)]
    _same(
        alert_states,
        series,
        200.0,
        2.0,
        "a NaN sample (no data) at t=2",
        "NaN means no data: it never holds, so it resets like a sample below the threshold",
    )
    _same(
        alert_states,
        [(0.0, nan), (1.0, nan), (2.0, nan)],
        200.0,
        0.0,
        "a series of NaN only, for_s = 0",
        "no data never fires, not even with for_s = 0",
    )
    inf = float("inf")
    series = [(0.0, 250.0), (1.0, inf), (2.0, inf), (3.0, -inf), (4.0, 250.0)]
    _same(
        alert_states,
        series,
        200.0,
        2.0,
        "a latency of +inf at t=1 and t=2 (a request that never came back), -inf at t=3",
        "+inf is data, and above any threshold: it holds (only NaN is 'no data'); -inf never holds",
    )


@check(LAB, "time comes from the timestamps: uneven spacing and an epoch clock")
def check_uneven_spacing(alert_states):
    series = [(0.0, 250.0), (0.5, 250.0), (0.7, 250.0), (1.0, 250.0), (3.2, 250.0), (9.0, 250.0)]
    _same(
        alert_states,
        series,
        200.0,
        3.0,
        "samples 0.5 s, 0.2 s, 0.3 s, 2.2 s and 5.8 s apart",
        "measure how long the condition has held from the timestamps, not by counting samples",
    )
    t0 = 1.7e9
    series = [
        (t0 + dt, v)
        for dt, v in [
            (0, 100.0),
            (15, 230.0),
            (30, 240.0),
            (45, 235.0),
            (60, 250.0),
            (75, 260.0),
            (90, 150.0),
            (105, 300.0),
        ]
    ]
    _same(
        alert_states,
        series,
        200.0,
        45.0,
        "timestamps near 1.7e9 (Unix time), 15 s apart, for_s = 45",
        "the alert started holding at t0+15 and fires once 45 s have passed since then",
    )
    series = [(float(t), 500.0) for t in range(0, 40, 4)]
    _same(alert_states, series, 200.0, 10.0, "samples every 4 s, for_s = 10", "use the for_s argument")
    _same(alert_states, series, 200.0, 30.0, "samples every 4 s, for_s = 30", "use the for_s argument")


@check(LAB, "agrees with Prometheus's semantics on random series")
def check_random_series(alert_states):
    rng = random.Random(9)
    for case in range(300):
        n = rng.randint(1, 30)
        threshold = rng.choice([200.0, 0.01, 0.0, -5.0, 1e6])
        scale = abs(threshold) or 1.0
        for_s = rng.choice([0.0, 0.5, 1.0, 2.0, 5.0, 12.5])
        ts, series = rng.uniform(-100, 1e9), []
        for _ in range(n):
            ts += rng.choice([0.25, 0.5, 1.0, 1.0, 2.0, rng.uniform(0.01, 4.0)])
            r = rng.random()
            v = (
                math.nan
                if r < 0.08
                else threshold
                if r < 0.15
                else threshold + scale * rng.uniform(0.01, 1.0) * (1 if rng.random() < 0.65 else -1)
            )
            series.append((ts, v))
        _same(alert_states, series, threshold, for_s, f"random series #{case}")


# --------------------------------------------------------------------------- the differential check


def _series():
    """Hypothesis: (series, threshold, for_s) as the contract allows them.

    Steps are whole multiples of 1/64 s and start times are exact, so `ts - start` is exact and equal to for_s
    where the contract's boundary is (an answer that writes `ts >= start + for_s` is not judged by rounding noise).
    """
    from hypothesis import strategies as st

    nan, inf = float("nan"), float("inf")

    @st.composite
    def draw(d):
        whole = d(st.sampled_from([False, False, True]))  # int timestamps, steps, threshold and for_s
        if whole:
            start = d(st.sampled_from([0, 0, 1, 1_700_000_000, 2**31 + 7, -30]))
            steps = d(st.lists(st.sampled_from([1, 2, 5, 15, 30]) | st.integers(1, 90), max_size=20))
            threshold = d(st.sampled_from([200, 0, -2, 1]) | st.integers(-5, 300))
        else:
            start = d(st.sampled_from([0.0, 0.0, 0.75, 1.7e9, 1_700_000_000.25, 2.0**31, -100.5]))
            steps = d(
                st.lists(st.sampled_from([0.25, 0.5, 1.0, 0.75, 2.5, 15.0]) | st.integers(1, 64 * 3), max_size=20)
            )
            steps = [s if isinstance(s, float) else s / 64 for s in steps]
            threshold = d(
                st.sampled_from([200.0, 0.01, 0.0, -2.0, 1e6]) | st.floats(-1e3, 1e3, allow_nan=False, width=32)
            )
        stamps, ts = [], start
        for step in [0, *steps]:
            ts += step
            stamps.append(ts)
        i = d(st.integers(0, max(len(stamps) - 1, 0)))
        j = d(st.integers(i, max(len(stamps) - 1, 0)))
        held = stamps[j] - stamps[i] if stamps else 0  # a for_s that some run of samples reaches exactly
        choices = [st.just(held), st.sampled_from([0, 1, 5, 45, 300])]
        if not whole:
            choices += [st.sampled_from([0.0, 0.25, 0.5, 2.5, 12.5]), st.integers(0, 64 * 60).map(lambda k: k / 64)]
        for_s = d(st.one_of(*choices))
        above = [threshold + 1, threshold + 250]
        below = [threshold - 1, threshold - 250]
        special = [threshold]
        if not whole:
            t = float(threshold)
            above += [math.nextafter(t, inf), t + abs(t) * 0.5 + 0.001, inf]
            below += [math.nextafter(t, -inf), -inf]
            special += [nan]
        values = st.sampled_from(above + above + below + special + special)
        series = [(ts, d(values)) for ts in stamps] if d(st.integers(0, 19)) else []
        return series, threshold, for_s

    return draw()


def _describe(series, threshold, for_s):
    return f"series={short(series)} ({len(series)} samples), threshold={threshold!r}, for_s={for_s!r}"


def _states_only(mine, ref):
    """exactly(), with the sample where the states first differ named in the learner's words."""
    if not isinstance(mine, list):
        return f"alert_states should return a list of str like {short(ref)}; got {short(mine)}"
    if len(mine) != len(ref):
        return f"{len(ref)} samples should give {len(ref)} states; yours gave {len(mine)}: {short(mine)}"
    for i, (a, b) in enumerate(zip(mine, ref)):
        if a != b:
            return f"sample {i} should be {b!r}, yours is {a!r}: the reference gives {short(ref)}, yours {short(mine)}"
    return exactly(mine, ref)


@check(LAB, "gives the evaluator's state on every sample of every series tried")
def check_same_as_reference(alert_states):
    same_as_reference(
        alert_states,
        reference,
        _series(),
        describe=_describe,
        compare=_states_only,
        edges=[
            ([], 200.0, 5.0),
            ([(0.0, 250.0), (1.0, 250.0), (2.0, 250.0)], 200.0, 2.0),  # a run that starts at t=0
            ([(0, 201), (5, 201), (7, 150), (8, 201)], 200, 5),  # int timestamps, held exactly for_s
            ([(0.0, 250.0)], 200.0, 1.0),  # a new series holding after one that ended holding: a fresh clock
            ([(1.25, 250.0), (1.75, 250.0)], 200.0, 0.5),  # held 0.5 s within one whole second
        ],
        arg_names=("series", "threshold", "for_s"),
        examples=300,
    )
