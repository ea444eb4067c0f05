"""Exercise checks: score a sentiment service as its users see it - accuracy, errors, degraded answers (topic A2).

The learner writes
  service_report(answers, labels) -> dict
      answers[i] is what request i got: an answer dict {"label": ..., optionally "degraded": True} or an HTTP
      error status (an int: 400, 429, 503, ...); labels[i] is its true label. Returns
        n              the number of requests,
        error_rate     the share of requests that got an error status,
        degraded_rate  the share answered with a degraded (fallback) answer,
        accuracy       correct labels over the answered, non-degraded requests; NaN when there are none.
      No requests: n = 0 and the three rates NaN. answers and labels of different lengths: ValueError.

The checks are derived from what the function must guarantee:
  each field on its own on a mixed example; every error status counts (4xx and 5xx, not only 5xx); "degraded":
  False is an ordinary answer; degraded and failed requests count in neither the numerator nor the denominator
  of accuracy (a fallback "unknown" is not a wrong answer, an error is not a right one); zero answered gives NaN
  accuracy (never 1.0 or 0.0, never a ZeroDivisionError); no requests at all; a length mismatch is an error,
  not a silent truncation, also when one side is empty, and its message gives both lengths; labels as a tuple or a
  numpy array; the inputs are left as they were. A fallback is told by its "degraded" flag, not by its label: the
  fallback answers "unknown" in one example and the majority label (sometimes right) in another, where the
  model itself also answers "unknown" once.
  Against a reference written from this contract, on Hypothesis-drawn requests (0 to 14; statuses 400 to 599;
  answers with "degraded" True, False or missing, with extra keys such as "score"; equal answer dicts repeated;
  labels as a list, a tuple or a numpy array, now and then of another length): the same four fields (close), the
  same ValueError, the inputs left as they were, and the same answer on every call.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ailab.labs.core import answer, check, expect, refused
from ailab.labs.differential import close, same_as_reference, short

LAB = "ex_service_report"
FIELDS = ("n", "error_rate", "degraded_rate", "accuracy")


def _report(service_report, answers, labels, what):
    given = ([dict(a) if isinstance(a, dict) else a for a in answers], list(labels))
    out = answer(service_report, answers, labels, what=what)
    expect(
        ([dict(a) if isinstance(a, dict) else a for a in answers], list(labels)) == given,
        f"{what}: service_report changed the answers or labels it was given; leave them as they are",
    )
    expect(isinstance(out, dict), f"{what}: service_report should return a dict; got {out!r}")
    missing = [k for k in FIELDS if k not in out]
    expect(not missing, f"{what}: the report has no {missing} (it should hold {list(FIELDS)}); got {out!r}")
    for k in FIELDS[1:]:
        expect(
            isinstance(out[k], numbers.Real) and not isinstance(out[k], bool),
            f"{what}: {k} should be a number; got {out[k]!r}",
        )
    return out


def _is(got, want):
    return (math.isnan(got) and math.isnan(want)) if math.isnan(want) else math.isclose(got, want, rel_tol=1e-9)


POS, NEG = "positive", "negative"


def _mixed():
    answers = [
        {"label": POS},
        {"label": NEG},
        503,
        {"label": "unknown", "degraded": True},
        {"label": POS},
        429,
        {"label": NEG, "degraded": False},
        {"label": POS},
        400,
        {"label": "unknown", "degraded": True},
    ]
    labels = [POS, POS, NEG, POS, POS, NEG, NEG, POS, POS, NEG]
    return answers, labels


def _majority_fallback():
    """A fallback configured as the majority label: degraded answers carry a real label, and right ones at that."""
    fallback = {"label": POS, "degraded": True}
    answers = [
        {"label": POS},
        dict(fallback),
        {"label": "unknown"},
        dict(fallback),
        {"label": NEG},
        500,
        dict(fallback),
        {"label": POS},
    ]
    labels = [POS, POS, NEG, NEG, NEG, POS, POS, NEG]
    return answers, labels


@check(LAB, "n, error_rate and degraded_rate, each over every request")
def check_rates(service_report):
    answers, labels = _mixed()
    what = "10 requests: 7 answered (2 of them degraded), errors 503, 429 and 400"
    out = _report(service_report, answers, labels, what)
    expect(out["n"] == 10, f"{what}: n is the number of requests, 10; got {out['n']!r}")
    expect(
        _is(out["error_rate"], 0.3),
        f"{what}: 3 of the 10 requests got an error status (400 and 429 count, not "
        f"only 5xx): error_rate 0.3; got {out['error_rate']!r}",
    )
    expect(
        _is(out["degraded_rate"], 0.2),
        f"{what}: 2 of the 10 were answered with a degraded fallback "
        f'("degraded": False is an ordinary answer): degraded_rate 0.2; got '
        f"{out['degraded_rate']!r}",
    )
    answers, labels = _majority_fallback()
    what = (
        "a fallback that answers the majority label: 3 of 8 requests answered {'label': 'positive', 'degraded': "
        "True}, and the model itself once answered 'unknown'"
    )
    out = _report(service_report, answers, labels, what)
    expect(
        _is(out["degraded_rate"], 3 / 8),
        f'{what}: degraded_rate is 3/8 = 0.375 (the "degraded" flag says '
        f"which answers are fallbacks, whatever their label); got "
        f"{out['degraded_rate']!r}",
    )
    answers = [{"label": NEG}] * 3 + [504]
    out = _report(service_report, answers, [NEG] * 4, "3 answers and one 504")
    expect(
        out["n"] == 4 and _is(out["error_rate"], 0.25) and _is(out["degraded_rate"], 0.0),
        f"3 answers and one 504: n 4, error_rate 0.25, degraded_rate 0.0; got {out}",
    )


@check(LAB, "accuracy over the answered, non-degraded requests")
def check_accuracy(service_report):
    answers, labels = _mixed()
    what = "10 requests: 7 answered (2 of them degraded), 3 errors"
    out = _report(service_report, answers, labels, what)
    expect(
        _is(out["accuracy"], 4 / 5),
        f"{what}: of the 5 answered, non-degraded requests 4 carry the right label: accuracy 0.8; got "
        f"{out['accuracy']!r} - leave errors and degraded answers out of both the count and the total",
    )
    for kind, lab in [("a tuple", tuple(labels)), ("a numpy array", np.array(labels))]:
        out = _report(service_report, answers, lab, f"labels as {kind}")
        expect(_is(out["accuracy"], 0.8), f"labels as {kind}: accuracy should still be 0.8; got {out['accuracy']!r}")
    answers, labels = _majority_fallback()
    what = (
        "a fallback that answers the majority label ('positive', degraded: True) for 3 of 8 requests, two of "
        "them right by luck; the model answered 4, 2 of them right ('unknown' once, wrong)"
    )
    out = _report(service_report, answers, labels, what)
    expect(
        _is(out["accuracy"], 0.5),
        f"{what}: accuracy over the model's 4 ordinary answers is 2/4 = 0.5; got "
        f'{out["accuracy"]!r} - tell a fallback by its "degraded" flag, not by its '
        "label, and leave it out even when it happens to be right",
    )
    out = _report(service_report, [{"label": POS}], [POS], "one right answer")
    expect(_is(out["accuracy"], 1.0) and out["n"] == 1, f"one request, answered right: accuracy 1.0, n 1; got {out}")
    out = _report(service_report, [{"label": NEG}, {"label": NEG}], [POS, POS], "two wrong answers")
    expect(_is(out["accuracy"], 0.0), f"two requests, both answered wrong: accuracy 0.0; got {out['accuracy']!r}")


@check(LAB, "no answers, no requests, and mismatched lengths")
def check_edges(service_report):
    for what, answers in [
        ("every request failed (503, 503, 500)", [503, 503, 500]),
        ("every answer degraded", [{"label": "unknown", "degraded": True}] * 3),
    ]:
        out = _report(service_report, answers, [POS, NEG, POS], what)
        expect(
            math.isnan(out["accuracy"]),
            f"{what}: nothing was answered by the model, so there is no accuracy: "
            f"return float('nan'), never 1.0 or 0.0; got {out['accuracy']!r}",
        )
    out = _report(service_report, [503, 503, 500], [POS, NEG, POS], "every request failed")
    expect(_is(out["error_rate"], 1.0), f"every request failed: error_rate 1.0; got {out['error_rate']!r}")
    out = _report(service_report, [], [], "no requests")
    expect(out["n"] == 0, f"no requests: n 0; got {out['n']!r}")
    expect(
        all(math.isnan(out[k]) for k in FIELDS[1:]),
        f"no requests: there is no rate of anything; error_rate, degraded_rate and accuracy should be NaN; got {out}",
    )
    for answers, labels in [
        ([{"label": POS}, 503], [POS]),
        ([{"label": POS}], [POS, NEG]),
        ([], [POS]),
        ([503], []),
        ([], np.array([POS, NEG])),
    ]:
        what = f"{len(answers)} answers and {len(labels)} labels"
        e = refused(
            service_report,
            answers,
            labels,
            what=what,
            should="the lengths differ, so the answers cannot be matched to their labels: raise ValueError "
            "naming both lengths (check the lengths before anything else, the empty case too)",
        )
        expect(
            str(len(answers)) in str(e) and str(len(labels)) in str(e),
            f"{what}: a ValueError, good, but its message {str(e)!r} should give both lengths, "
            f"{len(answers)} and {len(labels)}, so whoever reads it knows which side is short",
        )


# --------------------------------------------------------------------------- the differential check


def _reference_service_report(answers, labels):
    """The contract, written plainly: errors are non-dicts, fallbacks have a true "degraded", the rest is scored."""
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels: they cannot be matched")
    n = len(answers)
    errors = sum(1 for a in answers if not isinstance(a, dict))
    degraded = sum(1 for a in answers if isinstance(a, dict) and a.get("degraded"))
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    return {
        "n": n,
        "error_rate": errors / n if n else math.nan,
        "degraded_rate": degraded / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
    }


_LABELS = (POS, NEG, "unknown", "neutral")


def _requests():
    """Hypothesis: (answers, labels) as a load test collects them."""
    from hypothesis import strategies as st

    status = st.sampled_from([400, 429, 503, 500, 404, 422, 502, 504, 599]) | st.integers(400, 599)
    label = st.sampled_from(_LABELS)

    @st.composite
    def one_answer(d):
        kind = d(st.sampled_from(["answer", "answer", "error", "degraded"]))
        if kind == "error":
            return d(status)
        a = {"label": d(label)}
        if d(st.booleans()):
            a["score"] = d(st.sampled_from([0.5, 0.93, None]))
        if kind == "degraded":
            a["degraded"] = True
        elif d(st.booleans()):
            a["degraded"] = False
        return a

    @st.composite
    def draw(d):
        pool = d(st.lists(one_answer(), min_size=1, max_size=4))  # a few answers, repeated: equal dicts happen
        answers = [dict(a) if isinstance(a, dict) else a for a in d(st.lists(st.sampled_from(pool), max_size=14))]
        n = len(answers)
        if d(st.integers(0, 9)) == 0:
            n = max(0, n + d(st.sampled_from([-2, -1, 1, 2])))
        labels = d(st.lists(label, min_size=n, max_size=n))
        form = d(st.sampled_from(["list", "list", "tuple", "array"]))
        return answers, (tuple(labels) if form == "tuple" else np.array(labels) if form == "array" else labels)

    return draw()


def _same_report(mine, ref):
    """close() on the four fields; extra fields are the learner's business."""
    if not isinstance(mine, dict):
        return f"service_report should return a dict like {short(ref)}; got {short(mine)}"
    missing = [k for k in FIELDS if k not in mine]
    if missing:
        return f"the report has no {missing} (it should hold {list(FIELDS)}); got {short(mine)}"
    how = close()({k: mine[k] for k in FIELDS}, ref)
    return how and f"{how}: the reference's report is {short(ref)}, yours {short({k: mine[k] for k in FIELDS})}"


@check(LAB, "the same report as the definition on every batch of requests tried")
def check_same_as_reference(service_report):
    same_as_reference(
        service_report,
        _reference_service_report,
        _requests(),
        describe=lambda answers, labels: f"answers={short(answers)}, labels={short(labels)}",
        compare=_same_report,
        edges=[
            ([], []),
            ([{"label": POS}, 400], [POS, NEG]),
            ([{"label": POS}], [POS]),  # the same one request again: nothing carried over from the call before
            ([{"label": NEG}, {"label": NEG}, {"label": NEG, "degraded": False}], [POS, NEG, NEG]),
        ],
        arg_names=("answers", "labels"),
        examples=250,
    )
