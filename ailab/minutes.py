"""How long a chapter takes a learner: book.yml's minutes, from the chapter's text and a timed run.

A learner reads the chapter's notebook (its prose, its code and the package code it opens), runs it, then does
the graded task: reads it, writes each answer, runs the checks until they pass. Three parts, each from
something this module counts or a run measured:

- read: the words of prose at a study pace, and the lines of code shown (a cell's own, and what `show_code`
  opens), in the notebook and in the task;
- run: the notebook once and the task's solution TASK_RUNS times, in seconds measured by `make test`
  (build/test-results*.xml: two notebooks at a time, and a third lane beside them, on the machine that ran it; a
  notebook that run leaves out is run and timed alone);
- task: per function to write, per line of the reference answer, and per graded check to satisfy.

The rates are the assumptions, stated once below. `python -m ailab.minutes` prints the table; with --write it
sets each chapter's `minutes` and `timed` in book.yml (tests/test_minutes.py keeps them equal to the text).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from ailab import book as bk
from ailab.labs.build import BEGIN, END

ROOT = Path(__file__).resolve().parent.parent

PROSE_WORDS_PER_MIN = 130  # study pace: about half of everyday reading's 240, the prose being dense with figures
CODE_LINES_PER_MIN = 15  # 4 s a line: reading a cell before running it, or the package code a chapter opens
TASK_MIN_PER_FUNCTION = 5  # read a function's contract and its HINT, and plan it
TASK_MIN_PER_LINE = 1.5  # each line of the reference answer (no blanks, no comments): write it and get it right
TASK_MIN_PER_CHECK = 2  # each graded check: read what it reports, fix, run again
TASK_RUNS = 3  # the task notebook runs: a first try, a fix, the pass

_WORD = re.compile(r"[A-Za-z0-9_']+")
_CHECK_CALL = re.compile(r"\bcheck_\w*\(")


@dataclass(frozen=True)
class Counts:
    prose_words: int
    code_lines: int
    functions: int  # answers to write: one per BEGIN SOLUTION block
    answer_lines: int
    checks: int


@dataclass(frozen=True)
class Timed:
    read: int
    run: int
    task: int

    @property
    def minutes(self) -> int:
        """The sum, rounded up to 5: a figure a learner plans an evening with, not a false precision."""
        return 5 * math.ceil((self.read + self.run + self.task) / 5)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _code_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]


def _shown_lines(source: str, where: str) -> int:
    """Lines of package code a `show_code(...)` cell renders: the cell run, its last expression read."""
    tree = ast.parse(source)
    *body, last = tree.body
    if not isinstance(last, ast.Expr):
        raise ValueError(f"{where}: a cell that shows code must end with the show_code(...) call")
    scope: dict = {}  # the course's own cell, read from its notebook: run as the notebook runs it
    exec(compile(ast.Module(body, type_ignores=[]), where, "exec"), scope)
    shown = eval(compile(ast.Expression(last.value), where, "eval"), scope)
    return len(_code_lines(shown.source))


def count(*paths: Path) -> Counts:
    """What a learner reads and writes in these notebooks (a chapter's notebook and its task's solution)."""
    words = code = functions = answer = checks = 0
    for path in paths:
        for i, cell in enumerate(_cells(path)):
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                words += len(_WORD.findall(source))
                continue
            if cell["cell_type"] != "code":
                continue
            if "show_code(" in source:
                code += _shown_lines(source, f"{path} cell {i}")
            inside = False
            for line in source.splitlines():
                if BEGIN in line:
                    inside, functions = True, functions + 1
                elif END in line:
                    inside = False
                elif line.strip() and not line.strip().startswith("#"):
                    answer += inside
                    code += not inside
            checks += len(_CHECK_CALL.findall(source))
    return Counts(words, code, functions, answer, checks)


def read_minutes(c: Counts) -> int:
    return round(c.prose_words / PROSE_WORDS_PER_MIN + c.code_lines / CODE_LINES_PER_MIN)


def task_minutes(c: Counts) -> int:
    return round(
        c.functions * TASK_MIN_PER_FUNCTION + c.answer_lines * TASK_MIN_PER_LINE + c.checks * TASK_MIN_PER_CHECK
    )


def run_seconds(*junit: Path) -> dict[str, float]:
    """Seconds each notebook's cells took in pytest --nbval runs' JUnit reports, by the notebook's path."""
    seconds: dict[str, float] = {}
    cases = [case for report in junit for case in ET.parse(report).iter("testcase")]
    for case in cases:
        name = case.get("classname") or ""
        if name.endswith(".ipynb"):
            path = name.removesuffix(".ipynb").replace(".", "/") + ".ipynb"
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0)
    return seconds


def time_notebook(path: Path) -> float:
    """Run one notebook top to bottom in a fresh kernel, from its own folder, as a learner would: its seconds."""
    import time

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=900, resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def task_path(chapter: dict) -> str:
    return chapter.get("solution") or chapter["exercise_solution"]


def estimate(chapter: dict, run_min: int, root: Path = ROOT) -> tuple[Counts, Timed]:
    counts = count(root / chapter["notebook"], root / task_path(chapter))
    return counts, Timed(read_minutes(counts), run_min, task_minutes(counts))


def run_minutes(chapter: dict, seconds: dict[str, float]) -> int:
    for path in (chapter["notebook"], task_path(chapter)):
        if path not in seconds:
            raise ValueError(f"{path} is not in the timed run; run `make test` first (it writes the JUnit report)")
    return math.ceil((seconds[chapter["notebook"]] + TASK_RUNS * seconds[task_path(chapter)]) / 60)


def write(book_path: Path, timed: dict[str, Timed]) -> None:
    """Set each chapter's `minutes` and `timed` lines in place, keeping book.yml's comments and order."""
    out, chapter = [], None
    for line in book_path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s+- id: (\S+)$", line)
        if m:
            chapter = m.group(1)
        if re.match(r"\s+timed: ", line):
            continue  # written again below, after minutes
        m = re.match(r"(\s+)minutes: \d+$", line)
        if m and chapter in timed:
            t = timed[chapter]
            out.append(f"{m.group(1)}minutes: {t.minutes}")
            out.append(f"{m.group(1)}timed: {{read: {t.read}, run: {t.run}, task: {t.task}}}")
            continue
        out.append(line)
    book_path.write_text("\n".join(out) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ailab.minutes", description=__doc__.split("\n")[0])
    p.add_argument(
        "--junit", type=Path, action="append", help="a timed run's JUnit report (make test writes two into build/)"
    )
    p.add_argument(
        "--write", action="store_true", help="set minutes and timed in book.yml (without --junit: keep the run minutes)"
    )
    args = p.parse_args(argv)
    book_path = ROOT / "book.yml"
    book = bk.load_book(book_path)
    seconds = run_seconds(*args.junit) if args.junit else None
    if seconds is not None:
        # make test leaves out the notebooks the GPU suite's rehearsal runs (REHEARSED in the Makefile): time them here
        for path in sorted({p for _, ch in bk.chapters(book) for p in (ch["notebook"], task_path(ch))} - set(seconds)):
            print(f"{path} is not in the JUnit reports: running it here to time it")
            seconds[path] = time_notebook(ROOT / path)
    timed: dict[str, Timed] = {}
    print(f"{'chapter':26} {'words':>6} {'code':>5} {'fns':>4} {'lines':>6} {'checks':>6}   read  run  task  minutes")
    for _, ch in bk.chapters(book):
        if seconds is None and not isinstance(ch.get("timed"), dict):
            p.error(f"{ch['id']} has no run minutes in book.yml yet: give --junit (the reports of a make test run)")
        run = run_minutes(ch, seconds) if seconds is not None else ch["timed"]["run"]
        c, t = estimate(ch, run)
        timed[ch["id"]] = t
        print(
            f"{ch['id']:26} {c.prose_words:6} {c.code_lines:5} {c.functions:4} {c.answer_lines:6} {c.checks:6}"
            f"   {t.read:4} {t.run:4} {t.task:5} {t.minutes:8}"
        )
    total = sum(t.minutes for t in timed.values())
    print(f"total: {total} minutes ({total / 60:.1f} h)")
    if args.write:
        write(book_path, timed)
        print(f"wrote minutes and timed for {len(timed)} chapters into {book_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
