"""pyproject.toml and environment.yml pin the same versions; notebooks are stored clean."""
import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines):
    return {re.split(r"[=\[]", d, 1)[0].lower(): d for d in lines}


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    expected = _pins(project["dependencies"] + extras["dev"] + extras["scale"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "python=3.11" in env["dependencies"]
    assert _pins(pip) == expected


def test_gpu_variant_is_documented_and_the_only_difference():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["gpu"] == ["onnxruntime-gpu==1.31.1"]
    text = (ROOT / "environment.yml").read_text()
    assert "'onnxruntime-gpu==1.31.1'" in text and "only allowed difference" in text


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for v in project["optional-dependencies"].values() for d in v]
    loose = [d for d in deps if "==" not in d]
    assert not loose, f"unpinned: {loose}"
    assert "torch==2.13.0" in deps  # exactly: a looser pin pulls a multi-GB CUDA build


def test_notebooks_are_stored_without_outputs():
    for nb in sorted(ROOT.glob("*/**/*.ipynb")):
        if nb.parts[len(ROOT.parts)] not in ("notebooks", "labs", "solutions"):
            continue
        cells = json.loads(nb.read_text())["cells"]
        dirty = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c["outputs"] or c["execution_count"])]
        assert not dirty, f"{nb.relative_to(ROOT)} is stored with outputs in cells {dirty}"


def test_ci_calls_make_test_only():
    body = [l for l in (ROOT / ".ci/run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert body[-1] == "make test"
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
