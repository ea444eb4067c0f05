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
  not a silent truncation; labels as a tuple or a numpy array; the inputs are left as they were.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ailab.labs.core import LabCheckFailed, check, expect

LAB = "ex_service_report"
FIELDS = ("n", "error_rate", "degraded_rate", "accuracy")


def _report(service_report, answers, labels, what):
    given = ([dict(a) if isinstance(a, dict) else a for a in answers], list(labels))
    try:
        out = service_report(answers, labels)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything
        raise LabCheckFailed(f"{what}: your code raised {type(e).__name__}: {e}") from e
    expect(([dict(a) if isinstance(a, dict) else a for a in answers], list(labels)) == given,
           f"{what}: service_report changed the answers or labels it was given; leave them as they are")
    expect(isinstance(out, dict), f"{what}: service_report should return a dict; got {out!r}")
    missing = [k for k in FIELDS if k not in out]
    expect(not missing, f"{what}: the report has no {missing} (it should hold {list(FIELDS)}); got {out!r}")
    for k in FIELDS[1:]:
        expect(isinstance(out[k], numbers.Real) and not isinstance(out[k], bool),
               f"{what}: {k} should be a number; got {out[k]!r}")
    return out


def _is(got, want):
    return (math.isnan(got) and math.isnan(want)) if math.isnan(want) else math.isclose(got, want, rel_tol=1e-9)


POS, NEG = "positive", "negative"


def _mixed():
    answers = [{"label": POS}, {"label": NEG}, 503, {"label": "unknown", "degraded": True}, {"label": POS},
               429, {"label": NEG, "degraded": False}, {"label": POS}, 400, {"label": "unknown", "degraded": True}]
    labels = [POS, POS, NEG, POS, POS, NEG, NEG, POS, POS, NEG]
    return answers, labels


@check(LAB, "n, error_rate and degraded_rate, each over every request")
def check_rates(service_report):
    answers, labels = _mixed()
    what = "10 requests: 7 answered (2 of them degraded), errors 503, 429 and 400"
    out = _report(service_report, answers, labels, what)
    expect(out["n"] == 10, f"{what}: n is the number of requests, 10; got {out['n']!r}")
    expect(_is(out["error_rate"], 0.3), f"{what}: 3 of the 10 requests got an error status (400 and 429 count, not "
                                        f"only 5xx): error_rate 0.3; got {out['error_rate']!r}")
    expect(_is(out["degraded_rate"], 0.2), f"{what}: 2 of the 10 were answered with a degraded fallback "
                                           f"(\"degraded\": False is an ordinary answer): degraded_rate 0.2; got "
                                           f"{out['degraded_rate']!r}")
    answers = [{"label": NEG}] * 3 + [504]
    out = _report(service_report, answers, [NEG] * 4, "3 answers and one 504")
    expect(out["n"] == 4 and _is(out["error_rate"], 0.25) and _is(out["degraded_rate"], 0.0),
           f"3 answers and one 504: n 4, error_rate 0.25, degraded_rate 0.0; got {out}")


@check(LAB, "accuracy over the answered, non-degraded requests")
def check_accuracy(service_report):
    answers, labels = _mixed()
    what = "10 requests: 7 answered (2 of them degraded), 3 errors"
    out = _report(service_report, answers, labels, what)
    expect(_is(out["accuracy"], 4 / 5),
           f"{what}: of the 5 answered, non-degraded requests 4 carry the right label: accuracy 0.8; got "
           f"{out['accuracy']!r} - leave errors and degraded answers out of both the count and the total")
    for kind, lab in [("a tuple", tuple(labels)), ("a numpy array", np.array(labels))]:
        out = _report(service_report, answers, lab, f"labels as {kind}")
        expect(_is(out["accuracy"], 0.8), f"labels as {kind}: accuracy should still be 0.8; got {out['accuracy']!r}")
    out = _report(service_report, [{"label": POS}], [POS], "one right answer")
    expect(_is(out["accuracy"], 1.0) and out["n"] == 1, f"one request, answered right: accuracy 1.0, n 1; got {out}")
    out = _report(service_report, [{"label": NEG}, {"label": NEG}], [POS, POS], "two wrong answers")
    expect(_is(out["accuracy"], 0.0), f"two requests, both answered wrong: accuracy 0.0; got {out['accuracy']!r}")


@check(LAB, "no answers, no requests, and mismatched lengths")
def check_edges(service_report):
    for what, answers in [("every request failed (503, 503, 500)", [503, 503, 500]),
                          ("every answer degraded", [{"label": "unknown", "degraded": True}] * 3)]:
        out = _report(service_report, answers, [POS, NEG, POS], what)
        expect(math.isnan(out["accuracy"]), f"{what}: nothing was answered by the model, so there is no accuracy: "
                                            f"return float('nan'), never 1.0 or 0.0; got {out['accuracy']!r}")
    out = _report(service_report, [503, 503, 500], [POS, NEG, POS], "every request failed")
    expect(_is(out["error_rate"], 1.0), f"every request failed: error_rate 1.0; got {out['error_rate']!r}")
    out = _report(service_report, [], [], "no requests")
    expect(out["n"] == 0, f"no requests: n 0; got {out['n']!r}")
    expect(all(math.isnan(out[k]) for k in FIELDS[1:]),
           f"no requests: there is no rate of anything; error_rate, degraded_rate and accuracy should be NaN; got "
           f"{out}")
    for answers, labels in [([{"label": POS}, 503], [POS]), ([{"label": POS}], [POS, NEG])]:
        what = f"{len(answers)} answers and {len(labels)} labels"
        try:
            out = service_report(answers, labels)
        except ValueError:
            continue
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - the wrong type is the mistake this check names
            expect(False, f"{what}: raised {type(e).__name__}: {e}; raise ValueError naming both lengths")
        expect(False, f"{what}: the lengths differ, so the answers cannot be matched to their labels: raise "
                      f"ValueError; it returned {out!r}")
