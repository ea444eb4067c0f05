"""pyproject.toml and environment.yml pin the same versions; notebooks are stored clean."""

import builtins
import json
import sys
import tomllib
import types
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from ailab import doctor
from ailab.doctor import conda_mirror_diff, pin_drift

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_mirrors_pyproject():
    assert conda_mirror_diff(ROOT / "pyproject.toml", ROOT / "environment.yml") == {}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pythons = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert pythons == ["python=3.11"]  # the default; its header says how to pick 3.12 or 3.13
    header = (ROOT / "environment.yml").read_text()
    assert "python=3.12" in header and "python=3.13" in header


def _makefile_python_check(version: tuple[int, int]):
    """The exit code of setup's Python check in the Makefile, run as if under Python `version`."""
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if "sys.version_info" in ln)
    program = line.split("-c '", 1)[1].rsplit("'", 1)[0]
    fake = types.SimpleNamespace(
        version_info=(*version, 0, "final", 0), version=f"{version[0]}.{version[1]}.0 (fake)", exit=sys.exit
    )
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        return fake if name == "sys" else real_import(name, *args, **kwargs)

    with pytest.raises(SystemExit) as exit_:
        exec(program, {"__builtins__": {**vars(builtins), "__import__": fake_import}})
    return exit_.value.code


def test_supported_pythons_agree_everywhere():
    # pyproject's requires-python, `make setup`'s check, `ailab doctor` and the README name the same versions.
    requires = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    supported = [(3, 11), (3, 12), (3, 13)]
    assert doctor.SUPPORTED_PYTHON == supported
    for version in supported:
        assert f"{version[0]}.{version[1]}.0" in requires
        assert _makefile_python_check(version) == 0
    for version in [(3, 10), (3, 14)]:
        assert f"{version[0]}.{version[1]}.0" not in requires
        message = _makefile_python_check(version)
        assert f"found {version[0]}.{version[1]}.0" in message and "3.11, 3.12 or 3.13" in message
    assert "Python 3.11, 3.12 or 3.13" in (ROOT / "README.md").read_text()
    assert doctor.python_check() == {
        "check": "python 3.11, 3.12 or 3.13",
        "ok": True,
        "detail": ".".join(map(str, sys.version_info[:3])),
    }
    assert [doctor.python_check((3, minor, 1))["ok"] for minor in (10, 11, 12, 13, 14)] == [0, 1, 1, 1, 0]
    assert "needs Python 3.11, 3.12 or 3.13" in doctor.python_check((3, 14, 0))["detail"]


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
