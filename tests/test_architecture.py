"""ARCHITECTURE.md stays true: every module it names exists, and every module that exists is named there; and
every lab or exercise has its test file, named after its check module (its recipe, "Adding a lab or an exercise")."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
NAMED = set(re.findall(r"`(ailab/[\w/]+(?:\.py|/))`", DOC))


def test_every_named_module_exists():
    missing = sorted(p for p in NAMED if not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_module_is_named():
    """A module or sub-package of ailab, or a module inside one, appears in the map."""
    named_files = {p for p in NAMED if p.endswith(".py")}
    named_dirs = {p for p in NAMED if p.endswith("/")}
    short = set(re.findall(r"`(\w+\.py)`", DOC))  # sub-package modules may be named by file name in their line
    unnamed = []
    for path in sorted((ROOT / "ailab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if path.name in ("__init__.py", "__main__.py"):
            continue
        parent = rel.rsplit("/", 1)[0] + "/"
        if rel in named_files or (parent in named_dirs and path.name in short):
            continue
        unnamed.append(rel)
    assert not unnamed, f"modules missing from ARCHITECTURE.md: {unnamed}"


LAB_MACHINERY = {"__init__", "core", "build", "runner", "grade", "differential"}


def test_every_check_module_has_its_test_file_named_one_way():
    """ailab/labs/ex_foo.py is proved by tests/test_ex_foo.py, lab_foo.py (and lab00_latency.py) by
    tests/test_lab_foo.py (tests/test_lab_lab00_latency.py); no other test file takes those prefixes."""
    modules = {p.stem for p in (ROOT / "ailab" / "labs").glob("*.py")} - LAB_MACHINERY
    want = {f"test_lab_{m.removeprefix('lab_')}" if m.startswith("lab") else f"test_{m}" for m in modules}
    have = {p.stem for p in (ROOT / "tests").glob("test_*.py") if p.stem.startswith(("test_lab_", "test_ex_"))}
    assert not want - have, f"check modules without their test file: {sorted(want - have)}"
    assert not have - want, (
        f"test files named like a lab's or an exercise's, with no check module: {sorted(have - want)}"
    )
    assert "Adding a lab or an exercise" in DOC
