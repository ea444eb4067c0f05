"""One Runner interface over PyTorch eager and ONNX Runtime.

    runner.run({"input_ids": ids, "attention_mask": mask}) -> np.ndarray   # the first output
    runner.name, runner.device, runner.precision, runner.input_spec

Both runners check a batch against the input signature *before* running it, so a wrong dtype or
shape is a ValueError/TypeError that names the expected signature, never a stack trace from
inside onnxruntime (topic E1).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ailab.device import pick_device, sync


# onnxruntime's type strings -> numpy dtypes (the ones a learner meets here).
_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}
_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_QUANT_OPS = {
    "MatMulInteger",
    "QAttention",
    "DynamicQuantizeLinear",
    "QLinearMatMul",
    "QuantizeLinear",
    "DequantizeLinear",
    "ConvInteger",
    "QLinearConv",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
}


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, numpy dtype, shape (an int is fixed, a str is a dynamic axis)."""

    name: str
    dtype: np.dtype
    shape: tuple

    def __str__(self) -> str:
        return f"{self.name}: {np.dtype(self.dtype).name}[{', '.join(str(d) for d in self.shape)}]"


def describe_spec(spec: Sequence[InputSpec]) -> str:
    return ", ".join(str(s) for s in spec) if spec else "(no inputs)"


def _as_numpy(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"input {name!r} is a {type(value).__name__}; pass a numpy array or a torch tensor")


def _shapes(batch) -> dict:
    return {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in batch.items() if hasattr(v, "shape")}


def check_batch(batch, spec: Sequence[InputSpec], runner: str = "runner") -> None:
    """Raise a clear TypeError/ValueError when `batch` does not fit `spec` (names, dtypes, ranks, fixed dims)."""
    expected = f"{runner} expects {describe_spec(spec)}"
    if not isinstance(batch, Mapping):
        raise TypeError(f"run() takes a dict of input name -> array, got {type(batch).__name__}; {expected}")
    names = [s.name for s in spec]
    missing, extra = [n for n in names if n not in batch], [n for n in batch if n not in names]
    if missing or extra:
        raise ValueError(f"batch has inputs {sorted(batch)}, missing {missing}, unexpected {extra}; {expected}")
    sizes: dict[str, tuple[int, str]] = {}  # dynamic axis name -> (size, first input that set it)
    for s in spec:
        value = batch[s.name]
        if not isinstance(value, (np.ndarray, torch.Tensor)):
            raise TypeError(f"input {s.name!r} is a {type(value).__name__}, not an array; {expected}")
        dtype = np.dtype(str(value.dtype).replace("torch.", "")) if isinstance(value, torch.Tensor) else value.dtype
        if dtype != np.dtype(s.dtype):
            raise TypeError(
                f"input {s.name!r} has dtype {dtype.name} but {np.dtype(s.dtype).name} is expected "
                f"(cast it, e.g. .astype(np.{np.dtype(s.dtype).name})); {expected}"
            )
        shape = tuple(value.shape)
        if len(shape) != len(s.shape):
            raise ValueError(
                f"input {s.name!r} has shape {shape} ({len(shape)} axes) but {len(s.shape)} axes "
                f"are expected; {expected}"
            )
        for axis, (got, want) in enumerate(zip(shape, s.shape)):
            if isinstance(want, int) and want >= 0 and got != want:
                raise ValueError(
                    f"input {s.name!r} axis {axis} is {got} but the model was exported with a fixed "
                    f"size {want} there; {expected}"
                )
            if isinstance(want, str) and want:
                seen = sizes.setdefault(want, (got, s.name))
                if seen[0] != got:
                    raise ValueError(
                        f"axis {want!r} is {seen[0]} in {seen[1]!r} but {got} in {s.name!r}; "
                        f"inputs sharing an axis must agree; {expected}"
                    )
        if shape and shape[0] == 0:
            raise ValueError(f"input {s.name!r} is an empty batch (0 rows); send at least one row")


def spec_from_sample(
    sample: Mapping[str, torch.Tensor], dynamic_axes: Mapping[str, Mapping[int, str]]
) -> list[InputSpec]:
    out = []
    for name, t in sample.items():
        dyn = dynamic_axes.get(name, {})
        shape = tuple(dyn.get(a, int(d)) for a, d in enumerate(t.shape))
        out.append(InputSpec(name, np.dtype(str(t.dtype).replace("torch.", "")), shape))
    return out


class Runner:
    """The interface: run(batch) -> first output as a float/int numpy array. Subclasses set the attributes."""

    name: str = "runner"
    device: str = "cpu"
    precision: str = "fp32"
    input_spec: list[InputSpec]

    def run(self, batch: Mapping[str, np.ndarray | torch.Tensor]) -> np.ndarray:
        return self.run_all(batch)[0]

    def run_all(self, batch) -> list[np.ndarray]:
        raise NotImplementedError

    __call__ = run

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, device={self.device!r}, precision={self.precision!r}, "
            f"inputs=[{describe_spec(self.input_spec)}])"
        )


class TorchRunner(Runner):
    """PyTorch eager: eval mode (dropout off), inference mode (no autograd graph), optional fp16/bf16 cast.

    The model is put in eval mode and moved to `device` in place; an fp16/bf16 runner casts a copy.
    Floating-point inputs are cast to the runner's precision inside; outputs come back as float32 numpy.
    """

    def __init__(
        self,
        model: nn.Module,
        input_spec: Sequence[InputSpec] | None = None,
        name: str | None = None,
        device: str | torch.device | None = None,
        precision: str = "fp32",
    ):
        if not isinstance(model, nn.Module):
            raise TypeError(f"TorchRunner wraps a torch.nn.Module, got {type(model).__name__}")
        if precision not in _TORCH_DTYPES:
            raise ValueError(
                f"precision={precision!r}; TorchRunner supports {sorted(_TORCH_DTYPES)} "
                "(INT8 goes through ONNX Runtime: ailab.quantize)"
            )
        dev = torch.device(device) if device is not None else pick_device()
        self.dtype = _TORCH_DTYPES[precision]
        if self.dtype != torch.float32:  # cast a copy: the caller's fp32 model (maybe shared) stays fp32
            import copy

            model = copy.deepcopy(model).to(self.dtype)
        self.model = model.eval().to(dev)  # eval(): dropout off, batch-norm uses running stats (E8)
        self.name = name or f"torch-{type(model).__name__}-{precision}"
        self.device, self.precision = dev.type, precision
        self._device = dev
        if input_spec is None:  # names from forward(); dtypes and shapes unchecked
            params = [
                p
                for p in inspect.signature(model.forward).parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)
            ]
            self.input_spec, self._check = [InputSpec(p.name, np.dtype("float32"), ()) for p in params], False
        else:
            self.input_spec, self._check = list(input_spec), True

    def _to_tensor(self, value, name: str) -> torch.Tensor:
        t = torch.from_numpy(value) if isinstance(value, np.ndarray) else value
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"input {name!r} is a {type(value).__name__}; pass a numpy array or a torch tensor")
        t = t.to(self._device)
        return t.to(self.dtype) if t.is_floating_point() else t

    @torch.inference_mode()
    def run_all(self, batch) -> list[np.ndarray]:
        if self._check:
            check_batch(batch, self.input_spec, self.name)
        elif not isinstance(batch, Mapping):
            raise TypeError(
                f"run() takes a dict of input name -> array; {self.name} expects inputs "
                f"{[s.name for s in self.input_spec]}"
            )
        names = [s.name for s in self.input_spec]
        if not self._check and sorted(batch) != sorted(names):
            raise ValueError(f"batch has inputs {sorted(batch)} but {self.name} expects {names}")
        try:
            out = self.model(**{n: self._to_tensor(batch[n], n) for n in names})
        except (RuntimeError, TypeError, IndexError, ValueError) as e:  # a shape torch could not use
            raise ValueError(
                f"{self.name} could not run inputs {_shapes(batch)}: {str(e).splitlines()[0][:300]}; "
                f"it expects {describe_spec(self.input_spec) if self._check else names}"
            ) from e
        sync(self._device)
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [o.float().cpu().numpy() if o.is_floating_point() else o.cpu().numpy() for o in outs]


def onnx_precision(path: str | os.PathLike) -> str:
    """'int8' when the graph holds quantized ops, 'fp16' when its weights are half, else 'fp32'."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    if any(n.op_type in _QUANT_OPS for n in model.graph.node):
        return "int8"
    if any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer):
        return "fp16"
    return "fp32"


class OnnxRunner(Runner):
    """An ONNX Runtime session with explicit providers. `provider` is the one the session actually
    uses (session.get_providers()[0]): asking for CUDA on a machine without it silently falls back
    to CPU, and a report that printed the *requested* provider would lie."""

    def __init__(
        self,
        path: str | os.PathLike,
        providers: Sequence[str] | None = None,
        threads: int | None = None,
        name: str | None = None,
        precision: str | None = None,
    ):
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX model at {path}; export one with ailab.engine.export_onnx()")
        providers = list(providers) if providers is not None else ["CPUExecutionProvider"]
        unknown = [p for p in providers if p not in ort.get_all_providers()]
        if unknown:
            raise ValueError(
                f"unknown ONNX Runtime provider(s) {unknown}; this build has {ort.get_available_providers()}"
            )
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 (or None for ONNX Runtime's default), got {threads}")
        opts = ort.SessionOptions()
        if threads is not None:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # errors only: the fallback warnings are reported via `provider`
        # ORT's worker threads busy-wait after each run by default. On a 2-core machine that steals the
        # cores from whatever runs next (a torch model in the same benchmark, the server's event loop),
        # so a comparison would measure the spinning, not the engines.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=providers)
        self.path, self.threads = path, threads
        self.providers = self.session.get_providers()  # what is in use, not what was asked for
        self.provider = self.providers[0]
        self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        self.precision = precision or onnx_precision(path)
        self.name = name or f"onnx-{path.stem}-{self.precision}"
        self.input_spec = [
            InputSpec(
                i.name,
                np.dtype(_ORT_DTYPES.get(i.type, np.float32)),
                tuple(d if isinstance(d, int) else (d or f"dim{a}") for a, d in enumerate(i.shape)),
            )
            for i in self.session.get_inputs()
        ]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run_all(self, batch) -> list[np.ndarray]:
        check_batch(batch, self.input_spec, self.name)
        feed = {s.name: np.ascontiguousarray(_as_numpy(batch[s.name], s.name)) for s in self.input_spec}
        try:
            return self.session.run(None, feed)
        except Exception as e:  # onnxruntime's own exception types; say it in words
            raise ValueError(
                f"{self.name} could not run inputs {_shapes(batch)}: {str(e).splitlines()[0][:300]}; "
                f"it expects {describe_spec(self.input_spec)}"
            ) from e

    @property
    def size_bytes(self) -> int:
        data = self.path.with_name(self.path.name + ".data")
        return self.path.stat().st_size + (data.stat().st_size if data.exists() else 0)
