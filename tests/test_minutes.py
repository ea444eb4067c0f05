"""book.yml's minutes are ailab.minutes' estimate of today's text: a chapter that grows, or a task that gains a
check, fails here until `make minutes` is run again."""

import json
from pathlib import Path

import pytest

from ailab import book as bk
from ailab import minutes as mn

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = [ch for _, ch in bk.chapters(bk.load_book(ROOT / "book.yml"))]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[ch["id"] for ch in CHAPTERS])
def test_book_minutes_equal_the_estimate_of_the_text(chapter):
    timed = chapter.get("timed")
    assert isinstance(timed, dict) and set(timed) == {"read", "run", "task"}, "run `make minutes`: no timed entry"
    assert timed["run"] > 0, "the run minutes come from a timed run (make test, then make minutes)"
    _, estimate = mn.estimate(chapter, timed["run"])
    assert (timed["read"], timed["task"]) == (estimate.read, estimate.task), (
        f"book.yml says reading {timed['read']} and the task {timed['task']} minutes; the text gives "
        f"{estimate.read} and {estimate.task}: run `make minutes`"
    )
    assert chapter["minutes"] == estimate.minutes


def test_the_readme_states_the_course_total_and_range_as_book_yml_has_them():
    minutes = [ch["minutes"] for ch in CHAPTERS]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    want = f"**The course takes about {round(sum(minutes) / 60)} hours: {sum(minutes)} minutes** over {len(minutes)}"
    assert want in readme, f"README.md should say: {want} ... (run `make minutes`, then update the README)"
    assert f"from {min(minutes)} to {max(minutes)} minutes each" in readme


def _notebook(path: Path, cells: list[tuple[str, str]]) -> Path:
    path.write_text(json.dumps({"cells": [{"cell_type": k, "source": s, "metadata": {}} for k, s in cells]}))
    return path


def test_count_reads_prose_code_answers_and_checks(tmp_path):
    nb = _notebook(
        tmp_path / "t.ipynb",
        [
            ("markdown", "Write `double`: it's twice x."),  # 5 words
            (
                "code",
                "def double(x):\n    ### BEGIN SOLUTION\n    # HINT: what is x + x?\n    y = x + x\n\n"
                "    return y\n    ### END SOLUTION\n",
            ),
            ("code", "# the checks\nlab.check_double(double)\nlab.check_double_same_as_reference(double)\n"),
            ("raw", "not read"),
        ],
    )
    assert mn.count(nb) == mn.Counts(prose_words=5, code_lines=3, functions=1, answer_lines=2, checks=2)


def test_a_shown_function_counts_as_code_read(tmp_path):
    nb = _notebook(tmp_path / "t.ipynb", [("code", "from ailab.show import show_code\nshow_code(show_code)\n")])
    from ailab.show import show_code

    shown = len(mn._code_lines(show_code(show_code).source))
    assert mn.count(nb).code_lines == 2 + shown and shown > 10


def test_minutes_round_up_to_five():
    assert mn.Timed(read=10, run=1, task=10).minutes == 25
    assert mn.Timed(read=10, run=0, task=10).minutes == 20


def test_run_minutes_come_from_the_junit_report(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="notebooks.x.01_a.ipynb" name="Cell 0" time="50"/>'
        '<testcase classname="notebooks.x.01_a.ipynb" name="Cell 1" time="20.5"/>'
        '<testcase classname="solutions.x.lab_a.ipynb" name="Cell 0" time="30"/>'
        '<testcase classname="tests.test_x" name="test_y" time="99"/></testsuite></testsuites>'
    )
    seconds = mn.run_seconds(report)
    assert seconds == {"notebooks/x/01_a.ipynb": 70.5, "solutions/x/lab_a.ipynb": 30.0}
    chapter = {"notebook": "notebooks/x/01_a.ipynb", "solution": "solutions/x/lab_a.ipynb"}
    assert mn.run_minutes(chapter, seconds) == 3  # 70.5 s + 3 x 30 s = 160.5 s
    with pytest.raises(ValueError, match="not in the timed run"):
        mn.run_minutes({"notebook": "notebooks/x/02_b.ipynb", "solution": "solutions/x/lab_a.ipynb"}, seconds)


def test_write_keeps_comments_and_sets_both_lines(tmp_path):
    book = tmp_path / "book.yml"
    book.write_text(
        "# a comment\nparts:\n  - id: p\n    chapters:\n      - id: a\n        minutes: 30\n"
        "        timed: {read: 1, run: 1, task: 1}\n        gpu: false\n      - id: b\n        minutes: 10\n"
    )
    mn.write(book, {"a": mn.Timed(20, 2, 30), "b": mn.Timed(5, 1, 5)})
    assert book.read_text() == (
        "# a comment\nparts:\n  - id: p\n    chapters:\n      - id: a\n        minutes: 55\n"
        "        timed: {read: 20, run: 2, task: 30}\n        gpu: false\n      - id: b\n        minutes: 15\n"
        "        timed: {read: 5, run: 1, task: 5}\n"
    )


def test_without_a_timed_run_the_run_minutes_must_be_in_the_book(monkeypatch, tmp_path, capsys):
    book = tmp_path / "book.yml"
    book.write_text("parts:\n  - id: p\n    chapters:\n      - id: a\n        minutes: 30\n")
    monkeypatch.setattr(mn, "ROOT", tmp_path)
    monkeypatch.setattr(mn.bk, "load_book", lambda path: {"parts": [{"chapters": [{"id": "a", "minutes": 30}]}]})
    with pytest.raises(SystemExit):
        mn.main(["--write"])
    assert "a has no run minutes in book.yml yet: give --junit" in capsys.readouterr().err
