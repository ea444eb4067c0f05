"""fp16/bf16 as torch casts, checked per device: can this device run a precision, and is it a win here?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from ailab.device import bf16_supported, fp16_supported, pick_device
from ailab.engine import InputSpec, OnnxRunner, Runner, TorchRunner
from ailab.memory.estimate import param_bytes


@dataclass
class PrecisionSupport:
    precision: str
    device: str
    supported: bool  # torch computes it correctly here
    fast: bool  # ... and faster than fp32 (tensor cores, AVX512-BF16/AMX)
    note: str


def precision_support(precision: str, device: str | torch.device | None = None) -> PrecisionSupport:
    """Can `device` run `precision`, and is it a speed win there?"""
    dev = torch.device(device) if device is not None else pick_device()
    if precision == "fp32":
        return PrecisionSupport("fp32", dev.type, True, True, "the baseline")
    if precision == "bf16":
        fast = bf16_supported(dev)
        note = (
            "native bf16 units"
            if fast
            else "computed correctly but emulated: expect it slower than fp32 on this CPU"
            if dev.type == "cpu"
            else "this GPU has no bf16 support"
        )
        return PrecisionSupport("bf16", dev.type, dev.type == "cpu" or fast, fast, note)
    if precision == "fp16":
        fast = fp16_supported(dev)
        note = (
            "tensor cores / native fp16"
            if fast
            else "computed correctly but slowly on CPU; on a GPU with tensor cores fp16 roughly halves memory "
            "traffic and speeds up matmuls"
            if dev.type == "cpu"
            else "no fast fp16 on this GPU"
        )
        return PrecisionSupport("fp16", dev.type, True, fast, note)
    if precision == "int8":
        return PrecisionSupport(
            "int8",
            dev.type,
            True,
            dev.type == "cpu",
            "through ONNX Runtime (quantize_dynamic_int8 / quantize_static_int8)",
        )
    raise ValueError(f"unknown precision {precision!r}; choose fp32, fp16, bf16 or int8")


def cast_runner(
    model: nn.Module,
    precision: str,
    device: str | torch.device | None = None,
    input_spec: Sequence[InputSpec] | None = None,
    name: str | None = None,
) -> TorchRunner:
    """A TorchRunner with the model's weights cast to fp16/bf16 (or kept fp32), after a support check."""
    support = precision_support(precision, device)
    if precision == "int8":
        raise ValueError("INT8 is not a torch cast here: export to ONNX and use quantize_dynamic_int8()")
    if not support.supported:
        raise ValueError(f"{precision} is not supported on {support.device}: {support.note}")
    return TorchRunner(model, input_spec, name=name, device=device, precision=precision)


def model_size_bytes(runner: Runner) -> int:
    """Bytes of the model on disk (ONNX) or of its parameters and buffers (torch)."""
    if isinstance(runner, OnnxRunner):
        return runner.size_bytes
    if isinstance(runner, TorchRunner):
        return param_bytes(runner.model)
    raise TypeError(f"cannot size a {type(runner).__name__}")
