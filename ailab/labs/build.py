"""solutions/ -> labs/: replace every answer with a stub that raises NotImplementedError with a hint.

In a solution notebook, an answer sits between `### BEGIN SOLUTION` and `### END SOLUTION`
(indented like the code it replaces). `# HINT: ...` lines inside the block are kept as comments in
the stub: the first hint, a question that points at the idea. Two more sit folded in the lab's markdown, next
to the task: `<details><summary>Hint 2 · the idea</summary>` says the idea in words, then
`<details><summary>Hint 3 · the structure</summary>` gives the steps without code. No hint holds a line or a
formula of the answer (tests/test_labs_hints.py). The stub's message says which function is not implemented
yet and points to the hints; it does not repeat them (the learner sees the message once per failed check).
The notebook's metadata `ailab.lab` names its check module.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_HINT = re.compile(r"^\s*#\s*HINT:\s*(.*)$")
_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")
_CLASS = re.compile(r"^(\s*)class\s+(\w+)")


class LabFormatError(ValueError):
    """A solution notebook's markers are malformed, or a notebook is not a lab."""


def lab_name(nb, path: str | Path = "notebook") -> str:
    name = nb.metadata.get("ailab", {}).get("lab")
    if not name:
        raise LabFormatError(
            f"{path} is not an ailab lab: its notebook metadata has no 'ailab': {{'lab': ...}} entry. "
            "Lab notebooks live in labs/ (answers in solutions/); see book.yml for the list."
        )
    return name


def _enclosing_name(lines: list[str], indent: str) -> str | None:
    """The function (``Class.method`` for a method) whose body holds a block indented by `indent`."""
    name, depth = None, len(indent)
    for line in reversed(lines):
        m = (_DEF if name is None else _CLASS).match(line)
        if m and len(m.group(1)) < depth:
            if name is not None:
                return f"{m.group(2)}.{name}"
            name, depth = m.group(2), len(m.group(1))
            if depth == 0:
                return name
    return name


def stub_message(name: str | None) -> str:
    """What the stub raises: not implemented yet, and where the hints are (never the hints themselves)."""
    what = f"{name}() is" if name else "this answer is"
    return (
        f"{what} not implemented yet: write your answer here (the HINT above asks the first question; Hints 2 and 3 "
        "are folded below the task)"
    )


def stub_source(source: str, where: str) -> tuple[str, int]:
    """Return (source with answers stubbed, number of answers replaced)."""
    out, block, indent, count = [], None, "", 0
    lines = source.splitlines()
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if block is not None:
                raise LabFormatError(f"{where}, line {lineno}: {BEGIN} inside another solution block")
            block, indent = [], line[: len(line) - len(line.lstrip())]
            name = _enclosing_name(lines[: lineno - 1], indent)
        elif stripped == END:
            if block is None:
                raise LabFormatError(f"{where}, line {lineno}: {END} without a matching {BEGIN}")
            hints = [m.group(1) for m in map(_HINT.match, block) if m]
            out.extend(f"{indent}# HINT: {h}" for h in hints)
            out.append(f"{indent}raise NotImplementedError({stub_message(name)!r})")
            block, count = None, count + 1
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise LabFormatError(f"{where}: {BEGIN} is never closed by {END}")
    return "\n".join(out), count


def build_notebook(solution_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(str(solution_path), as_version=4)
    lab_name(nb, solution_path)
    lab = copy.deepcopy(nb)
    total = 0
    for i, cell in enumerate(lab.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.source, n = stub_source(cell.source, f"{solution_path} cell {i}")
            total += n
    if total == 0:
        raise LabFormatError(f"{solution_path} has no {BEGIN} ... {END} block: nothing for the learner to write")
    return lab


def lab_path_for(solution_path: Path, solutions_root: Path, labs_root: Path) -> Path:
    return labs_root / solution_path.relative_to(solutions_root)


def render(nb) -> str:
    """The exact text written to disk, so 'labs/ equals a fresh build' compares strings."""
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def build_all(
    solutions_root: Path = Path("solutions"), labs_root: Path = Path("labs"), check_only: bool = False
) -> list[str]:
    """Write labs/ from solutions/. With check_only, write nothing and return the stale paths."""
    solutions_root, labs_root = Path(solutions_root), Path(labs_root)
    if not solutions_root.is_dir():
        raise LabFormatError(f"{solutions_root} is not a folder; run this from the course's root")
    stale = []
    for sol in sorted(solutions_root.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in sol.parts:
            continue
        target = lab_path_for(sol, solutions_root, labs_root)
        text = render(build_notebook(sol))
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(str(target))
            if not check_only:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    return stale
