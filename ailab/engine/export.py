"""export_onnx(): dynamic batch and sequence axes, then a parity check against PyTorch (topic E2)."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ailab.engine.runners import OnnxRunner
from ailab.scratch import scratch_dir


class ExportParityError(AssertionError):
    """ONNX Runtime's outputs differ from PyTorch's by more than the tolerance."""


@dataclass
class ExportResult:
    path: Path
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict
    max_abs_diff: float  # worst |onnx - torch| over all parity checks
    tolerance: float
    parity_shapes: list[dict]  # the input shapes the parity check ran at
    export_seconds: float
    size_bytes: int

    def __str__(self) -> str:
        return (
            f"{self.path.name}: {self.size_bytes / 2**20:.1f} MiB, inputs {self.input_names} "
            f"dynamic {self.dynamic_axes}, max |onnx - torch| = {self.max_abs_diff:.2e} "
            f"(tolerance {self.tolerance:.0e}) at shapes {self.parity_shapes}"
        )


def _forward_params(model: nn.Module) -> list[str]:
    return [
        p.name
        for p in inspect.signature(model.forward).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)
    ]


def default_dynamic_axes(sample: Mapping[str, torch.Tensor]) -> dict[str, dict[int, str]]:
    """Axis 0 of every input is 'batch'; axis 1 of a 2-D integer input (token ids, masks) is 'seq'."""
    axes = {}
    for name, t in sample.items():
        axes[name] = {0: "batch"}
        if t.ndim == 2 and not t.is_floating_point():
            axes[name][1] = "seq"
    return axes


def resized_sample(sample: Mapping[str, torch.Tensor], dynamic_axes) -> dict[str, torch.Tensor]:
    """The sample with every dynamic axis one longer ('batch': a row repeated) or one shorter ('seq')."""
    out = {}
    for name, t in sample.items():
        for axis, label in dynamic_axes.get(name, {}).items():
            if label == "batch" or axis == 0:
                t = torch.cat([t, t.narrow(axis, 0, 1)], dim=axis)
            elif t.shape[axis] > 1:
                t = t.narrow(axis, 0, t.shape[axis] - 1)
        out[name] = t
    return out


@contextlib.contextmanager
def quiet_logger(name: str):
    """Silence one logger's advice and progress lines for the duration of a call (name "" is the root
    logger), restoring its level afterwards so the caller's logging is untouched."""
    import logging

    logger = logging.getLogger(name)
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def _drop_value_info(path: Path) -> None:
    """Remove the exporter's intermediate shape annotations. Some disagree with ONNX shape inference
    (a dynamic axis recorded at the sample's size), which later breaks onnxruntime.quantization."""
    import onnx

    model = onnx.load(str(path))
    if len(model.graph.value_info):
        del model.graph.value_info[:]
        onnx.save(model, str(path))


def export_onnx(
    model: nn.Module,
    sample,
    path: str | os.PathLike | None = None,
    output_names: Sequence[str] = ("output",),
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
    tolerance: float = 1e-4,
    opset: int | None = None,
) -> ExportResult:
    """Export `model` to a single .onnx file with dynamic axes, then check ONNX Runtime against PyTorch.

    sample: a dict of input name -> tensor (names = forward()'s parameters) or one tensor. Its batch
    (and sequence) size must be at least 2: torch.export specialises a size-1 axis to a constant.
    The parity check runs at the sample's shape and at a resized one (a dynamic axis that was
    silently fixed fails there), and raises ExportParityError when max |onnx - torch| > tolerance.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"export_onnx() exports a torch.nn.Module, got {type(model).__name__}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    params = _forward_params(model)
    if isinstance(sample, torch.Tensor):
        sample = {params[0]: sample} if params else {"input": sample}
    if not isinstance(sample, Mapping) or not sample:
        raise TypeError(
            f"sample must be a tensor or a non-empty dict of input name -> tensor (this model's forward takes {params})"
        )
    if any(not isinstance(v, torch.Tensor) for v in sample.values()):
        raise TypeError(f"every sample value must be a torch.Tensor; got {[type(v).__name__ for v in sample.values()]}")
    if sorted(sample) != sorted(params):
        raise ValueError(f"sample has inputs {sorted(sample)} but {type(model).__name__}.forward takes {params}")
    sample = {n: sample[n].detach().cpu() for n in params}  # forward()'s order = the ONNX input order
    dynamic_axes = {
        n: dict(a) for n, a in (dynamic_axes if dynamic_axes is not None else default_dynamic_axes(sample)).items()
    }
    for name, axes in dynamic_axes.items():
        if name not in sample:
            raise ValueError(f"dynamic_axes names {name!r}, which is not an input; inputs are {params}")
        for axis in axes:
            if not 0 <= axis < sample[name].ndim:
                raise ValueError(f"dynamic_axes[{name!r}] has axis {axis}, but {name!r} has {sample[name].ndim} axes")
            if sample[name].shape[axis] < 2:
                raise ValueError(
                    f"sample {name!r} has size {sample[name].shape[axis]} on dynamic axis {axis}; use at "
                    "least 2 (torch.export fixes a size-1 axis to the constant 1)"
                )
    model = model.cpu().eval()
    try:
        with torch.no_grad():
            expected = model(**sample)
    except Exception as e:  # we rephrase whatever the model raised
        shapes = {n: f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for n, t in sample.items()}
        raise ValueError(
            f"the sample does not fit the model: {type(model).__name__}.forward({', '.join(params)}) "
            f"raised {type(e).__name__}: {e} on sample {shapes}"
        ) from e
    n_out = len(expected) if isinstance(expected, (tuple, list)) else 1
    if len(output_names) != n_out:
        raise ValueError(
            f"the model returns {n_out} output(s) but output_names has {len(output_names)}: {list(output_names)}"
        )
    if path is None:
        path = scratch_dir("ailab-onnx-") / f"{type(model).__name__.lower()}.onnx"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dims = {label: torch.export.Dim(label) for axes in dynamic_axes.values() for label in axes.values()}
    shapes = tuple({a: dims[label] for a, label in dynamic_axes.get(n, {}).items()} or None for n in params)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), quiet_logger("torch.onnx"):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                tuple(sample.values()),
                str(path),
                dynamo=True,
                input_names=params,
                output_names=list(output_names),
                dynamic_shapes=shapes,
                opset_version=opset,
                external_data=False,
                verbose=False,
            )  # one file: no .onnx.data beside it
    except Exception as e:
        raise RuntimeError(
            f"torch.onnx.export failed for {type(model).__name__}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}"
        ) from e
    seconds = time.perf_counter() - t0
    _drop_value_info(path)
    runner = OnnxRunner(path, threads=None)
    worst, shapes_checked = 0.0, []
    for s in (sample, resized_sample(sample, dynamic_axes)):
        with torch.no_grad():
            ref = model(**s)
        ref = [r.numpy() for r in (ref if isinstance(ref, (tuple, list)) else [ref])]
        got = runner.run_all({n: t.numpy() for n, t in s.items()})
        for name, r, g in zip(output_names, ref, got):
            if r.shape != g.shape:
                raise ExportParityError(
                    f"output {name!r}: ONNX shape {g.shape} != PyTorch shape {r.shape} "
                    f"at inputs { ({n: list(t.shape) for n, t in s.items()}) }"
                )
            worst = max(worst, float(np.abs(r.astype(np.float64) - g.astype(np.float64)).max()) if r.size else 0.0)
        shapes_checked.append({n: list(t.shape) for n, t in s.items()})
    if not worst <= tolerance:
        raise ExportParityError(f"ONNX Runtime differs from PyTorch by up to {worst:.3e} > tolerance {tolerance:.0e}")
    return ExportResult(
        path, params, list(output_names), dynamic_axes, worst, tolerance, shapes_checked, seconds, runner.size_bytes
    )
