"""Grading for instructors: `ailab labs grade DIR` and `ailab labs reset PATH`.

grade: every notebook under DIR (one learner per file or per folder; the learner is the folder
directly under DIR, else the file's stem) runs in a fresh kernel with a time limit, several at once
(threads; each kernel is its own process). Which lab a notebook is comes from its metadata
`ailab.lab`, never its file name. The result is one row per learner x lab x check: a check that
never ran (the notebook hung, crashed, or a cell before it failed) is a row that did not pass.

Tampering, in the spirit of nbgrader's checksums: every code cell of the generated lab (labs/)
that holds no answer stub is *protected* - the check cells, and the set-up cells that make the data
the checks look at. Each is hashed (SHA-256 of its type and source, trailing whitespace ignored)
and must appear unchanged in the submission: found by its cell id when the id is still there,
else by hash anywhere in the notebook (learners may add cells freely). A protected cell whose id
holds other text is "edited"; one found neither way is "deleted". A tampered submission is still
run and reported, flagged. (Code in an answer cell can still fake a check from inside the kernel;
hashing catches the visible edits, as nbgrader's does.)

Statuses: ok (ran to the end, protected cells intact), tampered, timeout, crashed, error (not JSON,
not a lab, a lab missing from labs/); tampered combines with a run failure: "tampered+timeout".
"""

from __future__ import annotations

import ast
import csv
import hashlib
import importlib.util
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ailab.labs.build import LabFormatError, build_notebook, lab_name, render
from ailab.labs.runner import read_notebook, run_lab

COLUMNS = ["learner", "lab", "file", "check", "passed", "message", "seconds", "status", "detail"]
_STUB = re.compile(r"^\s*raise NotImplementedError\(.*not implemented yet", re.M)
_BACKUP = re.compile(r"\.bak-\d{8}-\d{6}(-\d+)?$")


def _skipped(path: Path) -> bool:
    return ".ipynb_checkpoints" in path.parts or bool(_BACKUP.search(path.stem))


def lab_index(labs_root: Path, first_only: bool = True):
    """Lab name (notebook metadata `ailab.lab`) -> its notebook in labs/; all (path, name) pairs if not first_only."""
    pairs = []
    for path in sorted(Path(labs_root).rglob("*.ipynb")):
        if not _skipped(path):
            try:
                pairs.append((path, lab_name(read_notebook(path), path)))
            except ValueError:  # not a lab, or unreadable: not a reference
                continue
    if not first_only:
        return pairs
    index: dict[str, Path] = {}
    for path, name in pairs:
        index.setdefault(name, path)
    return index


# --- tampering -------------------------------------------------------------------------------


def cell_hash(cell) -> str:
    source = "\n".join(line.rstrip() for line in cell.source.strip().splitlines())
    return hashlib.sha256(f"{cell.cell_type}\n{source}".encode()).hexdigest()


def protected_cells(lab_nb) -> list[tuple[int, object]]:
    """(index, cell) of every code cell of a generated lab that holds no answer stub."""
    return [(i, c) for i, c in enumerate(lab_nb.cells) if c.cell_type == "code" and not _STUB.search(c.source)]


def tampering(lab_nb, submitted_nb) -> list[str]:
    """What was done to the protected cells: ["cell 4 edited", "cell 6 deleted"]; [] when intact."""
    by_id = {c.get("id"): c for c in submitted_nb.cells if c.get("id")}
    hashes = [cell_hash(c) for c in submitted_nb.cells]
    problems = []
    for i, cell in protected_cells(lab_nb):
        want = cell_hash(cell)
        mine = by_id.get(cell.get("id"))
        if mine is not None and cell_hash(mine) == want:
            continue
        if mine is None and want in hashes:
            hashes.remove(want)  # each copy vouches for one protected cell
            continue
        problems.append(f"cell {i} {'edited' if mine is not None else 'deleted'}")
    return problems


# CPython 3.11's ast.parse is not safe in two threads at once: grading runs learners in threads, and
# a concurrent parse once failed a learner's grading with "SystemError: AST constructor recursion depth
# mismatch". One lock around it; each check module is parsed once.
_PARSE_LOCK = threading.Lock()
_CHECK_NAMES: dict[str, dict[str, str]] = {}


def _check_names(origin: str) -> dict[str, str]:
    """{function name: check name} for every @check(...) function in a lab's check module."""
    with _PARSE_LOCK:
        if origin not in _CHECK_NAMES:
            names = {}
            for node in ast.parse(Path(origin).read_text(encoding="utf-8")).body:
                for dec in getattr(node, "decorator_list", []):
                    if (
                        isinstance(node, ast.FunctionDef)
                        and isinstance(dec, ast.Call)
                        and getattr(dec.func, "id", "") == "check"
                        and len(dec.args) >= 2
                        and isinstance(dec.args[1], ast.Constant)
                    ):
                        names[node.name] = dec.args[1].value
            _CHECK_NAMES[origin] = names
        return _CHECK_NAMES[origin]


def expected_checks(lab: str, lab_nb) -> list[str]:
    """The check names the protected cells call, read from the lab's check module (not imported)."""
    spec = importlib.util.find_spec(f"ailab.labs.{lab}")
    if spec is None or not spec.origin:
        return []
    names = _check_names(spec.origin)
    text = "\n".join(c.source for _, c in protected_cells(lab_nb))
    return [check for fn, check in names.items() if re.search(rf"\b{fn}\s*\(", text)]


# --- grading ---------------------------------------------------------------------------------


@dataclass
class Graded:
    learner: str
    file: str
    lab: str = ""
    status: str = "error"
    detail: str = ""
    seconds: float = 0.0
    checks: list[dict] = field(default_factory=list)  # {"check", "passed", "message"}

    @property
    def score(self) -> str:
        return f"{sum(c['passed'] for c in self.checks)}/{len(self.checks)}"

    def rows(self) -> list[dict]:
        base = {
            "learner": self.learner,
            "lab": self.lab,
            "file": self.file,
            "seconds": f"{self.seconds:.1f}",
            "status": self.status,
            "detail": self.detail,
        }
        if not self.checks:
            return [{**base, "check": "", "passed": False, "message": self.detail}]
        return [{**base, **c} for c in self.checks]


def find_submissions(root: Path) -> list[tuple[str, Path]]:
    """(learner, notebook) for every notebook under root, checkpoints and reset backups left out."""
    out = []
    for path in sorted(root.rglob("*.ipynb")):
        rel = path.relative_to(root)
        if not _skipped(rel):
            out.append((rel.parts[0] if len(rel.parts) > 1 else path.stem, path))
    return out


def _merge(expected: list[str], records: list[dict], why_missing: str) -> list[dict]:
    """One outcome per check, in the order they ran: a check passes only if every run of it passed."""
    merged: dict[str, dict] = {}
    for r in records:
        m = merged.setdefault(r["check"], {"check": r["check"], "passed": True, "message": ""})
        if m["passed"] and not r["passed"]:
            m.update(passed=False, message=r["message"])
    for name in expected:
        merged.setdefault(name, {"check": name, "passed": False, "message": f"did not run ({why_missing})"})
    return list(merged.values())


def grade_one(learner: str, path: Path, index: dict[str, Path], limit_s: float) -> Graded:
    g, start = Graded(learner, str(path)), time.monotonic()
    try:
        nb = read_notebook(path)
        g.lab = lab_name(nb, path)
        if g.lab not in index:
            raise LabFormatError(f"{path} says it is lab {g.lab!r}, which is not in labs/ ({', '.join(index)})")
        ref = read_notebook(index[g.lab])
        tampered = tampering(ref, nb)
        expected = expected_checks(g.lab, ref)
        report = run_lab(path, limit_s=limit_s)
    except ValueError as e:  # not JSON, not a lab, a lab we do not have (LabFormatError is a ValueError)
        g.detail = str(e)
        return g
    except Exception as e:  # noqa: BLE001 - one bad file must not stop the other learners' grading
        g.detail = f"{type(e).__name__}: {e}"
        return g
    g.seconds = time.monotonic() - start
    notes = tampered + ([report.detail] if report.detail else []) + report.cell_errors[:3]
    g.detail = "; ".join(notes)
    if tampered:
        g.status = "tampered" if report.status == "ok" else f"tampered+{report.status}"
    else:
        g.status = report.status
    why = report.detail if report.status != "ok" else "an earlier cell failed, or its cell was removed"
    g.checks = _merge(expected, report.checks, why)
    return g


def grade(
    root: str | Path,
    labs_root: str | Path = "labs",
    jobs: int = 2,
    limit_s: float = 300,
    csv_path: str | Path | None = None,
    progress=None,
) -> list[Graded]:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions")
    index = lab_index(Path(labs_root))
    if not index:
        raise FileNotFoundError(f"no lab notebooks in {labs_root}: pass --labs, or run this from the course's root")
    subs = find_submissions(root)

    def one(sub):
        g = grade_one(*sub, index, limit_s)
        if progress:
            progress(g)
        return g

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = sorted(pool.map(one, subs), key=lambda g: (g.learner, g.lab, g.file))
    for g in results:
        g.file = str(Path(g.file).relative_to(root))
    if csv_path:
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            for g in results:
                writer.writerows(g.rows())
    return results


def summary_table(results: list[Graded]) -> str:
    head = ("learner", "lab", "passed", "status", "seconds")
    rows = [head] + [(g.learner, g.lab or "-", g.score, g.status, f"{g.seconds:.1f}") for g in results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for g in results:
        if g.detail:
            lines.append(f"{g.learner} / {g.lab or Path(g.file).name}: {g.status}: {g.detail}")
    return "\n".join(lines)


# --- reset -----------------------------------------------------------------------------------


def backup_path(path: Path, now: datetime | None = None) -> Path:
    """PATH.bak-YYYYmmdd-HHMMSS.ipynb beside PATH; -1, -2, ... when that name is taken."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    n = 0
    while True:
        candidate = path.with_name(f"{path.stem}.bak-{stamp}{f'-{n}' if n else ''}{path.suffix}")
        if not candidate.exists():
            return candidate
        n += 1


def fresh_text(path: Path, labs_root: Path, solutions_root: Path) -> tuple[str, str]:
    """(text of a fresh copy of the lab that `path` is, where it came from)."""
    try:
        nb = read_notebook(path)
    except ValueError:  # unreadable: a broken copy of a lab can still be reset by its file name
        nb = None
    lab = lab_name(nb, path) if nb is not None else None  # a readable notebook must say which lab it is
    index = lab_index(labs_root)
    if lab is None:
        same_name = [p for p in index.values() if p.name == path.name]
        if not same_name:
            raise LabFormatError(f"{path} is not a readable notebook and no lab in {labs_root} has its file name")
        lab = next(name for name, p in index.items() if p == same_name[0])
    ref = index.get(lab)
    if ref is not None and ref.resolve() != path.resolve():
        return ref.read_text(encoding="utf-8"), str(ref)
    # The learner works in labs/ itself (or labs/ lacks it): build the fresh copy from solutions/.
    for sol, name in lab_index(solutions_root, first_only=False):
        if name == lab:
            return render(build_notebook(sol)), f"a fresh build of {sol}"
    raise LabFormatError(
        f"no fresh copy of lab {lab!r}: it is in neither {labs_root} (as another file) nor {solutions_root}"
    )


def reset(
    path: str | Path, labs_root: str | Path = "labs", solutions_root: str | Path = "solutions"
) -> tuple[Path, str]:
    """Replace the notebook at `path` with a fresh copy of its lab; return (backup, source)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; labs are listed in book.yml (for example labs/0_orientation/)")
    text, source = fresh_text(path, Path(labs_root), Path(solutions_root))
    backup = backup_path(path)
    with open(backup, "xb") as f:  # "x": never overwrite a previous backup
        f.write(path.read_bytes())
    path.write_text(text, encoding="utf-8")
    return backup, source


def print_progress(g: Graded) -> None:
    print(
        f"graded {g.learner} {g.lab or Path(g.file).name}: {g.score} {g.status} ({g.seconds:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
