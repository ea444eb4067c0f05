"""Every lab: labs/ equals a fresh build, and the stub fails every check.

(That each solution runs end to end is proved by nbval over solutions/ in `make test`; that each
check also rejects a plausible wrong answer is in tests/test_lab_<name>.py.)
"""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from ailab import book as bk
from ailab.labs.build import LabFormatError, build_all, build_notebook, stub_source
from ailab.labs.runner import run_lab

ROOT = Path(__file__).resolve().parent.parent
# Every graded task of the course: the chapter labs and the shorter chapter exercises, same mechanism.
TASKS = [
    (f"{ch['id']}-{key}", ch[key])
    for _, ch in bk.chapters(bk.load_book(ROOT / "book.yml"))
    for key in ("lab", "exercise")
    if ch.get(key)
]


def test_labs_equal_a_fresh_build():
    stale = build_all(ROOT / "solutions", ROOT / "labs", check_only=True)
    assert not stale, f"labs/ is out of date for {stale}: run `ailab labs build`"


@pytest.fixture(scope="module")
def stub_reports() -> dict:
    """Every stub run once, three kernels at a time (`ailab labs grade --jobs N` runs labs the same way):
    most of a stub's time is a kernel starting and importing torch, and a stub's checks cannot pass by
    timing (each calls code that raises NotImplementedError), so sharing the cores changes no outcome.
    One after another the 29 stubs took 167 s here; two at a time 90 s, three at a time 78 s. Stopping each
    after its last check (run_lab's way) took three at a time from 72 s and 138 CPU-s to 51 s and 89 CPU-s."""
    paths = [p for _, p in TASKS]
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(paths, pool.map(lambda p: run_lab(ROOT / p), paths)))


@pytest.mark.parametrize("path", [p for _, p in TASKS], ids=[i for i, _ in TASKS])
def test_stub_fails_every_check(path, stub_reports):
    report = stub_reports[path]
    assert report.checks, f"no check ran in {path}: {report.cell_errors}"
    assert not report.passed, f"checks passed on the stub (they cannot fail?): {report.passed}"


@pytest.mark.parametrize("path", [p for _, p in TASKS], ids=[i for i, _ in TASKS])
def test_lab_has_no_answers_left(path):
    lab = json.loads((ROOT / path).read_text())
    text = "".join("".join(c["source"]) for c in lab["cells"])
    assert "BEGIN SOLUTION" not in text and "NotImplementedError" in text


def test_stub_keeps_indentation_and_hint():
    src = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    # HINT: add one\n    return x + y\n    ### END SOLUTION\n"
    out, n = stub_source(src, "t")
    assert n == 1
    lines = out.splitlines()
    assert lines[:3] == ["def f(x):", "    y = 1", "    # HINT: add one"] and len(lines) == 4
    assert lines[3].startswith("    raise NotImplementedError(")
    ns = {}
    exec(out, ns)
    with pytest.raises(NotImplementedError) as raised:
        ns["f"](1)
    message = str(raised.value)
    assert message.startswith("f() is not implemented yet") and "HINT above" in message and "Hints 2 and 3" in message
    assert "add one" not in message, "the message points to the hint; it does not repeat it"


def test_stub_names_the_method_it_stubs():
    src = (
        "class R:\n    def get_next(self):\n        ### BEGIN SOLUTION\n        # HINT: h\n        return 1\n"
        "        ### END SOLUTION\n"
    )
    out, _ = stub_source(src, "t")
    ns = {}
    exec(out, ns)
    with pytest.raises(NotImplementedError, match=r"^R\.get_next\(\) is not implemented yet"):
        ns["R"]().get_next()


@pytest.mark.parametrize(
    "src, message",
    [
        ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION\n", "without a matching"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another"),
    ],
)
def test_malformed_markers_are_named(src, message):
    with pytest.raises(LabFormatError, match=message):
        stub_source(src, "cell 3")


def test_a_notebook_that_is_not_a_lab_is_refused(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "plain.ipynb"
    nbformat.write(nb, str(path))
    with pytest.raises(LabFormatError, match="not an ailab lab"):
        run_lab(path)
    nb.metadata["ailab"] = {"lab": "x"}
    nbformat.write(nb, str(path))
    with pytest.raises(LabFormatError, match="no ### BEGIN SOLUTION"):
        build_notebook(path)


def test_a_run_stops_after_the_last_check(tmp_path):
    """The cells after the last check show the answer at work; they cannot change a check, so none of them runs
    (here one would raise, one would take a minute). A notebook that calls no check runs whole."""
    import time

    nb = nbformat.v4.new_notebook()
    nb.metadata["ailab"] = {"lab": "lab_admission_control"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from ailab.labs.core import check\n\n@check('t', 'always')\ndef check_t():\n    pass"
        ),
        nbformat.v4.new_markdown_cell("What it does, at work:"),
        nbformat.v4.new_code_cell("check_t()"),
        nbformat.v4.new_code_cell("raise ValueError('a demo cell')"),
        nbformat.v4.new_code_cell("import time\ntime.sleep(60)"),
    ]
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, str(path))
    start = time.monotonic()
    report = run_lab(path)
    assert report.passed == ["always"] and not report.cell_errors and time.monotonic() - start < 50
    nb.cells = nb.cells[3:4]
    nbformat.write(nb, str(path))
    assert run_lab(path).cell_errors == ["cell 0: ValueError: a demo cell"]


def test_labs_check_cli_reports_clearly(tmp_path, capsys):
    from ailab.cli import main

    (tmp_path / "broken.ipynb").write_text("not json")
    assert main(["labs", "check", str(tmp_path / "broken.ipynb")]) == 2
    assert "not a readable Jupyter notebook" in capsys.readouterr().err
    assert main(["labs", "check", str(tmp_path / "missing.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_kernel_that_fails_to_start_is_started_again(monkeypatch, tmp_path):
    """A kernel that dies before running any cell (kernels started at once can race for their ports) is the
    machine's failure, not the learner's: the notebook runs in a new kernel. A crash in a cell is still a crash."""
    from nbclient import NotebookClient

    real, calls = NotebookClient.execute, []

    def fails_to_start_once(self, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return real(self, **kwargs)

    monkeypatch.setattr(NotebookClient, "execute", fails_to_start_once)
    nb = nbformat.v4.new_notebook()
    nb.metadata["ailab"] = {"lab": "startup_test"}
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "startup.ipynb"
    nbformat.write(nb, str(path))
    report = run_lab(path)
    assert len(calls) == 2 and report.status == "ok" and not report.cell_errors
    nb.cells = [nbformat.v4.new_code_cell("import os\nos._exit(1)")]
    nbformat.write(nb, str(path))
    calls.clear()
    calls.append(1)  # start normally: a crash inside a cell is reported, not retried
    crashed = run_lab(path)
    assert crashed.status == "crashed" and "cell 0" in crashed.detail and len(calls) == 2
