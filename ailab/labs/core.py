"""What a lab check is: a named function that either passes or tells the learner what is wrong.

A check cell in a lab notebook calls one of these. It prints a line for the learner and, when
`ailab labs check` runs the notebook, also appends the outcome to the JSON-lines report named
by AILAB_LAB_REPORT, so the command can say which checks passed without parsing output.
"""
from __future__ import annotations

import functools
import json
import os
import traceback
from typing import Callable

REPORT_ENV = "AILAB_LAB_REPORT"


class LabCheckFailed(AssertionError):
    """A lab check did not pass. The message says what was expected, in the learner's terms."""


def _record(lab: str, name: str, passed: bool, message: str) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"lab": lab, "check": name, "passed": passed, "message": message}) + "\n")


def check(lab: str, name: str) -> Callable:
    """Decorate a check function. It passes by returning; it fails by raising LabCheckFailed.

    A NotImplementedError from the learner's stub becomes a failure that repeats the stub's hint;
    any other exception from the learner's code becomes a failure that names it, so the learner
    sees "your function raised ZeroDivisionError" rather than a traceback from inside the checker.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                result = fn(*args, **kwargs)
            except LabCheckFailed as e:
                message = str(e)
            except NotImplementedError as e:
                message = str(e) if "not implemented yet" in str(e) else f"not implemented yet. {e}".strip()
            except Exception as e:  # noqa: BLE001 - the learner's code may raise anything
                tb = traceback.extract_tb(e.__traceback__)
                where = f" (at line {tb[-1].lineno} of {tb[-1].name})" if tb else ""
                message = f"your code raised {type(e).__name__}: {e}{where}"
            else:
                _record(lab, name, True, "")
                print(f"PASS  {name}")
                return result
            _record(lab, name, False, message)
            print(f"FAIL  {name}: {message}")
            raise LabCheckFailed(f"{name}: {message}")

        wrapper.lab, wrapper.check_name = lab, name
        return wrapper

    return decorate


def expect(condition: bool, message: str) -> None:
    """Fail the current check with `message` unless `condition` holds."""
    if not condition:
        raise LabCheckFailed(message)
