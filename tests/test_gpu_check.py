"""scripts/gpu_check.sh (the GPU branches in one command) runs here in CPU mode and writes a well-formed JSON.

On this machine there is no CUDA device, so every CUDA-only section must say why it was skipped, and the
sections that mean something on a CPU (the estimator, the batching ceiling) must carry figures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
SECTIONS = (
    "memory_counters",
    "fragmentation",
    "estimator",
    "precision",
    "batching_ceiling",
    "vram_timeline",
    "generation",
)
CUDA_ONLY = ("memory_counters", "fragmentation", "precision", "vram_timeline")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the CPU-mode structure test applies to CPU machines")
    out = tmp_path_factory.mktemp("gpu_check")
    env = dict(os.environ, PY=sys.executable, OUT=str(out), AILAB_GPU_WHEELS=str(out / "no-wheels"))
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--quick", "--threads", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"gpu_check.sh exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    path = out / "gpu_check.json"
    assert path.is_file(), f"no {path}; stdout:\n{proc.stdout[-2000:]}"
    return json.loads(path.read_text()), proc.stdout


def test_hardware_is_named(cpu_run):
    result, _ = cpu_run
    hw = result["hardware"]
    assert hw["device"] == "cpu" and hw["cuda_available"] is False
    assert hw["device_name"] and hw["torch"] == torch.__version__
    assert "torch_cuda" in hw  # None on a CPU build; the CUDA version on the device machine
    assert result["quick"] is True and "error" not in result


def test_every_section_present_with_figures_or_a_reason(cpu_run):
    result, stdout = cpu_run
    assert set(result["sections"]) == set(SECTIONS)
    for name in SECTIONS:
        sec = result["sections"][name]
        assert "error" not in sec, f"{name} failed: {sec.get('error')}\n{sec.get('traceback', '')}"
        assert f"[{name}]" in stdout  # one summary line per section
    for name in CUDA_ONLY:
        why = result["sections"][name].get("skipped")
        assert isinstance(why, str) and "CUDA" in why and len(why) > 30, f"{name}: skipped without a reason"


def test_estimator_measured_on_cpu(cpu_run):
    est = cpu_run[0]["sections"]["estimator"]
    assert "skipped" not in est and est["device"] == "cpu"
    assert len(est["points"]) >= 2
    for p in est["points"]:
        assert p["measured_mib"] > 0 and p["predicted_mib"] > 0
        assert abs(p["rel_error"]) < 0.25  # the formula is exact on the CPU allocator; a loose bound here
    assert est["max_abs_rel_error"] == max(abs(p["rel_error"]) for p in est["points"])


def test_batching_ceiling_measured_on_cpu(cpu_run):
    bc = cpu_run[0]["sections"]["batching_ceiling"]
    assert "skipped" not in bc and bc["device"] == "cpu"
    assert [r["batch"] for r in bc["rows"]][0] == 1 and len(bc["rows"]) >= 2
    for r in bc["rows"]:
        assert r["batch_p50_ms"] > 0 and r["per_item_ms"] == pytest.approx(r["batch_p50_ms"] / r["batch"], rel=1e-2)
    assert bc["batching_ceiling"] > 0 and bc["at_batch"] == bc["rows"][-1]["batch"]


def test_generation_measured_on_cpu(cpu_run):
    # The section a CUDA machine reports issue 10's GPU view from, run here on the CPU: every figure present.
    gen = cpu_run[0]["sections"]["generation"]
    assert "skipped" not in gen and gen["device"] == "cpu"
    assert gen["cache"]["bytes_per_token"]["error_frac"] < 0.02
    assert all(abs(r["bytes"] - r["formula_bytes"]) <= 0.02 * r["formula_bytes"] for r in gen["cache"]["growth"])
    assert [r["batch"] for r in gen["step_cost"]][0] == 1 and all(r["step_ms"] > 0 for r in gen["step_cost"])
    assert {r["engine"] for r in gen["rows"]} == {"continuous", "static", "hf_generate_padded"}
    assert gen["continuous_over_static_tokens_per_s"] > 0 and gen["bound_if_steps_cost_the_same"] >= 1


def test_wheel_specs_are_pyproject_pins():
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--wheel-specs"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    pyproject = (REPO / "pyproject.toml").read_text()
    specs = dict(s.split("==") for s in out)
    assert "torch" not in specs  # the device machine's own torch is used, never installed
    for name in ("transformers", "tokenizers", "safetensors", "psutil", "numpy", "pyyaml"):
        assert re.search(rf'"{name}=={re.escape(specs[name])}"', pyproject, re.I), f"{name} not pinned as in pyproject"


def test_device_command_documented():
    head = SCRIPT.read_text().split("set -euo pipefail")[0]
    assert "bash scripts/gpu_check.sh" in head and '"build/gpu-wheels"' in head
