"""Independent wrong answers for ex_service_report, written from labs/4_application/ex_service_report.ipynb's contract alone."""

import math


def service_report(answers, labels):
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


def degraded_scored_as_answers(answers, labels):
    """Scores every answered request, fallbacks included (their label is simply compared)."""
    # differs on [{"label": "pos"}, {"label": "unknown", "degraded": True}], ["pos", "neg"]: accuracy 0.5 instead of 1.0
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    errors = sum(1 for a in answers if not isinstance(a, dict))
    degraded = sum(1 for a in answers if isinstance(a, dict) and a.get("degraded"))
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict)]
    return {
        "n": n,
        "error_rate": errors / n if n else math.nan,
        "degraded_rate": degraded / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
    }


def no_scored_is_zero(answers, labels):
    """With nothing to score, the accuracy is 0.0 (nothing was right)."""
    # differs on [503, 503], ["pos", "neg"]: accuracy 0.0 instead of nan
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    errors = sum(1 for a in answers if not isinstance(a, dict))
    degraded = sum(1 for a in answers if isinstance(a, dict) and a.get("degraded"))
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    return {
        "n": n,
        "error_rate": errors / n if n else math.nan,
        "degraded_rate": degraded / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else 0.0,
    }


def degraded_key_required(answers, labels):
    """Reads the degraded flag with a["degraded"]."""
    # differs on [{"label": "pos"}], ["pos"]: KeyError instead of accuracy 1.0
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    errors = sum(1 for a in answers if not isinstance(a, dict))
    degraded = sum(1 for a in answers if isinstance(a, dict) and a["degraded"])
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and not a["degraded"]]
    return {
        "n": n,
        "error_rate": errors / n if n else math.nan,
        "degraded_rate": degraded / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
    }


def only_server_errors(answers, labels):
    """Counts as errors the 5xx statuses: the service's own failures, not the client's bad requests."""
    # differs on [400, {"label": "pos"}], ["neg", "pos"]: error_rate 0.0 instead of 0.5
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    errors = sum(1 for a in answers if not isinstance(a, dict) and a >= 500)
    degraded = sum(1 for a in answers if isinstance(a, dict) and a.get("degraded"))
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and not a.get("degraded")]
    return {
        "n": n,
        "error_rate": errors / n if n else math.nan,
        "degraded_rate": degraded / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
    }


def fills_in_degraded(answers, labels):
    """Normalises each answer with setdefault("degraded", False) before counting."""
    # differs on A = [{"label": "pos"}], ["pos"]: same report, but A[0] is now {"label": "pos", "degraded": False}
    if len(answers) != len(labels):
        raise ValueError(f"{len(answers)} answers but {len(labels)} labels")
    n = len(answers)
    for a in answers:
        if isinstance(a, dict):
            a.setdefault("degraded", False)
    errors = sum(1 for a in answers if not isinstance(a, dict))
    degraded = sum(1 for a in answers if isinstance(a, dict) and a["degraded"])
    scored = [a["label"] == y for a, y in zip(answers, labels) if isinstance(a, dict) and not a["degraded"]]
    return {
        "n": n,
        "error_rate": errors / n if n else math.nan,
        "degraded_rate": degraded / n if n else math.nan,
        "accuracy": sum(scored) / len(scored) if scored else math.nan,
    }


def asserts_lengths(answers, labels):
    """Guards the lengths with an assert."""
    # differs on [{"label": "pos"}], ["pos", "neg"]: AssertionError instead of ValueError
    assert len(answers) == len(labels), f"{len(answers)} answers but {len(labels)} labels"
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


RIGHT = {"service_report": service_report}
WRONG = [
    ("service_report", degraded_scored_as_answers, "misread prose"),
    ("service_report", no_scored_is_zero, "boundaries: empty input"),
    ("service_report", degraded_key_required, "parsing"),
    ("service_report", only_server_errors, "misread prose"),
    ("service_report", fills_in_degraded, "state: mutated argument"),
    ("service_report", asserts_lengths, "error handling"),
]
