"""Which device and dtype to use, what the hardware is, and how to time it honestly.

Everything else in ailab asks this module instead of probing torch itself, so the
cuda -> mps -> cpu fallback lives in exactly one line (`pick_device`).
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field

import psutil
import torch

REQUIRE_GPU_ENV = "AILAB_REQUIRE_GPU"  # set to 1 by `make test-gpu`


class NoGPUError(RuntimeError):
    """Raised when a GPU run was asked for (AILAB_REQUIRE_GPU=1) but none is visible."""


def pick_device(prefer: str | None = None) -> torch.device:
    """cuda -> mps -> cpu, unless `prefer` names one explicitly."""
    if prefer is not None:
        dev = torch.device(prefer)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={prefer!r} was asked for, but torch sees no CUDA device here")
        if dev.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device={prefer!r} was asked for, but MPS is not available here")
        return dev
    return torch.device("cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu")


def bf16_supported(device: torch.device | str | None = None) -> bool:
    """True when bfloat16 matmuls run natively (not emulated) on `device`."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if dev.type == "cpu":
        # AVX512-BF16 / AMX make bf16 fast on CPU; without them torch still computes
        # bf16 correctly, just slowly. The course reports which case applies.
        return torch.backends.mkldnn.is_available() and _cpu_has_flag("avx512_bf16", "amx_bf16")
    return dev.type == "mps"


def fp16_supported(device: torch.device | str | None = None) -> bool:
    """True when fp16 is a speed win on `device` (tensor cores on CUDA; on CPU it is not)."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda":
        major, _ = torch.cuda.get_device_capability(dev)
        return major >= 7
    if dev.type == "cpu":
        return _cpu_has_flag("avx512_fp16", "amx_fp16")
    return dev.type == "mps"


def pick_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """The fastest dtype that keeps accuracy on `device`: bf16 > fp16 on GPU, fp32 on CPU."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cpu":
        return torch.float32
    if bf16_supported(dev):
        return torch.bfloat16
    return torch.float16 if fp16_supported(dev) else torch.float32


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work, so a timer stopped after this measures the work itself."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def gpu_requested() -> bool:
    return os.environ.get(REQUIRE_GPU_ENV, "").strip().lower() in {"1", "true", "yes"}


def require_gpu() -> None:
    """Fail loudly in a GPU run (AILAB_REQUIRE_GPU=1) when no CUDA device is visible.

    Outside a GPU run this does nothing, so notebooks can call it unconditionally.
    """
    if gpu_requested() and not torch.cuda.is_available():
        raise NoGPUError(
            f"{REQUIRE_GPU_ENV}=1 (make test-gpu) but torch sees no CUDA device. "
            "Check `nvidia-smi`, that the torch build is a CUDA one "
            f"(torch.version.cuda={torch.version.cuda!r}), and CUDA_VISIBLE_DEVICES."
        )


def scale(cpu: int = 1, gpu: int = 8) -> int:
    """The one knob notebooks use to size their problem: small on CPU, larger on a GPU."""
    return gpu if pick_device().type == "cuda" else cpu


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_has_flag(*names: str) -> bool:
    flags = _cpu_flags()
    return any(n in flags for n in names)


def cpu_int8_dot_product() -> bool:
    """Whether this x86 CPU has the INT8 dot-product instructions (AVX-512 VNNI or AVX-VNNI). Without them, ONNX
    Runtime's INT8 matrix product sums pairs of u8 x s8 products in 16 bits, which can saturate; its advice is
    7-bit weights there (reduce_range)."""
    return _cpu_has_flag("avx512_vnni", "avx_vnni", "amx_int8")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class Hardware:
    device: str
    cpu_model: str
    cpu_cores_logical: int
    cpu_cores_usable: int
    ram_gib: float
    torch_threads: int
    torch_version: str
    gpu_name: str | None = None
    gpu_memory_gib: float | None = None
    gpu_compute_capability: str | None = None
    bf16_fast: bool = False
    fp16_fast: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def one_line(self) -> str:
        """A label for figures and tables: every measurement names what it ran on."""
        cpu = f"{self.cpu_model}, {self.cpu_cores_usable} cores, {self.ram_gib:.0f} GiB"
        if self.gpu_name:
            return f"{self.gpu_name} ({self.gpu_memory_gib:.0f} GiB, sm {self.gpu_compute_capability}) + {cpu}"
        return f"CPU only: {cpu}, torch threads={self.torch_threads}"


def describe_hardware() -> Hardware:
    dev = pick_device()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    hw = Hardware(
        device=dev.type,
        cpu_model=_cpu_model(),
        cpu_cores_logical=os.cpu_count() or 1,
        cpu_cores_usable=usable,
        ram_gib=psutil.virtual_memory().total / 2**30,
        torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        bf16_fast=bf16_supported(dev),
        fp16_fast=fp16_supported(dev),
    )
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        hw.gpu_name = props.name
        hw.gpu_memory_gib = props.total_memory / 2**30
        hw.gpu_compute_capability = f"{props.major}.{props.minor}"
    else:
        hw.notes.append("no CUDA device: GPU-only effects (VRAM, fp16/bf16 tensor cores) are described, not measured")
    return hw
