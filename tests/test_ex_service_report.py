"""The service-report exercise's checks pass the right answer and reject plausible wrong ones.

service_report(answers, labels) -> {"n", "error_rate", "degraded_rate", "accuracy"}
| question | what the checks try |
|---|---|
| which input varies each field | errors (400, 429, 500, 503, 504), fallbacks ("unknown" and the majority label), ordinary answers right and wrong, each changing one field |
| boundaries | no requests; everything failed; everything degraded (accuracy NaN); one request; [] against one label, one answer against [] |
| a shape or type the notes never show | labels as a tuple and as a numpy array; "degraded": False; a fallback whose label is a real one (and right); the model itself answering "unknown" |
| order or ties | - (shares) |
| errors: type and message | a length mismatch is a ValueError (not IndexError, not a truncating zip) whose message gives both lengths |
| policy: which item | which answers are fallbacks: by the "degraded" flag, never by the label |

Each wrong answer is one class of mistake (accuracy over every request, degraded answers scored as wrong,
only 5xx counted as errors, "degraded": False taken as degraded, 1.0 or a crash with nothing answered, zip
silently truncating mismatched lengths, rates over the answered requests only, ...).

The differential check (check_same_as_reference) compares the four fields with a reference written from the contract
on Hypothesis-drawn batches of requests; it catches every wrong answer here but one, vague_length_error, whose
ValueError has the right type and only the wrong words (check_edges reads them). The newer wrong answers are one per
class the hand-picked lists missed elsewhere: units and rounding (rates rounded to 2 places, percentages),
boundaries (a status > 400 instead of >= 400, a zero guard on the numerator), state (defaults written into the
caller's dicts, counters that outlive a call), order and parsing (ordinary answers zipped with the labels from the
start, a label found with answers.index).
"""

import math

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_service_report as L


def service_report(answers, labels):
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    errors = sum(1 for a in answers if not isinstance(a, dict))
    degraded = sum(1 for a in answers if isinstance(a, dict) and a.get("degraded"))
    scored = [(a["label"], y) for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    nan = float("nan")
    return {
        "n": n,
        "error_rate": errors / n if n else nan,
        "degraded_rate": degraded / n if n else nan,
        "accuracy": sum(p == y for p, y in scored) / len(scored) if scored else nan,
    }


def service_report_alt(answers, labels):
    """Also right: one pass, counters, ints tested as statuses."""
    if len(answers) != len(labels):
        raise ValueError(f"lengths differ: answers {len(answers)}, labels {len(labels)}")
    counts = {"error": 0, "degraded": 0, "ok": 0, "right": 0}
    for a, y in zip(answers, labels):
        if isinstance(a, int):
            counts["error"] += 1
        elif a.get("degraded", False) is True:
            counts["degraded"] += 1
        else:
            counts["ok"] += 1
            counts["right"] += int(a["label"] == y)
    n = len(answers)
    return {
        "n": n,
        "error_rate": counts["error"] / n if n else math.nan,
        "degraded_rate": counts["degraded"] / n if n else math.nan,
        "accuracy": counts["right"] / counts["ok"] if counts["ok"] else math.nan,
    }


def _with(**fields):
    def wrong(answers, labels):
        out = service_report(answers, labels)
        for k, f in fields.items():
            out[k] = f(answers, labels, out)
        return out

    return wrong


def accuracy_over_all(answers, labels):
    out = service_report(answers, labels)
    right = sum(1 for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded") and a["label"] == y)
    out["accuracy"] = right / len(answers) if answers else math.nan
    return out


def degraded_scored_as_wrong(answers, labels):
    out = service_report(answers, labels)
    answered = [(a, y) for a, y in zip(answers, labels) if isinstance(a, dict)]
    out["accuracy"] = sum(a["label"] == y for a, y in answered) / len(answered) if answered else math.nan
    return out


def only_5xx(answers, labels):
    out = service_report(answers, labels)
    n = len(answers)
    out["error_rate"] = sum(1 for a in answers if isinstance(a, int) and a >= 500) / n if n else math.nan
    return out


def degraded_key_present(answers, labels):
    flagged = [dict(a, degraded=True) if isinstance(a, dict) and "degraded" in a else a for a in answers]
    return service_report(flagged, labels)


def perfect_when_nothing_answered(answers, labels):
    out = service_report(answers, labels)
    if math.isnan(out["accuracy"]):
        out["accuracy"] = 1.0
    return out


def crashes_when_nothing_answered(answers, labels):
    out = service_report(answers, labels)
    scored = [(a["label"], y) for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    out["accuracy"] = sum(p == y for p, y in scored) / len(scored)
    return out


def zip_truncates(answers, labels):
    k = min(len(answers), len(labels))
    return service_report(answers[:k], labels[:k])


def zero_rates_when_empty(answers, labels):
    out = service_report(answers, labels)
    if not answers:
        out.update(error_rate=0.0, degraded_rate=0.0, accuracy=0.0)
    return out


def rates_over_answered(answers, labels):
    out = service_report(answers, labels)
    answered = sum(1 for a in answers if isinstance(a, dict))
    out["error_rate"] = (len(answers) - answered) / answered if answered else math.nan
    return out


def counts_not_rates(answers, labels):
    out = service_report(answers, labels)
    out["error_rate"] = sum(1 for a in answers if not isinstance(a, dict))
    return out


def wrong_error_type(answers, labels):
    if len(answers) != len(labels):
        raise IndexError("lengths differ")
    return service_report(answers, labels)


def pops_errors(answers, labels):
    out = service_report(answers, labels)
    for i in reversed(range(len(answers))):
        if not isinstance(answers[i], dict):
            answers.pop(i)
    return out


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (service_report, service_report_alt):
        L.check_rates(fn)
        L.check_accuracy(fn)
        L.check_edges(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_rates, only_5xx, r"400 and 429 count, not only 5xx\): error_rate 0.3; got 0.1"),
        (
            L.check_rates,
            degraded_key_present,
            r"\"degraded\": False is an ordinary answer\): degraded_rate 0.2; got 0.3",
        ),
        (L.check_rates, rates_over_answered, r"error_rate 0.3; got 0.428"),
        (L.check_rates, counts_not_rates, r"error_rate 0.3; got 3"),
        (L.check_rates, pops_errors, "changed the answers or labels it was given"),
        (L.check_accuracy, accuracy_over_all, r"accuracy 0.8; got 0.4"),
        (L.check_accuracy, degraded_scored_as_wrong, r"accuracy 0.8; got 0.571"),
        (L.check_edges, perfect_when_nothing_answered, r"every request failed.*never 1.0 or 0.0; got 1.0"),
        (L.check_edges, crashes_when_nothing_answered, r"every request failed.*your code raised ZeroDivisionError"),
        (L.check_edges, zero_rates_when_empty, r"no requests: there is no rate of anything"),
        (L.check_edges, zip_truncates, r"2 answers and 1 labels: the lengths differ.*raise ValueError.*; it returned"),
        (L.check_edges, wrong_error_type, r"raise ValueError naming both lengths.*your code raised IndexError"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_a_missing_field_is_named():
    def no_n(answers, labels):
        out = service_report(answers, labels)
        del out["n"]
        return out

    with pytest.raises(LabCheckFailed, match=r"the report has no \['n'\]"):
        L.check_rates(no_n)


@pytest.mark.parametrize("chk", [L.check_rates, L.check_accuracy, L.check_edges, L.check_same_as_reference])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def _kinds(answers, by_label):
    """Sorts answers into errors, fallbacks and ordinary ones; `by_label` tells a fallback by its 'unknown' label."""
    errors = [a for a in answers if not isinstance(a, dict)]
    if by_label:
        fallback = [a for a in answers if isinstance(a, dict) and a["label"] == "unknown"]
    else:
        fallback = [a for a in answers if isinstance(a, dict) and a.get("degraded")]
    return errors, fallback


def fallback_by_its_label(answers, labels):
    """Counts an answer as degraded when its label is 'unknown' (the fallback of the chapter), not by its flag."""
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    errors, fallback = _kinds(answers, by_label=True)
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and a["label"] != "unknown"]
    return {
        "n": n,
        "error_rate": len(errors) / n if n else math.nan,
        "degraded_rate": len(fallback) / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
    }


def right_fallbacks_count(answers, labels):
    """Leaves degraded answers out of the total but counts the ones that happen to be right."""
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    out = service_report(answers, labels)
    ordinary = [(a, y) for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    lucky = sum(1 for a, y in zip(answers, labels) if isinstance(a, dict) and a.get("degraded") and a["label"] == y)
    if ordinary:
        out["accuracy"] = (sum(a["label"] == y for a, y in ordinary) + lucky) / len(ordinary)
    return out


def empty_first(answers, labels):
    """Answers 'no requests' before it compares the lengths: [] against one label is not an error to it."""
    if not answers:
        return {"n": 0, "error_rate": math.nan, "degraded_rate": math.nan, "accuracy": math.nan}
    return service_report(answers, labels)


def vague_length_error(answers, labels):
    if len(answers) != len(labels):
        raise ValueError("answers and labels do not match")
    return service_report(answers, labels)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_rates, fallback_by_its_label, r"majority label.*degraded_rate is 3/8 = 0.375.*whatever their label"),
        (
            L.check_accuracy,
            right_fallbacks_count,
            r"majority label.*accuracy over the model's 4 ordinary answers is 2/4",
        ),
        (L.check_edges, empty_first, r"0 answers and 1 labels: the lengths differ"),
        (L.check_edges, vague_length_error, r"should give both lengths, 2 and 1"),
    ],
)
def test_data_that_hid_a_mistake_now_shows_it(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check


def rounded_rates(answers, labels):
    """Rounding: rounds the three rates to 2 decimals, as the report prints them."""
    out = service_report(answers, labels)
    return {k: (round(v, 2) if k != "n" else v) for k, v in out.items()}


def percentages(answers, labels):
    """Units: the three shares as percentages (30.0 for 30 %)."""
    out = service_report(answers, labels)
    return {k: (v * 100 if k != "n" else v) for k, v in out.items()}


def status_above_400(answers, labels):
    """Boundaries: counts a status as an error when it is > 400, so a 400 Bad Request counts as nothing."""
    out = service_report(answers, labels)
    n = len(answers)
    out["error_rate"] = sum(1 for a in answers if not isinstance(a, dict) and a > 400) / n if n else math.nan
    return out


def guards_the_numerator(answers, labels):
    """Boundaries: guards the division on the right answers, not the scored ones: none right gives NaN, not 0."""
    out = service_report(answers, labels)
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    out["accuracy"] = sum(scored) / len(scored) if sum(scored) else math.nan
    return out


def fills_in_degraded(answers, labels):
    """State: a.setdefault("degraded", False) writes the default into the caller's answer dicts."""
    for a in answers:
        if isinstance(a, dict):
            a.setdefault("degraded", False)
    return service_report(answers, labels)


def counts_across_calls(answers, labels, _counts={"error": 0, "degraded": 0}):
    """State: counters in a mutable default argument, never reset: each call adds to the last one's."""
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    out = service_report(answers, labels)
    _counts["error"] += sum(1 for a in answers if not isinstance(a, dict))
    _counts["degraded"] += sum(1 for a in answers if isinstance(a, dict) and a.get("degraded"))
    n = len(answers)
    out["error_rate"] = _counts["error"] / n if n else math.nan
    out["degraded_rate"] = _counts["degraded"] / n if n else math.nan
    return out


def filters_then_zips(answers, labels):
    """Order: keeps the ordinary answers first, then zips them with the labels from the start (misaligned)."""
    out = service_report(answers, labels)
    ordinary = [a for a in answers if isinstance(a, dict) and not a.get("degraded")]
    scored = [a["label"] == y for a, y in zip(ordinary, labels)]
    out["accuracy"] = sum(scored) / len(scored) if scored else math.nan
    return out


def label_by_index(answers, labels):
    """Order: finds each answer's label with answers.index(a), which gives the FIRST equal answer's position."""
    out = service_report(answers, labels)
    ordinary = [a for a in answers if isinstance(a, dict) and not a.get("degraded")]
    scored = [a["label"] == labels[answers.index(a)] for a in ordinary]
    out["accuracy"] = sum(scored) / len(scored) if scored else math.nan
    return out


NEW_WRONG = [
    rounded_rates,
    percentages,
    status_above_400,
    guards_the_numerator,
    fills_in_degraded,
    counts_across_calls,
    filters_then_zips,
    label_by_index,
]


def test_right_answers_agree_with_the_reference():
    for fn in (service_report, service_report_alt):
        L.check_same_as_reference(fn)


def test_the_reference_passes_the_older_checks():
    for chk in (L.check_rates, L.check_accuracy, L.check_edges):
        chk(L._reference_service_report)


@pytest.mark.parametrize(
    "wrong",
    [
        accuracy_over_all,
        degraded_scored_as_wrong,
        only_5xx,
        degraded_key_present,
        perfect_when_nothing_answered,
        crashes_when_nothing_answered,
        zip_truncates,
        zero_rates_when_empty,
        rates_over_answered,
        counts_not_rates,
        wrong_error_type,
        pops_errors,
        fallback_by_its_label,
        right_fallbacks_count,
        empty_first,
        *NEW_WRONG,
    ],
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(
        LabCheckFailed, match="where the reference.s|should raise|changed its input|two calls|your code raised"
    ):
        L.check_same_as_reference(wrong)


def test_the_differential_check_leaves_the_length_message_to_check_edges():
    # a ValueError whose message omits the lengths has the right type: only check_edges reads its words
    L.check_same_as_reference(vague_length_error)
    with pytest.raises(LabCheckFailed, match="should give both lengths"):
        L.check_edges(vague_length_error)


def test_the_differential_check_names_a_changed_answer():
    with pytest.raises(LabCheckFailed, match=r"changed its input `answers`"):
        L.check_same_as_reference(fills_in_degraded)


def test_the_differential_check_names_the_field_and_both_reports():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(status_above_400)
    assert "yours is 0.0 where the reference's is 0.5 at ['error_rate']" in str(e.value)
