"""ARCHITECTURE.md stays true: every module it names exists, and every module that exists is named there."""
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
