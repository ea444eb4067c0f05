"""The GPU suite's shared context and its memory sections (`ailab bench gpu`, ailab/suites/gpu.py runs them).

Ctx holds what the sections share: the device, quick mode, and a random-init encoder of all-MiniLM-L6-v2's shape.
Each section takes it and returns figures or {"skipped": "<why>"}:

  memory_counters   CUDA allocated vs reserved vs peak per phase, through ailab.memory.MemoryTracker
  fragmentation     ailab.memory.fragmentation.run_probe without / with expandable_segments (a child each)
  estimator         ailab.memory.estimate's activation formula vs the measured peak, several (batch, seq) points
  vram_timeline     the tracker's background timeline of CUDA allocated / reserved over a few phases

The speed sections (precision, batching ceiling, generation) are in _gpu_speed.py.
"""

from __future__ import annotations

import json
import subprocess
import time

MiB = 2**20


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


def mib(x) -> float | None:
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
        "weights_allocated_mib": mib(weights),
        "weights_param_bytes_mib": mib(weights_param_bytes),
        "forward_peak_above_weights_mib": mib(fwd_peak_over),
        "forward_output_kept_mib": mib(c[1]["cuda_allocated"] - c[0]["cuda_allocated"]),
        "cache_held_after_free_mib": mib(c[2]["cuda_reserved"] - c[2]["cuda_allocated"]),
        "released_by_empty_cache_mib": mib(c[2]["cuda_reserved"] - c[3]["cuda_reserved"]),
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
                    "predicted_mib": mib(r["predicted_bytes"]),
                    "measured_mib": mib(r["measured_bytes"]),
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
                "max_allocated_mib": mib(max((s["cuda_allocated"] for s in inside), default=None)),
                "max_reserved_mib": mib(max((s["cuda_reserved"] for s in inside), default=None)),
            }
        )
    step = max(1, len(samples) // 150)
    timeline = [
        {
            "t": round(s["t"], 4),
            "allocated_mib": mib(s["cuda_allocated"]),
            "reserved_mib": mib(s["cuda_reserved"]),
            "nvml_used_mib": mib(s.get("nvml_used")),
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
