"""Exercise checks: where the time goes - each stage's median and its share of the request (topic E5).

The learner writes one function:
  stage_report(samples) -> {"p50_ms": {stage: ms}, "share": {stage: fraction}, "dominant": stage}
      `samples` maps a stage name (tokenize, forward, postprocess, or any other) to its timings in ms,
      one per request. p50_ms is each stage's median; share is that median over the sum of all the
      stages' medians (the shares sum to 1); dominant names the stage with the largest median, the first
      in the input's order on a tie. A stage with no samples, or no stage at all, is a ValueError that
      names the problem.

The checks are derived from what the function must guarantee:
  p50_ms: the median, not the mean (one slow outlier moves the mean, not the median), the middle of an
      even count (the mean of the two middle values), unsorted samples, a single sample; every stage of the
      input and only those (names no note mentions, a single stage); a tuple or a numpy array works too;
      the learner's lists are not sorted in place; plain floats come back.
  share: over the sum of the medians (not of the means, not of the raw samples, not of the largest), each
      one in 0..1 (not percent), summing to 1; a single stage has share 1.
  dominant: the stage with the largest median (not mean, not total, not the smallest), a name from the
      input, the first one on a tie.
  errors: a stage with an empty list, tuple or numpy array raises ValueError naming that stage (not a silent
      skip, not a 0 ms stage, not a numpy warning and nan, not numpy's "truth value is ambiguous"); an empty
      dict raises ValueError.
  against a reference (numpy's median, the solution) on generated timings: 1 to 5 stages with names no note
  mentions, 1 to 9 samples each (odd and even counts, ties, 0 ms, outliers) as lists, tuples, numpy arrays
  (float64, float32, int64) or numpy scalars, now and then an empty stage or no stage; the report must match
  the reference to 1e-6 (or raise ValueError where it does), and the samples must be left as they were.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ailab.labs.core import answer, check, expect, refused
from ailab.labs.differential import close, same_as_reference, short

LAB = "ex_stage_shares"

KEYS = ("p50_ms", "share", "dominant")


def _report(stage_report, samples, what):
    copy = {k: list(v) for k, v in samples.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # mean of an empty slice -> an error, not nan
        out = answer(stage_report, samples, what=what)
    expect(
        all(_unchanged(samples.get(k), v) for k, v in copy.items()) and set(samples) == set(copy),
        f"{what}: stage_report changed the samples it was given (sorted them in place, or wrote its results "
        "into them?); work on a copy",
    )
    expect(
        isinstance(out, dict) and set(KEYS) <= set(out),
        f"{what}: stage_report should return a dict with the keys {list(KEYS)}; got "
        f"{sorted(out) if isinstance(out, dict) else type(out).__name__}",
    )
    for key in ("p50_ms", "share"):
        expect(
            isinstance(out[key], dict),
            f"{what}: out[{key!r}] should be a dict stage -> number; got {type(out[key]).__name__}",
        )
        expect(
            set(out[key]) == set(copy),
            f"{what}: out[{key!r}] should have one entry per stage of the input, "
            f"{list(copy)}; it has {list(out[key])} - take the stage names from "
            "the dict you are given",
        )
        expect(
            all(isinstance(v, (float, int, np.floating)) and not isinstance(v, bool) for v in out[key].values()),
            f"{what}: out[{key!r}] should hold numbers; got {out[key]!r}",
        )
    return out


def _unchanged(now, before: list) -> bool:
    """Are a stage's samples still the values they were? An answer may have put anything there (a median, None):
    that is a changed input to report, never a TypeError of the checker's own."""
    try:
        return [float(x) for x in now] == before
    except (TypeError, ValueError):
        return False


def _close(a, b):
    return math.isclose(float(a), b, rel_tol=1e-9, abs_tol=1e-12)


@check(LAB, "p50_ms is each stage's median, for any stage names")
def check_medians(stage_report):
    samples = {
        "tokenize": [1.0, 1.2, 0.9, 1.1, 30.0],
        "forward": [6.0, 5.0, 7.0, 5.5, 6.5],
        "postprocess": [0.2, 0.3, 0.25, 0.2, 0.3],
    }
    out = _report(stage_report, samples, "5 samples per stage, one 30 ms outlier in tokenize")
    expect(
        _close(out["p50_ms"]["tokenize"], 1.1),
        f"tokenize samples [1.0, 1.2, 0.9, 1.1, 30.0]: p50_ms should be their median, 1.1; got "
        f"{out['p50_ms']['tokenize']!r} - the middle value once sorted (samples arrive in call order); one slow "
        "outlier moves a mean (6.84), not a median",
    )
    expect(
        _close(out["p50_ms"]["forward"], 6.0) and _close(out["p50_ms"]["postprocess"], 0.25),
        f"forward [6.0, 5.0, 7.0, 5.5, 6.5] and postprocess [0.2, 0.3, 0.25, 0.2, 0.3] have medians 6.0 and 0.25 "
        f"(sort first: samples arrive unsorted); got {out['p50_ms']['forward']!r} and "
        f"{out['p50_ms']['postprocess']!r}",
    )
    out = _report(
        stage_report,
        {"queue": [4.0, 1.0, 3.0, 2.0], "forward": [10.0, 12.0]},
        "an even number of samples, stages 'queue' and 'forward'",
    )
    expect(
        _close(out["p50_ms"]["queue"], 2.5) and _close(out["p50_ms"]["forward"], 11.0),
        f"queue [4.0, 1.0, 3.0, 2.0] and forward [10.0, 12.0]: with an even count the median is the mean of the "
        f"two middle values, 2.5 and 11.0; got {out['p50_ms']['queue']!r} and {out['p50_ms']['forward']!r}",
    )
    out = _report(stage_report, {"detokenize": (3.5,)}, "one stage 'detokenize' with a single sample (a tuple)")
    expect(
        _close(out["p50_ms"]["detokenize"], 3.5),
        f"a single sample 3.5 is its own median; got {out['p50_ms']['detokenize']!r}",
    )
    arr = np.array([2.0, 9.0, 4.0], dtype=np.float32)
    out = _report(stage_report, {"a": arr, "b": [1.0, 1.0, 1.0]}, "samples as a float32 numpy array")
    expect(_close(out["p50_ms"]["a"], 4.0), f"a numpy array [2, 9, 4] has median 4.0; got {out['p50_ms']['a']!r}")


@check(LAB, "share is each median over the sum of the medians; dominant is the largest median")
def check_shares(stage_report):
    samples = {"tokenize": [1.0, 1.0, 50.0], "forward": [6.0, 6.0, 6.0], "postprocess": [1.0, 1.0, 1.0]}
    out = _report(stage_report, samples, "medians 1, 6 and 1 ms (tokenize has one 50 ms outlier)")
    share = out["share"]
    expect(
        all(0.0 <= float(v) <= 1.0 for v in share.values()),
        f"shares are fractions in 0..1 (the notebook prints them as %); got {share}",
    )
    expect(
        _close(sum(map(float, share.values())), 1.0),
        f"the shares should sum to 1; they sum to {sum(map(float, share.values())):.6g}: {share}",
    )
    expect(
        _close(share["forward"], 0.75) and _close(share["tokenize"], 0.125),
        f"medians tokenize 1, forward 6, postprocess 1: forward's share is 6 / (1 + 6 + 1) = 0.75 and tokenize's "
        f"0.125; got forward {float(share['forward']):.4g}, tokenize {float(share['tokenize']):.4g} - divide each "
        "median by the sum of the medians (not of the means or of the raw samples)",
    )
    expect(
        out["dominant"] == "forward",
        f"forward has the largest median (6 ms; tokenize's mean is larger, its "
        f"median is not): dominant should be 'forward'; got {out['dominant']!r}",
    )
    out = _report(
        stage_report,
        {"post": [0.5, 0.7, 0.6], "prep": [2.0, 3.0, 2.5], "model": [1.0, 1.1, 0.9]},
        "stages 'post', 'prep' and 'model' with medians 0.6, 2.5 and 1.0",
    )
    expect(
        out["dominant"] == "prep",
        f"'prep' has the largest median (2.5 ms, then model 1.0, post 0.6): dominant "
        f"should be 'prep'; got {out['dominant']!r}",
    )
    expect(
        _close(out["share"]["model"], 1.0 / 4.1),
        f"model's share should be 1.0 / (0.6 + 2.5 + 1.0) = {1 / 4.1:.4f}; got {float(out['share']['model']):.4g}",
    )
    out = _report(stage_report, {"forward": [8.0, 9.0, 7.0]}, "a single stage")
    expect(
        _close(out["share"]["forward"], 1.0) and out["dominant"] == "forward",
        f"with one stage its share is 1.0 and it dominates; got share {out['share']['forward']!r}, dominant "
        f"{out['dominant']!r}",
    )
    out = _report(
        stage_report,
        {"b": [2.0, 2.0], "a": [1.0], "c": [2.0, 1.0, 3.0]},
        "a tie: stages 'b' and 'c' both have median 2.0 ('b' first)",
    )
    expect(
        out["dominant"] == "b",
        f"on a tie dominant is the first of the tied stages in the input's order ('b' "
        f"before 'c'); got {out['dominant']!r}",
    )


@check(LAB, "a stage with no samples, or no stage, is an error that names it")
def check_errors(stage_report):
    for samples, name, kind in [
        ({"tokenize": [1.0, 2.0], "forward": [], "postprocess": [0.1]}, "forward", "list"),
        ({"queue_wait": [], "forward": [3.0]}, "queue_wait", "list"),
        ({"tokenize": np.array([1.0, 2.0]), "forward": np.array([])}, "forward", "numpy array"),
        ({"forward": (4.0, 5.0), "postprocess": ()}, "postprocess", "tuple"),
    ]:
        e = refused(
            stage_report,
            samples,
            what=f"stage {name!r} has an empty {kind} of samples",
            should="raise ValueError naming the stage (a missing stage must not be skipped or reported as "
            "0 ms); test for no samples with len(), which works for a list, a tuple and an array",
        )
        expect(
            name in str(e),
            f"stage {name!r} has no samples: the ValueError should name it so the caller "
            f"knows which timer never ran; its message is {str(e)!r}",
        )
    refused(
        stage_report,
        {},
        what="stage_report({}), no stages at all",
        should="with no stage there is nothing to share: raise ValueError",
    )


def samples_from(clf, texts, batch_size: int = 8, iters: int = 15, warmup: int = 2) -> dict[str, list[float]]:
    """Raw per-call stage timings (ms) of an ailab TextClassifierRunner: what stage_report summarises."""
    out: dict[str, list[float]] = {"tokenize": [], "forward": [], "postprocess": []}
    for i in range(warmup + iters):
        chunk = [texts[(i * batch_size + j) % len(texts)] for j in range(batch_size)]
        t = clf.predict(chunk).timings
        if i >= warmup:
            for k, v in zip(out, (t.tokenize_ms, t.forward_ms, t.postprocess_ms)):
                out[k].append(v)
    return out


# --------------------------------------------------------------------------- the differential check (issue 42)


def _reference_stage_report(samples):
    """The solution's report: numpy's median per stage (a copy is sorted), the medians' shares, the first largest."""
    if not samples:
        raise ValueError("stage_report needs at least one stage")
    p50 = {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples: did its timer run?")
        p50[stage] = float(np.median(np.asarray(values, dtype=np.float64)))
    total = sum(p50.values())
    return {"p50_ms": p50, "share": {s: v / total for s, v in p50.items()}, "dominant": max(p50, key=p50.get)}


# names no note mentions: other cases, spaces, digits, an empty name, non-ASCII
_STAGES = ("tokenize", "forward", "postprocess", "queue wait", "Forward", "detokenize", "", "1", "cache→hit", "b", "a")
# multiples of 1/8 ms: exact in float32 as in float64, so a median is the same whatever the container
_MS = (0.0, 0.125, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 7.25, 30.0, 250.0)
_KINDS = ("list", "list", "tuple", "float64 array", "float32 array", "int64 array", "list of np.float64", "list of int")


def _container(values, kind):
    if kind == "tuple":
        return tuple(values)
    if kind.endswith("array"):
        return np.asarray(values, dtype={"float64": np.float64, "float32": np.float32, "int64": np.int64}[kind[:-6]])
    if kind == "list of np.float64":
        return [np.float64(v) for v in values]
    return list(values)


def _stage_samples():
    """Hypothesis: {stage: timings} - 1 to 5 stages in any order, 1 to 9 samples each (odd and even counts,
    unsorted, ties, zeros, outliers), as lists, tuples, numpy arrays of three dtypes or numpy scalars; now and
    then a stage with no samples or no stage at all (a ValueError)."""
    from hypothesis import strategies as st

    ms = st.one_of(st.sampled_from(_MS), st.integers(0, 512).map(lambda k: k / 8))
    stage = st.tuples(
        st.integers(0, len(_STAGES) - 1),
        st.lists(ms, min_size=1, max_size=9),
        st.integers(0, len(_KINDS) - 1),
    )

    @st.composite
    def draw(d):
        stages = d(st.lists(stage, min_size=1, max_size=5, unique_by=lambda t: t[0]))
        samples = {}
        for i, values, kind in stages:
            values = [int(v) for v in values] if "int" in _KINDS[kind] else values
            samples[_STAGES[i]] = _container(values, _KINDS[kind])
        if sum(float(np.median(v)) for v in samples.values()) == 0:  # the shares would be 0/0: left open
            first = _STAGES[stages[0][0]]
            samples[first] = _container([1, 1, 0], _KINDS[stages[0][2]])
        broken = d(st.integers(0, 15))
        if broken == 0:
            return ({},)
        if broken == 1:  # one stage's timer never ran
            name = _STAGES[stages[-1][0]]
            samples[name] = _container([], _KINDS[stages[-1][2]])
        return (samples,)

    return draw()


def _same_report(mine, ref):
    """The three keys compared (numbers to 1e-6: float32 samples may be summed in float32), extra keys ignored."""
    if not isinstance(mine, dict) or not set(KEYS) <= set(mine):
        return f"your answer should be a dict with the keys {list(KEYS)}; got {short(mine)}"
    return close(rel=1e-6, abs_=1e-9)({k: mine[k] for k in KEYS}, ref)


def _describe_samples(samples):
    return "samples={" + ", ".join(f"{k!r}: {_shown(v)}" for k, v in samples.items()) + "}"


def _shown(values):
    if isinstance(values, np.ndarray):
        return f"np.array({values.tolist()}, dtype={values.dtype})"
    if values and isinstance(values[0], np.generic):
        return f"[{', '.join(f'np.float64({float(v)!r})' for v in values)}]"
    return repr(values)


@check(LAB, "agrees with the reference report on every set of timings tried")
def check_same_as_reference(stage_report):
    same_as_reference(
        stage_report,
        _reference_stage_report,
        _stage_samples(),
        describe=_describe_samples,
        compare=_same_report,
        edges=[
            ({"forward": [0.0, 0.0, 0.0], "tokenize": [1.0]},),  # a stage of 0 ms is a stage, with share 0
            ({"b": [2.0, 3.0], "a": [2.5]},),  # a tie, the first in the input's order
            ({"x": [1, 2]},),  # ints: the median of an even count is 1.5, not 1
        ],
        arg_names=("samples",),
        examples=150,
    )
