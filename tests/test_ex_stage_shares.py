"""The stage-shares exercise's checks pass the right answer and reject plausible wrong ones.

stage_report(samples) -> {"p50_ms", "share", "dominant"}
| question | what the checks try |
|---|---|
| which input varies each field | one stage's samples changed at a time (an outlier moves the mean, not the median); stage names no note mentions |
| boundaries | a single sample; an even count; a single stage (share 1); an empty list, tuple or array of samples; no stage at all |
| a type the notes never show | samples as a tuple, a float32 numpy array, an empty numpy array |
| order or ties | unsorted samples; a tie for the largest median (the first in the input's order) |
| errors: type and message | ValueError (not KeyError, not numpy's "ambiguous truth value", not a skipped or 0 ms stage) naming the empty stage; the samples left unsorted |
| policy: which item | which stage dominates: the largest median, not the mean or the total |

Each wrong answer is one class of mistake (a mean for a median, the upper middle of an even count, shares of
the means or of the raw sums, percent for fractions, hard-coded stage names, the smallest stage as dominant,
the last of a tie, an empty stage skipped or reported as 0, samples sorted in place, ...).
"""

import statistics

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_stage_shares as E


def _finish(p50):
    total = sum(p50.values())
    return {"p50_ms": p50, "share": {k: v / total for k, v in p50.items()}, "dominant": max(p50, key=p50.get)}


def stage_report(samples):
    if not samples:
        raise ValueError("no stages")
    p50 = {}
    for name, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {name!r} has no samples")
        p50[name] = float(np.median(np.asarray(values, dtype=np.float64)))
    return _finish(p50)


def stage_report_alt(samples):
    """Also right: statistics.median and an explicit loop for the dominant stage."""
    if len(samples) == 0:
        raise ValueError("nothing to report")
    empty = [k for k, v in samples.items() if len(v) == 0]
    if empty:
        raise ValueError(f"no samples for {', '.join(empty)}")
    p50 = {k: statistics.median(map(float, v)) for k, v in samples.items()}
    total = sum(p50.values())
    best = None
    for k, v in p50.items():
        if best is None or v > p50[best]:
            best = k
    return {"p50_ms": p50, "share": {k: v / total for k, v in p50.items()}, "dominant": best}


def _checked(samples):
    if not samples:
        raise ValueError("no stages")
    for name, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {name} has no samples")


def report_mean(samples):
    _checked(samples)
    return _finish({k: float(np.mean(v)) for k, v in samples.items()})


def report_upper_middle(samples):
    """sorted(v)[n // 2]: right for an odd count, the upper middle for an even one."""
    _checked(samples)
    return _finish({k: float(sorted(v)[len(v) // 2]) for k, v in samples.items()})


def report_unsorted_middle(samples):
    """Takes the middle element without sorting."""
    _checked(samples)
    return _finish({k: float(list(v)[len(v) // 2]) for k, v in samples.items()})


def report_shares_of_raw_sums(samples):
    out = stage_report(samples)
    sums = {k: float(np.sum(v)) for k, v in samples.items()}
    out["share"] = {k: s / sum(sums.values()) for k, s in sums.items()}
    return out


def report_percent(samples):
    out = stage_report(samples)
    out["share"] = {k: 100 * v for k, v in out["share"].items()}
    return out


def report_share_of_largest(samples):
    out = stage_report(samples)
    top = max(out["p50_ms"].values())
    out["share"] = {k: v / top for k, v in out["p50_ms"].items()}
    return out


def report_fixed_stages(samples):
    """The notebook's three stage names, whatever the input holds."""
    _checked(samples)
    p50 = {k: float(np.median(samples[k])) for k in ("tokenize", "forward", "postprocess")}
    return _finish(p50)


def report_dominant_smallest(samples):
    out = stage_report(samples)
    out["dominant"] = min(out["p50_ms"], key=out["p50_ms"].get)
    return out


def report_dominant_by_mean(samples):
    out = stage_report(samples)
    out["dominant"] = max(samples, key=lambda k: np.mean(samples[k]))
    return out


def report_dominant_last_on_tie(samples):
    out = stage_report(samples)
    p50 = out["p50_ms"]
    out["dominant"] = max(reversed(list(p50)), key=p50.get)
    return out


def report_dominant_share_value(samples):
    """Returns the largest share instead of the stage's name."""
    out = stage_report(samples)
    out["dominant"] = max(out["share"].values())
    return out


def report_skips_empty(samples):
    if not samples:
        raise ValueError("no stages")
    return _finish({k: float(np.median(v)) for k, v in samples.items() if len(v)})


def report_zero_for_empty(samples):
    if not samples:
        raise ValueError("no stages")
    return _finish({k: float(np.median(v)) if len(v) else 0.0 for k, v in samples.items()})


def report_empty_without_name(samples):
    if not samples or any(len(v) == 0 for v in samples.values()):
        raise ValueError("a stage has no samples")
    return stage_report(samples)


def report_key_error(samples):
    """Raises the wrong type for an empty stage."""
    for name, values in samples.items():
        if len(values) == 0:
            raise KeyError(name)
    return stage_report(samples)


def report_empty_dict_ok(samples):
    """An empty dict gives an empty report instead of an error."""
    if not samples:
        return {"p50_ms": {}, "share": {}, "dominant": None}
    return stage_report(samples)


def report_sorts_in_place(samples):
    _checked(samples)
    for v in samples.values():
        v.sort()
    return _finish({k: float(np.median(v)) for k, v in samples.items()})


def report_numpy_scalar_median_of_percentile(samples):
    """np.percentile with a nearest-rank method: not the median of an even count."""
    _checked(samples)
    return _finish({k: float(np.percentile(v, 50, method="lower")) for k, v in samples.items()})


def report_writes_medians_into_its_input(samples):
    """Right figures, but each stage's samples replaced by their median: the checker read a float back."""
    out = stage_report(samples)
    for k in samples:
        samples[k] = out["p50_ms"][k]
    return out


def report_drops_a_stage_from_its_input(samples):
    out = stage_report(samples)
    samples.pop(next(iter(samples)))
    return out


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (stage_report, stage_report_alt):
        E.check_medians(fn)
        E.check_shares(fn)
        E.check_errors(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (E.check_medians, report_mean, r"should be their median, 1\.1.*moves a mean"),
        (E.check_medians, report_upper_middle, "mean of the two middle values"),
        (E.check_medians, report_numpy_scalar_median_of_percentile, "mean of the two middle values"),
        (E.check_medians, report_unsorted_middle, r"should be their median, 1\.1; got 0\.9"),
        (E.check_medians, report_fixed_stages, "your code raised KeyError"),
        (E.check_medians, report_sorts_in_place, "changed the samples it was given"),
        (E.check_medians, report_writes_medians_into_its_input, "changed the samples it was given"),
        (E.check_medians, report_drops_a_stage_from_its_input, "changed the samples it was given"),
        (E.check_shares, report_mean, r"forward's share is 6 / \(1 \+ 6 \+ 1\)"),
        (E.check_shares, report_shares_of_raw_sums, r"forward's share is 6 / \(1 \+ 6 \+ 1\)"),
        (E.check_shares, report_percent, "fractions in 0..1"),
        (E.check_shares, report_share_of_largest, "should sum to 1"),
        (E.check_shares, report_dominant_smallest, "dominant should be 'forward'"),
        (E.check_shares, report_dominant_by_mean, "dominant should be 'forward'"),
        (E.check_shares, report_dominant_last_on_tie, r"first of the tied stages.*got 'c'"),
        (E.check_shares, report_dominant_share_value, "dominant should be 'forward'; got 0.75"),
        (E.check_errors, report_skips_empty, r"has an empty list of samples: raise ValueError.*; it returned"),
        (E.check_errors, report_zero_for_empty, r"has an empty list of samples: raise ValueError.*; it returned"),
        (E.check_errors, report_empty_without_name, "the ValueError should name it"),
        (E.check_errors, report_key_error, r"raise ValueError naming the stage.*your code raised KeyError"),
        (E.check_errors, report_empty_dict_ok, r"stage_report\(\{\}\), no stages at all: .*it returned"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("chk", [E.check_medians, E.check_shares, E.check_errors])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def test_samples_from_a_fake_classifier():
    class Timings:
        tokenize_ms, forward_ms, postprocess_ms = 1.0, 2.0, 0.5

    class Pred:
        timings = Timings()

    class Clf:
        calls = 0

        def predict(self, texts):
            Clf.calls += 1
            assert len(texts) == 4
            return Pred()

    out = E.samples_from(Clf(), ["a", "b", "c"], batch_size=4, iters=5, warmup=1)
    assert Clf.calls == 6 and out == {"tokenize": [1.0] * 5, "forward": [2.0] * 5, "postprocess": [0.5] * 5}


def report_truthiness_check(samples):
    """Tests `if not values`: fine for lists, numpy's 'truth value is ambiguous' for an array."""
    if not samples:
        raise ValueError("no stages")
    for stage, values in samples.items():
        if not values:
            raise ValueError(f"stage {stage!r} has no samples")
    return stage_report(samples)


def test_an_empty_check_that_only_works_for_lists():
    with pytest.raises(LabCheckFailed, match=r"numpy array.*your code raised ValueError: The truth value"):
        E.check_medians(report_truthiness_check)


# --------------------------------------------------------------------------- the differential check (issue 42)


def even_count_integer_division(samples):
    """Units and rounding: the two middle values averaged with //, so the median of [1, 2] ms is 1, not 1.5."""
    _checked(samples)
    p50 = {}
    for k, v in samples.items():
        s, n = sorted(v), len(v)
        p50[k] = float(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2)
    return _finish(p50)


def rounded_medians(samples):
    """Units and rounding: each median rounded to 0.1 ms ("nobody reads more digits") before the shares."""
    _checked(samples)
    return _finish({k: round(float(np.median(v)), 1) for k, v in samples.items()})


def zero_ms_stage_is_empty(samples):
    """Boundaries: tests for "no samples" with `not any(values)`, so a stage that took 0 ms each time raises."""
    if not samples:
        raise ValueError("no stages")
    for k, v in samples.items():
        if not any(v):
            raise ValueError(f"stage {k!r} has no samples")
    return stage_report(samples)


def zero_share_dropped(samples):
    """Boundaries: `if m` skips a stage whose median is 0 ms when the shares are built."""
    out = stage_report(samples)
    total = sum(out["p50_ms"].values())
    out["share"] = {k: m / total for k, m in out["p50_ms"].items() if m}
    return out


def sorts_numpy_arrays_in_place(samples):
    """State: np.asarray(values) is the caller's own array when it is one, and .sort() sorts it in place."""
    _checked(samples)
    p50 = {}
    for k, v in samples.items():
        a = np.asarray(v, dtype=float)
        a.sort()
        n = len(a)
        p50[k] = float(a[n // 2] if n % 2 else (a[n // 2 - 1] + a[n // 2]) / 2)
    return _finish(p50)


_MEDIANS = {}


def caches_medians_by_stage(samples):
    """State: keeps each stage's median between calls ("the same stage, the same median"), keyed by its name."""
    _checked(samples)
    for k, v in samples.items():
        _MEDIANS.setdefault(k, float(np.median(v)))
    return _finish({k: _MEDIANS[k] for k in samples})


def alphabetical_on_a_tie(samples):
    """Order: max over the sorted stage names, so a tie goes to the first name alphabetically, not in the input."""
    out = stage_report(samples)
    out["dominant"] = max(sorted(out["p50_ms"]), key=out["p50_ms"].get)
    return out


def stage_names_normalised(samples):
    """Parsing: stage names lower-cased and stripped ("Forward" and "forward" are one stage), first one kept."""
    _checked(samples)
    merged = {}
    for k, v in samples.items():
        merged.setdefault(k.strip().lower(), v)
    return _finish({k: float(np.median(v)) for k, v in merged.items()})


NEW_WRONG = [
    even_count_integer_division,
    rounded_medians,
    zero_ms_stage_is_empty,
    zero_share_dropped,
    sorts_numpy_arrays_in_place,
    caches_medians_by_stage,
    alphabetical_on_a_tie,
    stage_names_normalised,
]

OLD_WRONG = [
    report_mean,
    report_upper_middle,
    report_unsorted_middle,
    report_shares_of_raw_sums,
    report_percent,
    report_share_of_largest,
    report_fixed_stages,
    report_dominant_smallest,
    report_dominant_by_mean,
    report_dominant_last_on_tie,
    report_dominant_share_value,
    report_skips_empty,
    report_zero_for_empty,
    report_key_error,
    report_empty_dict_ok,
    report_sorts_in_place,
    report_numpy_scalar_median_of_percentile,
    report_writes_medians_into_its_input,
    report_drops_a_stage_from_its_input,
    report_truthiness_check,
]


def test_right_answers_agree_with_the_reference():
    for fn in (stage_report, stage_report_alt):
        E.check_same_as_reference(fn)


def test_the_reference_passes_every_check():
    for chk in (E.check_medians, E.check_shares, E.check_errors):
        chk(E._reference_stage_report)


@pytest.mark.parametrize("wrong", OLD_WRONG + NEW_WRONG)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    _MEDIANS.clear()
    with pytest.raises(LabCheckFailed, match="where the two differ|changed its input|on samples="):
        E.check_same_as_reference(wrong)


def test_an_unnamed_empty_stage_is_left_to_check_errors():
    """The differential check compares the error's type, not its words: the message is check_errors' to judge."""
    E.check_same_as_reference(report_empty_without_name)
    with pytest.raises(LabCheckFailed, match="should name it"):
        E.check_errors(report_empty_without_name)


@pytest.mark.parametrize(
    "wrong", [zero_ms_stage_is_empty, zero_share_dropped, sorts_numpy_arrays_in_place, alphabetical_on_a_tie]
)
def test_the_old_checks_miss_what_the_differential_check_catches(wrong):
    """These got past the hand-picked cases: a stage of 0 ms, a caller's numpy array, a tie decided by name."""
    for chk in (E.check_medians, E.check_shares, E.check_errors):
        chk(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        E.check_same_as_reference(even_count_integer_division)
    assert "samples=" in str(e.value) and "where the reference's is" in str(e.value)


def test_the_stub_fails_the_differential_check():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        E.check_same_as_reference(stub)
