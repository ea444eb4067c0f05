"""No check crashes on an answer: whatever the learner's function returns or raises, every check fails with words
for the learner, never with an exception from inside the check's own code (issue 42, item 4).

Each check is called with answers of the wrong type, shape and behaviour. A check that lets an exception out, or
that reports one raised in its own code ("the check could not judge your answer"), has a defect: it should have
said what it expected instead. None of these answers may pass every check of its task.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import math
import pkgutil

import pytest

import ailab.labs as labs
from ailab.labs import LabCheckFailed
from ailab.labs.core import _is_checker_file, _owner_frame

# Checks that need more than the learner's functions (a model, a path, data), or a live server: the kit below
# cannot call them with one answer; each is exercised by its own task's tests.
NEEDS_MORE = {"check_service_meets_slo", "check_reader_calibrates", "check_activation_measured", "check_param_bytes"}


def _returns(value, name):
    def answer(*args, **kwargs):
        return value

    answer.__name__ = name
    return answer


def _raises(*args, **kwargs):
    raise RuntimeError("the learner's own error")


class _Opaque:
    pass


def _mutates(*args, **kwargs):
    """Writes into whatever it is given, then answers nothing useful."""
    for a in args:
        with contextlib.suppress(Exception):
            if isinstance(a, dict):
                a.clear()
            elif isinstance(a, list):
                a.append(None)
    return None


WRONG = [
    _returns(None, "returns None"),
    _returns("wrong", "returns a string"),
    _returns(math.nan, "returns NaN"),
    _returns(-1, "returns -1"),
    _returns(_Opaque(), "returns an opaque object"),
    _returns([], "returns []"),
    _returns({}, "returns {}"),
    _returns((1, 2), "returns (1, 2)"),
    _raises,
    _mutates,
]


def _checks():
    for m in pkgutil.iter_modules(labs.__path__):
        if not m.name.startswith(("ex_", "lab")):
            continue
        mod = importlib.import_module(f"ailab.labs.{m.name}")
        for name, fn in vars(mod).items():
            if getattr(fn, "check_name", None) and fn.__module__ == mod.__name__ and name not in NEEDS_MORE:
                yield pytest.param(fn, id=f"{m.name}.{name}")


@pytest.mark.parametrize("check_fn", list(_checks()))
def test_no_check_crashes_on_a_wrong_answer(check_fn):
    learner_params = [p for p in inspect.signature(check_fn).parameters.values() if p.default is p.empty]
    for wrong in WRONG:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                check_fn(*[wrong] * len(learner_params))
            except LabCheckFailed as e:
                assert "could not judge your answer" not in str(e), f"{wrong.__name__}: a checker defect: {e}"
                assert str(e).strip(), f"{wrong.__name__}: a failure with no words"
            except Exception as e:
                pytest.fail(f"{wrong.__name__}: the check let {type(e).__name__}: {e} out")
            # a wrong answer may pass one check (a stub that raises can satisfy "refuses bad input"); the
            # task's other checks fail it, which test_labs' stub tests already require


def test_an_exception_in_the_checks_own_code_is_reported_as_a_defect(monkeypatch):
    from ailab.labs import core

    monkeypatch.setattr(core, "_is_checker_file", lambda path: path == __file__)  # this file plays the check
    namespace: dict = {}
    exec(compile("def learner():\n    return {}\n", "<a learner's cell>", "exec"), namespace)

    @core.check("kit", "a check with a bug")
    def buggy(fn):
        return fn()["missing key"]  # the check assumes a dict without looking

    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(LabCheckFailed, match="could not judge"):
        buggy(namespace["learner"])


def test_an_exception_in_the_learners_code_is_the_learners():
    from ailab.labs.core import check

    @check("kit", "a check")
    def fine(fn):
        return fn()

    def learner():
        return {}["x"]

    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(LabCheckFailed, match="your code raised KeyError"):
        fine(learner)
    try:
        learner()
    except KeyError as e:
        frame = _owner_frame(e)
        assert frame is not None and not _is_checker_file(frame.filename)
