"""Checks for labs/1_hardware/lab_estimate_memory.ipynb: the learner writes the parameter,
activation and KV-cache estimators; each is compared with the formula and with a measurement."""
from __future__ import annotations

import torch

from ailab import memory
from ailab.labs.core import check, expect

LAB = "lab_estimate_memory"
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8)


def _mib(x: float) -> str:
    return f"{x / 2**20:.2f} MiB"


@check(LAB, "param_bytes")
def check_param_bytes(param_bytes, model: torch.nn.Module) -> None:
    """param_bytes(n_params, dtype) against the bytes torch itself reports for `model` cast to each dtype."""
    n = sum(p.numel() for p in model.parameters())
    for dtype in DTYPES:
        truth = sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()
        got = param_bytes(n, dtype)
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"param_bytes should return a number of bytes, got {type(got).__name__}")
        expect(got == truth, f"{n:,} parameters in {dtype} take {truth:,} bytes, your function says {got:,}. "
                             "Is the size per element right for this dtype (fp16 and bf16 are 2 bytes, int8 is 1)?")


@check(LAB, "activation_formula")
def check_activation_formula(activation_bytes) -> None:
    """Against the formula (3 hidden + 2 intermediate tensors, plus the boolean mask) at several shapes."""
    shape = memory.MINILM_SHAPE
    for batch, seq, dtype in [(1, 32, torch.float32), (8, 128, torch.float32), (4, 512, torch.float32),
                              (16, 64, torch.float16), (2, 512, torch.bfloat16)]:
        truth = memory.activation_bytes(batch, seq, shape, dtype)
        got = activation_bytes(batch, seq, shape.hidden, shape.intermediate, dtype)
        expect(got > 0, f"at batch {batch}, {seq} tokens your estimate is {got}: activations are not free")
        err = (got - truth) / truth
        expect(abs(err) <= 0.01,
               f"at batch {batch}, {seq} tokens, {dtype}: the formula gives {_mib(truth)}, yours {_mib(got)} "
               f"({err:+.1%}). Count 3 (B,T,H) and 2 (B,T,I) tensors in the model's dtype, plus a 1-byte "
               "(B,T,T) mask.")


@check(LAB, "activation_measured")
def check_activation_measured(activation_bytes, model: torch.nn.Module, shapes=((1, 32), (16, 64), (8, 256))) -> None:
    """Against the measured peak of real forwards of `model` (within 15 %)."""
    cfg = model.config
    dtype = next(model.parameters()).dtype
    for batch, seq in shapes:
        measured = memory.forward_peak(model, batch, seq)
        got = activation_bytes(batch, seq, cfg.hidden_size, cfg.intermediate_size, dtype)
        err = (got - measured) / measured
        expect(abs(err) <= 0.15,
               f"at batch {batch}, {seq} tokens the forward's measured peak is {_mib(measured)}, your estimate "
               f"{_mib(got)} ({err:+.0%}). " + ("Too low: which live tensors did you leave out?" if err < 0 else
                                                "Too high: in inference each layer's tensors are freed, so the "
                                                "peak does not multiply by the number of layers."))


@check(LAB, "kv_cache")
def check_kv_cache(kv_cache_bytes) -> None:
    """kv_cache_bytes(config, seq_len, batch, dtype) against real tensors and the published configs."""
    # a tiny cache you can hold: K and V, each (batch, kv_heads, seq, head_dim), per layer
    tiny = memory.DecoderConfig("tiny", 0.0, layers=3, heads=4, kv_heads=2, head_dim=16, max_context=64, source="test")
    kv = [torch.zeros(5, tiny.kv_heads, 40, tiny.head_dim, dtype=torch.float16) for _ in range(2 * tiny.layers)]
    real = sum(t.numel() * t.element_size() for t in kv)
    got = kv_cache_bytes(tiny, 40, 5, torch.float16)
    expect(got == real, f"a real fp16 cache for 3 layers x (K, V) x (5, 2, 40, 16) holds {real:,} bytes; yours says "
                        f"{got:,}. Did you count both K and V, and the KV heads (not the query heads)?")
    for name in ("Llama-2-7B", "Mistral-7B-v0.1"):
        cfg = memory.PUBLISHED_CONFIGS[name]
        for dtype in (torch.float16, torch.float32):
            truth = cfg.kv_bytes(2048, 8, dtype)
            got = kv_cache_bytes(cfg, 2048, 8, dtype)
            expect(got == truth, f"{name} at 2,048 tokens x batch 8 in {dtype}: expected {truth / 2**30:.2f} GiB, "
                                 f"got {got / 2**30:.2f} GiB" + (" (Mistral uses grouped-query attention: "
                                                                 "8 KV heads)" if "Mistral" in name else ""))


def activation_error_table(activation_bytes, model: torch.nn.Module, shapes=((1, 32), (8, 64), (16, 128))) -> list[dict]:
    """A small table for the notebook: estimate vs measured at a few shapes."""
    cfg, dtype = model.config, next(model.parameters()).dtype
    rows = []
    for b, t in shapes:
        measured = memory.forward_peak(model, b, t)
        est = activation_bytes(b, t, cfg.hidden_size, cfg.intermediate_size, dtype)
        rows.append({"batch": b, "seq_len": t, "estimate_mib": round(est / 2**20, 2),
                     "measured_mib": round(measured / 2**20, 2), "error": f"{(est - measured) / measured:+.1%}"})
    return rows
