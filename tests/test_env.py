"""pyproject.toml and environment.yml pin the same versions; notebooks are stored clean."""

import json
import tomllib
from pathlib import Path

import yaml

from ailab.doctor import conda_mirror_diff, pin_drift

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_mirrors_pyproject():
    assert conda_mirror_diff(ROOT / "pyproject.toml", ROOT / "environment.yml") == {}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]


def test_a_changed_pin_is_reported(tmp_path):
    env = (ROOT / "environment.yml").read_text().replace("numpy==2.4.6", "numpy==2.4.5")
    (tmp_path / "environment.yml").write_text(env)
    assert conda_mirror_diff(ROOT / "pyproject.toml", tmp_path / "environment.yml") == {
        "numpy": ("numpy==2.4.6", "numpy==2.4.5")
    }


def test_installed_versions_equal_the_pins():
    assert pin_drift() == []
    assert pin_drift(["numpy==1.0.0"]) == [
        {"package": "numpy", "pinned": "1.0.0", "installed": pin_drift.__globals__["_version"]("numpy")}
    ]


def test_pins_come_from_pyproject_where_ailab_is_not_installed(monkeypatch):
    # The GPU suite's machine runs ailab from the working tree on PYTHONPATH: no installed metadata to read.
    import importlib.metadata as md

    from ailab import doctor

    installed = md.requires("ailab")

    def absent(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(doctor.md, "requires", absent)
    assert sorted(doctor._pinned()) == sorted(installed)
    assert pin_drift() == []


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
    body = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert body[-1] == "make test"
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
