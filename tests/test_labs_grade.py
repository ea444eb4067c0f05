"""`ailab labs grade` and `ailab labs reset`, on submissions made at test time from solutions/.

One grading run (module fixture, two notebooks at once, a short time limit) covers a right, a wrong,
a tampered, a hanging and a crashing submission plus two files that are not labs. The lab is the
quickest one to run (admission control, a few seconds); every fixture is built from its current
solution, so the tests follow edits to its cells.
"""

import contextlib
import csv
import io
import re
import time
from pathlib import Path

import nbformat
import pytest

from ailab.cli import main
from ailab.labs.build import BEGIN, END, build_notebook, render
from ailab.labs.grade import COLUMNS, expected_checks, lab_index, protected_cells, tampering

ROOT = Path(__file__).resolve().parent.parent
LAB = "lab_admission_control"
LIMIT_S = 20  # the right submission took 3.3 s beside make test-noisy; the hanging one waits this out


def _solution() -> Path:
    for path, name in lab_index(ROOT / "solutions", first_only=False):
        if name == LAB:
            return path
    pytest.skip(f"no solution notebook for {LAB}")


def _replace_block(nb, function: str, body: str):
    """The solution block inside `def function(` replaced by `body` (same indent): a wrong answer."""
    for cell in nb.cells:
        match = re.search(rf"def {function}\(.*?\n([ \t]*){BEGIN}.*?{END}[^\n]*", cell.source, re.S)
        if match:
            indent = match.group(1)
            new = "\n".join(indent + line for line in body.splitlines())
            cell.source = cell.source[: match.start(1)] + new + cell.source[match.end() :]
            return nb
    raise AssertionError(f"no solution block in {function}() any more: update this test's wrong answer")


def _answer_cell(nb):
    return next(c for c in nb.cells if c.cell_type == "code" and BEGIN in c.source)


def _check_cell(nb, ref):
    """The first protected cell of the lab that calls a check, as found in nb (same id)."""
    ids = {c.get("id"): c for c in nb.cells}
    i, cell = next((i, c) for i, c in protected_cells(ref) if re.search(r"\bcheck_\w+\(", c.source))
    return i, ids[cell.get("id")]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grade")
    sol = _solution()
    ref_path = tmp / "labs" / sol.relative_to(ROOT / "solutions")
    ref_path.parent.mkdir(parents=True)
    ref_path.write_text(render(build_notebook(sol)), encoding="utf-8")  # labs/ as a fresh build
    solution = lambda: nbformat.read(str(sol), as_version=4)  # noqa: E731
    ref = nbformat.read(str(ref_path), as_version=4)
    return {"tmp": tmp, "sol": sol, "labs": tmp / "labs", "ref_path": ref_path, "ref": ref, "solution": solution}


@pytest.fixture(scope="module")
def graded(course):
    subs, solution, ref = course["tmp"] / "subs", course["solution"], course["ref"]

    def put(rel, nb):
        (subs / rel).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(subs / rel))

    put("right/lab_admission_control.ipynb", solution())
    wrong = _replace_block(solution(), "admit", "queue.append(request)  # forgets the bound")
    put("wrong/my_lab.ipynb", wrong)  # the file name says nothing: the metadata names the lab
    tampered = _replace_block(solution(), "admit", "queue.append(request)")
    edited_index, cell = _check_cell(tampered, ref)
    cell.source = (
        "try:\n" + "".join(f"    {line}\n" for line in cell.source.splitlines()) + "except Exception:\n    pass"
    )
    put("tampered.ipynb", tampered)
    hang = solution()
    # It hangs asleep: a spinning one is graded the same way (the time limit), and would take a core from the
    # tests beside it for the whole limit.
    _answer_cell(hang).source += "\n\nimport time\n\nwhile True:\n    time.sleep(1)\n"
    put("hang/week3/anything.ipynb", hang)
    crash = solution()
    _answer_cell(crash).source = "import os\nos._exit(1)\n" + _answer_cell(crash).source
    put("crash/lab.ipynb", crash)
    (subs / "broken.ipynb").write_text("{ not json", encoding="utf-8")
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("x = 1")]
    put("plain/notes.ipynb", plain)
    put("right/.ipynb_checkpoints/lab_admission_control-checkpoint.ipynb", solution())  # never graded

    out, csv_path, start = io.StringIO(), course["tmp"] / "grades.csv", time.monotonic()
    with contextlib.redirect_stdout(out):
        rc = main(
            [
                "labs",
                "grade",
                str(subs),
                "--jobs",
                "2",
                "--timeout",
                str(LIMIT_S),
                "--csv",
                str(csv_path),
                "--labs",
                str(course["labs"]),
            ]
        )
    seconds = time.monotonic() - start
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    by_learner = {}
    for row in rows:
        by_learner.setdefault(row["learner"], []).append(row)
    return {
        "rc": rc,
        "stdout": out.getvalue(),
        "header": header,
        "rows": by_learner,
        "seconds": seconds,
        "edited_index": edited_index,
        "expected": expected_checks(LAB, ref),
    }


def test_csv_has_the_columns_and_one_row_per_learner_lab_and_check(graded):
    assert graded["rc"] == 0
    assert graded["header"] == COLUMNS
    assert {"learner", "lab", "check", "passed", "message", "seconds", "status"} <= set(COLUMNS)
    assert set(graded["rows"]) == {"right", "wrong", "tampered", "hang", "crash", "broken", "plain"}
    assert len(graded["expected"]) >= 3, "the lab's check cells call its checks"
    for learner in ("right", "wrong", "tampered", "hang", "crash"):
        rows = graded["rows"][learner]
        assert {r["lab"] for r in rows} == {LAB}
        assert sorted(r["check"] for r in rows) == sorted(graded["expected"]), learner


def test_right_submission_passes_every_check(graded):
    rows = graded["rows"]["right"]
    assert all(r["passed"] == "True" for r in rows), rows
    assert {r["status"] for r in rows} == {"ok"} and float(rows[0]["seconds"]) > 0


def test_wrong_submission_fails_a_check_and_is_not_tampered(graded):
    rows = graded["rows"]["wrong"]
    assert {r["status"] for r in rows} == {"ok"}
    failed = [r for r in rows if r["passed"] == "False"]
    assert failed and all(r["message"] and "did not run" not in r["message"] for r in failed)
    assert rows[0]["file"].endswith("my_lab.ipynb")


def test_tampered_submission_is_run_and_flagged(graded):
    rows = graded["rows"]["tampered"]
    assert {r["status"] for r in rows} == {"tampered"}
    assert f"cell {graded['edited_index']} edited" in rows[0]["detail"]
    assert any(r["passed"] == "False" and "did not run" not in r["message"] for r in rows), "it still ran"


def test_hanging_and_crashing_submissions_are_reported_and_grading_goes_on(graded):
    hang, crash = graded["rows"]["hang"], graded["rows"]["crash"]
    assert {r["status"] for r in hang} == {"timeout"} and "time limit" in hang[0]["detail"]
    assert {r["status"] for r in crash} == {"crashed"} and "kernel died" in crash[0]["detail"]
    for r in hang + crash:
        assert r["passed"] == "False" and r["message"].startswith("did not run")
    assert float(hang[0]["seconds"]) >= LIMIT_S - 1
    assert graded["seconds"] < 4 * LIMIT_S, "the hanging notebook must not hold up the rest"


def test_files_that_are_not_labs_are_reported_not_fatal(graded):
    (broken,), (plain,) = graded["rows"]["broken"], graded["rows"]["plain"]
    assert broken["status"] == plain["status"] == "error" and broken["passed"] == "False"
    assert "not a readable Jupyter notebook" in broken["detail"]
    assert "not an ailab lab" in plain["detail"]


def test_summary_has_one_line_per_learner_and_lab(graded):
    out = graded["stdout"]
    n = len(graded["expected"])
    assert re.search(rf"^right\s+{LAB}\s+{n}/{n}\s+ok\b", out, re.M), out
    assert re.search(rf"^hang\s+{LAB}\s+0/{n}\s+timeout\b", out, re.M), out
    assert re.search(rf"^tampered\s+{LAB}\s+\d+/{n}\s+tampered\b", out, re.M), out
    assert re.search(r"^broken\s+-\s+0/0\s+error\b", out, re.M), out


def test_tampering_sees_edits_and_deletions_but_not_answers_or_new_cells(course):
    ref, fresh = course["ref"], lambda: nbformat.read(str(course["ref_path"]), as_version=4)
    protected = [i for i, _ in protected_cells(ref)]
    assert protected and all("NotImplementedError" not in ref.cells[i].source for i in protected)
    assert tampering(ref, nbformat.read(str(course["sol"]), as_version=4)) == []  # answers are the learner's
    nb = fresh()
    nb.cells.insert(0, nbformat.v4.new_code_cell("print('my notes')"))
    nb.cells[1 + protected[0]].source += "\n   \n"  # trailing whitespace is not an edit
    assert tampering(ref, nb) == []
    nb = fresh()
    del nb.cells[protected[-1]]
    assert tampering(ref, nb) == [f"cell {protected[-1]} deleted"]
    nb = fresh()
    nb.cells[protected[0]].cell_type = "markdown"
    assert tampering(ref, nb) == [f"cell {protected[0]} edited"]
    nb = fresh()  # without cell ids (an old nbformat), cells are found by hash; a moved one is fine
    for c in nb.cells:
        c.pop("id", None)
    nb.cells.append(nb.cells.pop(protected[0]))
    assert tampering(ref, nb) == []


def _edited_copy(course, path: Path) -> str:
    nb = nbformat.read(str(course["ref_path"]), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("# my work"))
    nbformat.write(nb, str(path))
    return path.read_text(encoding="utf-8")


def test_reset_restores_the_lab_and_keeps_every_backup(course, tmp_path, capsys):
    mine = tmp_path / "lab_admission_control.ipynb"
    first = _edited_copy(course, mine)
    assert main(["labs", "reset", str(mine), "--labs", str(course["labs"])]) == 0
    assert "kept as" in capsys.readouterr().out
    assert mine.read_text(encoding="utf-8") == course["ref_path"].read_text(encoding="utf-8")
    mine.write_text(first.replace("# my work", "# my second try"), encoding="utf-8")
    assert main(["labs", "reset", str(mine), "--labs", str(course["labs"])]) == 0  # same second, new name
    backups = sorted(tmp_path.glob("lab_admission_control.bak-*.ipynb"))
    assert len(backups) == 2 and all(re.search(r"\.bak-\d{8}-\d{6}(-\d+)?\.ipynb$", b.name) for b in backups)
    assert sorted(b.read_text(encoding="utf-8") for b in backups) == sorted(
        [first, first.replace("# my work", "# my second try")]
    )


def test_reset_in_labs_itself_builds_from_solutions(course, tmp_path):
    labs = tmp_path / "labs"
    labs.mkdir()
    mine = labs / course["ref_path"].name
    _edited_copy(course, mine)
    assert main(["labs", "reset", str(mine), "--labs", str(labs), "--solutions", str(ROOT / "solutions")]) == 0
    assert mine.read_text(encoding="utf-8") == render(build_notebook(course["sol"]))
    assert len(list(labs.glob("*.bak-*.ipynb"))) == 1


def test_reset_and_grade_refuse_what_is_not_a_lab(course, tmp_path, capsys):
    plain = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), str(plain))
    assert main(["labs", "reset", str(plain), "--labs", str(course["labs"])]) == 2
    assert "not an ailab lab" in capsys.readouterr().err
    (tmp_path / "junk.ipynb").write_text("not json")
    assert main(["labs", "reset", str(tmp_path / "junk.ipynb"), "--labs", str(course["labs"])]) == 2
    assert "not a readable notebook" in capsys.readouterr().err
    assert main(["labs", "reset", str(tmp_path / "missing.ipynb"), "--labs", str(course["labs"])]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.bak-*")), "nothing is backed up when nothing is reset"
    broken = tmp_path / course["ref_path"].name  # a lab the learner broke: found by its file name
    broken.write_text("{ half a notebook", encoding="utf-8")
    assert main(["labs", "reset", str(broken), "--labs", str(course["labs"])]) == 0
    assert broken.read_text(encoding="utf-8") == course["ref_path"].read_text(encoding="utf-8")
    assert main(["labs", "grade", str(tmp_path / "nowhere"), "--labs", str(course["labs"])]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_check_modules_are_parsed_one_thread_at_a_time(course, monkeypatch):
    """Graders run in threads, and CPython 3.11's ast.parse is not thread-safe: two at once once failed a
    learner's grading with 'SystemError: AST constructor recursion depth mismatch'."""
    import ast
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ailab.labs import grade as grade_module

    inside, most, lock, real_parse = [0], [0], threading.Lock(), ast.parse

    def slow_parse(*args, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # long enough for the other thread to arrive, were nothing stopping it
        try:
            return real_parse(*args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(grade_module.ast, "parse", slow_parse)
    monkeypatch.setattr(grade_module, "_CHECK_NAMES", {})
    labs = ["lab_admission_control", "lab_batch_loop", "lab_find_the_leak", "lab_accuracy_gate"]
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda lab: expected_checks(lab, course["ref"]), labs))
    assert most[0] == 1
    assert found[0] == expected_checks(LAB, course["ref"]) and len(found[0]) >= 3
