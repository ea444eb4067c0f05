"""Hints guide; they never hold the answer (issue 9).

For every lab in solutions/:
- no line of a solution block (whitespace-normalised, longer than ~15 characters, not a `# HINT:` line nor a
  trivial line such as `except Exception:`) appears in a first hint (`# HINT:`), in a stub's
  NotImplementedError message, or in the lab's markdown cells (which hold the second hints);
- a first or second hint does not hold a solution line's working part either: the expression after
  `return` or `=`, or the condition of an `if` / `while` / `for` / `with`; nor does it copy a run of
  24 or more non-space characters of a solution line, unless that run is just an API name;
- every stubbed block has at least one `# HINT:` line, and the lab's markdown has a collapsed
  `<details><summary>Second hint...</summary> ... </details>` block per stubbed block;
- the stub's message says the function is not implemented yet and points to the hints without repeating them.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from pathlib import Path

import nbformat
import pytest

from ailab.labs.build import _HINT, BEGIN, END, build_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted(p for p in (ROOT / "solutions").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
MIN_CHARS = 15  # a fragment must be longer than this (whitespace-normalised) to count as a leak
TRIVIAL = {
    "except Exception:",
    "except Exception as e:",
    "else:",
    "try:",
    "finally:",
    "return None",
    "return out",
    "return result",
    "return results",
    "pass",
    "break",
    "continue",
}
_DETAILS = re.compile(r"<details>\s*<summary>\s*Second hint.*?</summary>(.*?)</details>", re.S)
_STUB = re.compile(r"^\s*raise NotImplementedError\((.*)\)\s*$")
_API_NAME = re.compile(r"^([\w.]+(\(\))?|\"[\w.]+\")$")  # `time.perf_counter()` names an API a hint may point to
SHARED_CHARS = 24  # a hint may not copy this many consecutive non-space characters of a solution line


def _squash(text: str) -> str:
    """Compare without whitespace, so re-wrapping or re-spacing a line cannot hide it."""
    return re.sub(r"\s+", "", text)


def _one_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def blocks(source: str) -> list[tuple[list[str], list[str]]]:
    """(hints, code lines) of each solution block in a cell's source."""
    out, block = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN:
            block = []
        elif line.strip() == END:
            hints = [m.group(1).strip() for m in map(_HINT.match, block) if m]
            out.append((hints, [ln for ln in block if not _HINT.match(ln)]))
            block = None
        elif block is not None:
            block.append(line)
    return out


def _without_comments(code_lines: list[str]) -> list[str]:
    """The block's lines with comments removed (a comment is not the answer, and `# HINT:` lines go too)."""
    lines = textwrap.dedent("\n".join(code_lines)).splitlines()
    try:
        cuts = {
            tok.start[0]: tok.start[1]
            for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline)
            if tok.type == tokenize.COMMENT
        }
    except (tokenize.TokenError, IndentationError, SyntaxError):
        cuts = {}
    return [line[: cuts[i]] if i in cuts else line for i, line in enumerate(lines, 1)]


def _counts(fragment: str) -> bool:
    return len(fragment) > MIN_CHARS and fragment not in TRIVIAL


def solution_lines(code_lines: list[str]) -> list[str]:
    return [s for s in (_one_space(ln) for ln in _without_comments(code_lines)) if _counts(s)]


def working_parts(line: str) -> list[str]:
    """What a hint must not give away even without the rest of the line: the value returned or assigned,
    the condition tested, the sequence looped over."""
    parts = []
    if line.startswith("return "):
        parts.append(line[len("return ") :])
    m = re.match(r"^[\w.\[\], ()*]+?\s(?:[-+*/]?=)\s(.+)$", line)  # a = ..., a, b = ..., a += ...
    if m:
        parts.append(m.group(1))
    m = re.match(r"^(?:if|elif|while|for|with)\s(.+):$", line)
    if m:
        parts.append(m.group(1))
    return [p.strip() for p in parts if _counts(p.strip()) and not _API_NAME.match(p.strip())]


def shared_code(line: str, text: str, n: int = SHARED_CHARS) -> list[str]:
    """Runs of at least `n` non-space characters that `text` copies from a solution line, other than an API
    name (`onnxruntime.InferenceSession`, `"CPUExecutionProvider"`): a piece such as
    `np.polyfit(np.arange(len(y)), y, 1)` gives the answer away even inside a longer line."""
    a, b, out, i = _squash(line), _squash(text), [], 0
    while i + n <= len(a):
        if a[i : i + n] not in b:
            i += 1
            continue
        j = i + n
        while j < len(a) and a[i : j + 1] in b:
            j += 1
        if not _API_NAME.match(a[i:j]):
            out.append(a[i:j])
        i = j
    return out


def _lab(path: Path):
    return nbformat.read(str(path), as_version=4)


def _solution_blocks(nb) -> list[tuple[int, list[str], list[str]]]:
    return [
        (i, hints, code)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for hints, code in blocks(cell.source)
    ]


def _stub_messages(path: Path) -> list[tuple[int, str]]:
    out = []
    for i, cell in enumerate(build_notebook(path).cells):
        if cell.cell_type == "code":
            for line in cell.source.splitlines():
                m = _STUB.match(line)
                if m:
                    out.append((i, ast.literal_eval(m.group(1))))
    return out


def _second_hints(nb) -> list[tuple[int, str]]:
    return [
        (i, body)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for body in _DETAILS.findall(cell.source)
    ]


def _ids(paths):
    return [p.stem for p in paths]


def test_every_lab_is_covered():
    assert len(SOLUTIONS) >= 8, f"expected the 8 labs in solutions/, found {[p.name for p in SOLUTIONS]}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_no_solution_line_in_hints_stub_messages_or_markdown(path):
    nb = _lab(path)
    places = [(f"cell {i}, # HINT: line", h) for i, hints, _ in _solution_blocks(nb) for h in hints]
    places += [(f"cell {i}, stub message", msg) for i, msg in _stub_messages(path)]
    places += [(f"cell {i}, markdown", cell.source) for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"]
    hints_only = [p for p in places if "markdown" not in p[0]]
    hints_only += [(f"cell {i}, second hint", body) for i, body in _second_hints(nb)]
    leaks = []
    for i, _, code in _solution_blocks(nb):
        for line in solution_lines(code):
            leaks += [
                f"{where}: holds the solution line {line!r} (from cell {i})"
                for where, text in places
                if _squash(line) in _squash(text)
            ]
            for part in working_parts(line):
                leaks += [
                    f"{where}: holds {part!r}, the working part of the solution line {line!r} (cell {i})"
                    for where, text in hints_only
                    if _squash(part) in _squash(text)
                ]
            for where, text in hints_only:
                leaks += [
                    f"{where}: copies {piece!r} from the solution line {line!r} (cell {i})"
                    for piece in shared_code(line, text)
                ]
    assert not leaks, (
        f"{path.relative_to(ROOT)}: a hint names the idea and the API to read, never the statement "
        "that solves it:\n  " + "\n  ".join(dict.fromkeys(leaks))
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_every_stubbed_block_has_a_first_hint(path):
    found = _solution_blocks(_lab(path))
    assert found, f"{path.relative_to(ROOT)} has no solution block"
    bare = [i for i, hints, _ in found if not any(h.strip() for h in hints)]
    assert not bare, f"{path.relative_to(ROOT)}: the solution block(s) in cell(s) {bare} have no '# HINT:' line"


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_every_lab_has_a_collapsed_second_hint_per_task(path):
    nb = _lab(path)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    seconds = _second_hints(nb)
    assert seconds, (
        f"{path.relative_to(ROOT)}: no second hint; add one next to the task, in a markdown cell: "
        "<details><summary>Second hint</summary> ... </details>"
    )
    assert markdown.count("<details") == markdown.count("</details>") == len(seconds), (
        f"{path.relative_to(ROOT)}: every <details> must open with <summary>Second hint...</summary> and be closed"
    )
    assert "<details open" not in markdown, "second hints start collapsed"
    assert all(body.strip() for _, body in seconds), "a second hint is empty"
    n_blocks = len(_solution_blocks(nb))
    assert len(seconds) >= n_blocks, (
        f"{path.relative_to(ROOT)}: {n_blocks} functions to write but only "
        f"{len(seconds)} second hint(s): give each task its own"
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_stub_message_points_to_the_hints_without_repeating_them(path):
    hints = [h for _, hs, _ in _solution_blocks(_lab(path)) for h in hs]
    messages = _stub_messages(path)
    assert messages, f"{path.relative_to(ROOT)}: the built lab has no stub"
    for i, msg in messages:
        assert "not implemented yet" in msg and "HINT" in msg and "Second hint" in msg, (
            f"cell {i}: the stub should say it is not implemented yet and point to the hints; it says {msg!r}"
        )
        repeated = [h for h in hints if len(_one_space(h)) > MIN_CHARS and _squash(h) in _squash(msg)]
        assert not repeated, f"cell {i}: the stub message repeats the hint {repeated[0]!r}"
