"""What a lab check is: a named function that either passes or tells the learner what is wrong.

A check cell in a lab notebook calls one of these. It prints a line for the learner and, when
`ailab labs check` runs the notebook, also appends the outcome to the JSON-lines report named
by AILAB_LAB_REPORT, so the command can say which checks passed without parsing output.

The kit every check module shares: `check` and `expect`; `answer` and `refused`, which call the learner's code
where it must answer or must refuse, naming the case that broke it; `within_time`, which runs the learner's code in
a thread with a time limit (so a version that waits forever fails with words instead of hanging the
notebook); `shared`, one expensive object per process (a model, a server) built on first use, with
`tiny_decoder`, the generation checks' model; and `torch_threads`, to run such a tiny model on one thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import threading
import traceback
from typing import Any, Callable

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
                frame = _owner_frame(e)
                if frame is not None and _is_checker_file(frame.filename):
                    message = (
                        f"the check could not judge your answer: it raised {type(e).__name__}: {e} in its own code "
                        f"(line {frame.lineno} of {frame.name}). That is a defect in the check, not in your code; "
                        "please report it with your answer"
                    )
                else:
                    where = f" (at line {frame.lineno} of {frame.name})" if frame else ""
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


_LABS_DIR = os.path.dirname(os.path.abspath(__file__))
_AILAB_DIR = os.path.dirname(_LABS_DIR)
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__))


def _is_checker_file(path: str) -> bool:
    return os.path.abspath(path).startswith(_LABS_DIR + os.sep)


def _is_library_file(path: str) -> bool:
    """numpy, torch, the standard library, ailab outside the checks: code that neither the learner nor the check
    wrote for this exercise, so an exception raised there belongs to whoever called it."""
    path = os.path.abspath(path)
    return (
        "site-packages" in path
        or path.startswith(_STDLIB_DIR + os.sep)
        or (path.startswith(_AILAB_DIR + os.sep) and not _is_checker_file(path))
        or path.startswith("<frozen")
    )


def _owner_frame(e: BaseException):
    """The innermost frame of the learner's code or of the check's own: where the exception was made, library
    frames skipped. In the check's own code it is a checker defect, never the learner's fault."""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if not _is_library_file(frame.filename):
            return frame
    return None


def expect(condition: bool, message: str) -> None:
    """Fail the current check with `message` unless `condition` holds."""
    if not condition:
        raise LabCheckFailed(message)


def answer(fn: Callable, *args, what: str, **kwargs) -> Any:
    """Call the learner's `fn`; any exception but the stub's NotImplementedError fails the check with `what`
    (the case being tried) in front, so the learner sees which input broke it."""
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, LabCheckFailed):
        raise
    except Exception as e:  # the learner's code may raise anything
        raise LabCheckFailed(f"{what}: your code raised {type(e).__name__}: {e}") from e


def refused(fn: Callable, *args, error: type | tuple = ValueError, what: str, should: str, **kwargs) -> BaseException:
    """Call the learner's `fn` where it must refuse: it must raise `error`, which is returned for the caller to
    look at its message. Another exception, or an answer, fails the check: `what` is the case, `should` what the
    learner should raise instead ("raise ValueError naming both lengths")."""
    try:
        out = fn(*args, **kwargs)
    except (NotImplementedError, LabCheckFailed):  # the stub, or a check inside: never a refusal
        raise
    except error as e:
        return e
    except Exception as e:  # the wrong type is the mistake this names
        raise LabCheckFailed(f"{what}: {should}; your code raised {type(e).__name__}: {e}") from e
    raise LabCheckFailed(f"{what}: {should}; it returned {out!r}")


def within_time(
    fn: Callable[[], Any],
    limit_s: float,
    too_slow: str,
    *,
    unstick: Callable[[], None] | None = None,
    name: str = "ailab-lab-learner",
) -> Any:
    """Run `fn()` (the learner's code) in a daemon thread and return what it returns, or raise what it raised.

    When it has not returned after `limit_s`, call `unstick()` (to let a waiting thread end, if it can), and
    fail the check with `too_slow`, which should say what makes the code wait and what to do instead.
    """
    box: dict = {}

    def target():
        try:
            box["out"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True, name=name)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        if unstick is not None:
            unstick()
            thread.join(0.2)
        stop_thread(thread)
        raise LabCheckFailed(too_slow)
    if "error" in box:
        raise box["error"]
    return box.get("out")


class Abandoned(BaseException):
    """Raised inside a learner's thread that overran its time limit: a loop that spins for ever would otherwise
    keep a core busy for the rest of the session (and, in the test suite, slow every test after it)."""


def stop_thread(thread: threading.Thread, wait_s: float = 1.0) -> bool:
    """Stop an overrunning thread by raising Abandoned in it at its next Python instruction; returns whether it
    ended. A thread blocked inside C (a sleep, a socket read) ends only when that call returns; it spends no CPU."""
    if thread.is_alive() and thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Abandoned))
        thread.join(wait_s)
    return not thread.is_alive()


_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.RLock()


def shared(key: str, build: Callable[[], Any], alive: Callable[[Any], bool] = lambda obj: True) -> Any:
    """One object per process for every check that needs it (a model, a server), built by `build()` on
    first use; built again when `alive(obj)` says the one kept is no longer usable (a server that died)."""
    with _SHARED_LOCK:
        obj = _SHARED.get(key)
        if key not in _SHARED or not alive(obj):
            obj = _SHARED[key] = build()
        return obj


@contextlib.contextmanager
def torch_threads(n: int = 1):
    """Run a tiny model's work with `n` torch threads, then give back the count the notebook had: a model of a
    million parameters gains nothing from a second thread, and beside a busy neighbour two threads made the
    scheduler checks ten times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tiny_decoder(seed: int):
    """A tiny_gpt('1m') decoder with random weights (the loop is checked, not the text), one per seed and process."""

    def build():
        from ailab.generation import Decoder
        from ailab.models import tiny_gpt

        return Decoder(tiny_gpt("1m", seed=seed))

    return shared(f"tiny_decoder-{seed}", build)
