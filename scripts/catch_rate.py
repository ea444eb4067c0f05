"""How many wrong answers do the lab checks catch? Runs every check of a task on each wrong answer, as a notebook is
judged, and counts the answers that some check fails.

    python scripts/catch_rate.py [tests/wrong_answers/<task>.py ...]

Each file in tests/wrong_answers/ is one task's set of wrong answers, written from the lab notebook's contract
without reading the checks: RIGHT maps each function the checks take (by parameter name) to a right answer, and
WRONG lists (the function it replaces, the wrong answer, the class of mistake). A right answer that some check
fails is a defect of the set or of the checks, and is reported first.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import io
import pathlib
import signal
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIMIT_S = 120  # one wrong answer against every check of its task


class _Timeout(Exception):
    pass


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(f"wrong_answers_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _checks(task: str):
    mod = importlib.import_module(f"ailab.labs.{task}")
    return [fn for fn in vars(mod).values() if getattr(fn, "check_name", None) and fn.__module__ == mod.__name__]


def judge(task: str, answers: dict, wrong_param: str | None = None) -> tuple[list[str], list[str]]:
    """Run every check of `task` whose parameters `answers` can fill; return (failed check names, skipped ones).
    With `wrong_param`, only the checks that take it, up to the first that fails: every other check gets only
    right answers, which the run over RIGHT alone has already judged (some checks export models and take a minute)."""
    from ailab.labs import LabCheckFailed

    failed, skipped = [], []
    for chk in _checks(task):
        params = [p for p in inspect.signature(chk).parameters.values() if p.default is p.empty]
        if any(p.name not in answers for p in params):
            skipped.append(chk.check_name)
            continue
        if wrong_param is not None and (failed or wrong_param not in {p.name for p in params}):
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                chk(*[answers[p.name] for p in params])
            except LabCheckFailed as e:
                failed.append(f"{chk.check_name}: {str(e)[:200]}")
            except _Timeout:
                raise
            except Exception as e:  # noqa: BLE001 - a check that crashes has still not passed the answer
                failed.append(f"{chk.check_name}: CRASHED {type(e).__name__}: {e}")
    return failed, skipped


def _on_alarm(signum, frame):
    raise _Timeout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=pathlib.Path)
    ap.add_argument("-v", "--verbose", action="store_true", help="print the check that caught each answer")
    args = ap.parse_args(argv)
    files = args.files or sorted((ROOT / "tests" / "wrong_answers").glob("*.py"))
    files = [f for f in files if not f.name.startswith("_")]
    signal.signal(signal.SIGALRM, _on_alarm)
    total = caught = 0
    missed, bad_right = [], []
    for path in files:
        mod = _load(path)
        task = path.stem
        t0 = time.perf_counter()
        failed, skipped = judge(task, dict(mod.RIGHT))
        if failed:
            bad_right.append((task, failed))
        n_task = c_task = 0
        for name, wrong, klass in mod.WRONG:
            answers = {**mod.RIGHT, name: wrong}
            signal.alarm(LIMIT_S)
            try:
                failed, _ = judge(task, answers, wrong_param=name)
            except _Timeout:
                failed = [f"(no verdict within {LIMIT_S} s)"]
            finally:
                signal.alarm(0)
            n_task += 1
            hit = bool(failed) and not failed[0].startswith("(no verdict")
            c_task += hit
            if not hit:
                missed.append((task, getattr(wrong, "__name__", str(wrong)), klass, (wrong.__doc__ or "").strip()))
            elif args.verbose:
                print(f"  {task}.{wrong.__name__} [{klass}] caught by {failed[0][:150]}")
        total, caught = total + n_task, caught + c_task
        print(
            f"{task:24s} {c_task:3d}/{n_task:<3d} caught  ({time.perf_counter() - t0:5.1f} s"
            + (f"; checks skipped: {', '.join(skipped)}" if skipped else "")
            + ")",
            flush=True,
        )
    for task, failed in bad_right:
        print(f"RIGHT ANSWER FAILED in {task}: {failed}")
    for task, name, klass, doc in missed:
        print(f"missed: {task}.{name} [{klass}] {doc}")
    print(f"\ncaught {caught} of {total} wrong answers ({100 * caught / max(total, 1):.0f} %)")
    return 0 if not bad_right else 1


if __name__ == "__main__":
    sys.exit(main())
