"""One Runner interface over PyTorch eager and ONNX Runtime, ONNX export with a parity check,
and per-stage timing of a text classifier (tokenize / forward / post-process).

    runner.run({"input_ids": ids, "attention_mask": mask}) -> np.ndarray   # the first output
    runner.name, runner.device, runner.precision, runner.input_spec

Both runners check a batch against the input signature *before* running it, so a wrong dtype or
shape is a ValueError/TypeError that names the expected signature, never a stack trace from
inside onnxruntime (topics E1, E2, E5).
"""
from __future__ import annotations

import contextlib
import inspect
import io
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from ailab.device import pick_device, sync
from ailab.timing import LatencyStats, latency_stats

# onnxruntime's type strings -> numpy dtypes (the ones a learner meets here).
_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
               "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
               "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_QUANT_OPS = {"MatMulInteger", "DynamicQuantizeLinear", "QLinearMatMul", "QuantizeLinear", "DequantizeLinear",
              "ConvInteger", "QLinearConv", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}


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
            raise TypeError(f"input {s.name!r} has dtype {dtype.name} but {np.dtype(s.dtype).name} is expected "
                            f"(cast it, e.g. .astype(np.{np.dtype(s.dtype).name})); {expected}")
        shape = tuple(value.shape)
        if len(shape) != len(s.shape):
            raise ValueError(f"input {s.name!r} has shape {shape} ({len(shape)} axes) but {len(s.shape)} axes "
                             f"are expected; {expected}")
        for axis, (got, want) in enumerate(zip(shape, s.shape)):
            if isinstance(want, int) and want >= 0 and got != want:
                raise ValueError(f"input {s.name!r} axis {axis} is {got} but the model was exported with a fixed "
                                 f"size {want} there; {expected}")
            if isinstance(want, str) and want:
                seen = sizes.setdefault(want, (got, s.name))
                if seen[0] != got:
                    raise ValueError(f"axis {want!r} is {seen[0]} in {seen[1]!r} but {got} in {s.name!r}; "
                                     f"inputs sharing an axis must agree; {expected}")
        if shape and shape[0] == 0:
            raise ValueError(f"input {s.name!r} is an empty batch (0 rows); send at least one row")


def spec_from_sample(sample: Mapping[str, torch.Tensor], dynamic_axes: Mapping[str, Mapping[int, str]]) -> list[InputSpec]:
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
        return (f"{type(self).__name__}(name={self.name!r}, device={self.device!r}, precision={self.precision!r}, "
                f"inputs=[{describe_spec(self.input_spec)}])")


class TorchRunner(Runner):
    """PyTorch eager: eval mode (dropout off), inference mode (no autograd graph), optional fp16/bf16 cast.

    The model is put in eval mode and moved to `device` in place; an fp16/bf16 runner casts a copy.
    Floating-point inputs are cast to the runner's precision inside; outputs come back as float32 numpy.
    """

    def __init__(self, model: nn.Module, input_spec: Sequence[InputSpec] | None = None, name: str | None = None,
                 device: str | torch.device | None = None, precision: str = "fp32"):
        if not isinstance(model, nn.Module):
            raise TypeError(f"TorchRunner wraps a torch.nn.Module, got {type(model).__name__}")
        if precision not in _TORCH_DTYPES:
            raise ValueError(f"precision={precision!r}; TorchRunner supports {sorted(_TORCH_DTYPES)} "
                             "(INT8 goes through ONNX Runtime: ailab.quantize)")
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
            params = [p for p in inspect.signature(model.forward).parameters.values()
                      if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)]
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
            raise TypeError(f"run() takes a dict of input name -> array; {self.name} expects inputs "
                            f"{[s.name for s in self.input_spec]}")
        names = [s.name for s in self.input_spec]
        if not self._check and sorted(batch) != sorted(names):
            raise ValueError(f"batch has inputs {sorted(batch)} but {self.name} expects {names}")
        try:
            out = self.model(**{n: self._to_tensor(batch[n], n) for n in names})
        except (RuntimeError, TypeError, IndexError, ValueError) as e:  # a shape torch could not use
            raise ValueError(f"{self.name} could not run inputs {_shapes(batch)}: {str(e).splitlines()[0][:300]}; "
                             f"it expects {describe_spec(self.input_spec) if self._check else names}") from e
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

    def __init__(self, path: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None,
                 name: str | None = None, precision: str | None = None):
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX model at {path}; export one with ailab.engine.export_onnx()")
        providers = list(providers) if providers is not None else ["CPUExecutionProvider"]
        unknown = [p for p in providers if p not in ort.get_all_providers()]
        if unknown:
            raise ValueError(f"unknown ONNX Runtime provider(s) {unknown}; this build has {ort.get_available_providers()}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 (or None for ONNX Runtime's default), got {threads}")
        opts = ort.SessionOptions()
        if threads is not None:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # errors only: the fallback warnings are reported via `provider`
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=providers)
        self.path, self.threads = path, threads
        self.providers = self.session.get_providers()  # what is in use, not what was asked for
        self.provider = self.providers[0]
        self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        self.precision = precision or onnx_precision(path)
        self.name = name or f"onnx-{path.stem}-{self.precision}"
        self.input_spec = [InputSpec(i.name, np.dtype(_ORT_DTYPES.get(i.type, np.float32)),
                                     tuple(d if isinstance(d, int) else (d or f"dim{a}") for a, d in enumerate(i.shape)))
                           for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run_all(self, batch) -> list[np.ndarray]:
        check_batch(batch, self.input_spec, self.name)
        feed = {s.name: np.ascontiguousarray(_as_numpy(batch[s.name], s.name)) for s in self.input_spec}
        try:
            return self.session.run(None, feed)
        except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types; say it in words
            raise ValueError(f"{self.name} could not run inputs {_shapes(batch)}: {str(e).splitlines()[0][:300]}; "
                             f"it expects {describe_spec(self.input_spec)}") from e

    @property
    def size_bytes(self) -> int:
        data = self.path.with_name(self.path.name + ".data")
        return self.path.stat().st_size + (data.stat().st_size if data.exists() else 0)


# ----------------------------------------------------------------------------- export


class ExportParityError(AssertionError):
    """ONNX Runtime's outputs differ from PyTorch's by more than the tolerance."""


@dataclass
class ExportResult:
    path: Path
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict
    max_abs_diff: float            # worst |onnx - torch| over all parity checks
    tolerance: float
    parity_shapes: list[dict]      # the input shapes the parity check ran at
    export_seconds: float
    size_bytes: int

    def __str__(self) -> str:
        return (f"{self.path.name}: {self.size_bytes / 2**20:.1f} MiB, inputs {self.input_names} "
                f"dynamic {self.dynamic_axes}, max |onnx - torch| = {self.max_abs_diff:.2e} "
                f"(tolerance {self.tolerance:.0e}) at shapes {self.parity_shapes}")


def _forward_params(model: nn.Module) -> list[str]:
    return [p.name for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)]


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
def _quiet_logger(name: str):
    """Silence a library's progress/warning log lines (e.g. 'torchvision is not installed') for a moment."""
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


def export_onnx(model: nn.Module, sample, path: str | os.PathLike | None = None,
                output_names: Sequence[str] = ("output",), dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
                tolerance: float = 1e-4, opset: int | None = None) -> ExportResult:
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
        raise TypeError("sample must be a tensor or a non-empty dict of input name -> tensor "
                        f"(this model's forward takes {params})")
    if any(not isinstance(v, torch.Tensor) for v in sample.values()):
        raise TypeError(f"every sample value must be a torch.Tensor; got {[type(v).__name__ for v in sample.values()]}")
    if sorted(sample) != sorted(params):
        raise ValueError(f"sample has inputs {sorted(sample)} but {type(model).__name__}.forward takes {params}")
    sample = {n: sample[n].detach().cpu() for n in params}  # forward()'s order = the ONNX input order
    dynamic_axes = {n: dict(a) for n, a in (dynamic_axes if dynamic_axes is not None else default_dynamic_axes(sample)).items()}
    for name, axes in dynamic_axes.items():
        if name not in sample:
            raise ValueError(f"dynamic_axes names {name!r}, which is not an input; inputs are {params}")
        for axis in axes:
            if not 0 <= axis < sample[name].ndim:
                raise ValueError(f"dynamic_axes[{name!r}] has axis {axis}, but {name!r} has {sample[name].ndim} axes")
            if sample[name].shape[axis] < 2:
                raise ValueError(f"sample {name!r} has size {sample[name].shape[axis]} on dynamic axis {axis}; use at "
                                 "least 2 (torch.export fixes a size-1 axis to the constant 1)")
    model = model.cpu().eval()
    try:
        with torch.no_grad():
            expected = model(**sample)
    except Exception as e:  # noqa: BLE001 - we rephrase whatever the model raised
        shapes = {n: f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for n, t in sample.items()}
        raise ValueError(f"the sample does not fit the model: {type(model).__name__}.forward({', '.join(params)}) "
                         f"raised {type(e).__name__}: {e} on sample {shapes}") from e
    n_out = len(expected) if isinstance(expected, (tuple, list)) else 1
    if len(output_names) != n_out:
        raise ValueError(f"the model returns {n_out} output(s) but output_names has {len(output_names)}: {list(output_names)}")
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="ailab-onnx-")) / f"{type(model).__name__.lower()}.onnx"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dims = {label: torch.export.Dim(label) for axes in dynamic_axes.values() for label in axes.values()}
    shapes = tuple({a: dims[label] for a, label in dynamic_axes.get(n, {}).items()} or None for n in params)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _quiet_logger("torch.onnx"):
            warnings.simplefilter("ignore")
            torch.onnx.export(model, tuple(sample.values()), str(path), dynamo=True, input_names=params,
                              output_names=list(output_names), dynamic_shapes=shapes, opset_version=opset,
                              external_data=False, verbose=False)  # one file: no .onnx.data beside it
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(f"torch.onnx.export failed for {type(model).__name__}: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}") from e
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
                raise ExportParityError(f"output {name!r}: ONNX shape {g.shape} != PyTorch shape {r.shape} "
                                        f"at inputs {({n: list(t.shape) for n, t in s.items()})}")
            worst = max(worst, float(np.abs(r.astype(np.float64) - g.astype(np.float64)).max()) if r.size else 0.0)
        shapes_checked.append({n: list(t.shape) for n, t in s.items()})
    if not worst <= tolerance:
        raise ExportParityError(f"ONNX Runtime differs from PyTorch by up to {worst:.3e} > tolerance {tolerance:.0e}")
    return ExportResult(path, params, list(output_names), dynamic_axes, worst, tolerance, shapes_checked, seconds,
                        runner.size_bytes)


# ----------------------------------------------------------------------------- text classifier with stage timing


class ClassifierWithEmbedding(nn.Module):
    """SentimentClassifier that also returns its sentence embedding, so fidelity can compare embeddings."""

    def __init__(self, classifier: nn.Module):
        super().__init__()
        self.encoder, self.head = classifier.encoder, classifier.head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        emb = self.encoder(input_ids, attention_mask)  # (B, H)
        return self.head(emb), emb  # (B, C), (B, H)


def text_input_spec() -> list[InputSpec]:
    return [InputSpec("input_ids", np.dtype("int64"), ("batch", "seq")),
            InputSpec("attention_mask", np.dtype("int64"), ("batch", "seq"))]


@dataclass
class StageTimings:
    """Milliseconds per stage for one batch; per_request_ms divides the total by the batch size."""

    batch_size: int
    tokenize_ms: float
    forward_ms: float
    postprocess_ms: float

    @property
    def total_ms(self) -> float:
        return self.tokenize_ms + self.forward_ms + self.postprocess_ms

    @property
    def per_request_ms(self) -> float:
        return self.total_ms / max(self.batch_size, 1)

    def as_dict(self) -> dict:
        return {"batch_size": self.batch_size, "tokenize_ms": self.tokenize_ms, "forward_ms": self.forward_ms,
                "postprocess_ms": self.postprocess_ms, "total_ms": self.total_ms, "per_request_ms": self.per_request_ms}


@dataclass
class TextPrediction:
    probs: np.ndarray        # (N, C) softmax probabilities
    label_ids: np.ndarray    # (N,) argmax
    labels: list[str]
    timings: StageTimings


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)  # subtract the max: exp() cannot overflow
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class TextClassifierRunner:
    """texts -> tokens -> logits -> probabilities, timing each stage. Wraps any Runner whose inputs are
    input_ids/attention_mask and whose first output is (B, C) logits."""

    def __init__(self, runner: Runner, tokenizer, max_length: int = 64, classes: Sequence[str] | None = None):
        if not isinstance(runner, Runner):
            raise TypeError(f"runner must be an ailab.engine Runner, got {type(runner).__name__}")
        if not 2 <= max_length <= 512:
            raise ValueError(f"max_length must be between 2 and 512 word pieces, got {max_length}")
        self.runner, self.tokenizer, self.max_length = runner, tokenizer, max_length
        self.classes = list(classes) if classes is not None else ["negative", "positive"]
        self.name, self.device, self.precision = runner.name, runner.device, runner.precision

    def tokenize(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        if isinstance(texts, str):
            raise TypeError("predict() takes a list of texts; wrap a single text as [text]")
        if not texts:
            raise ValueError("predict() got no texts; send at least one")
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise TypeError(f"texts must all be str; item {bad[0]} is {type(texts[bad[0]]).__name__}")
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        return {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}

    def predict(self, texts: Sequence[str]) -> TextPrediction:
        t0 = time.perf_counter()
        batch = self.tokenize(texts)
        t1 = time.perf_counter()
        logits = self.runner.run(batch)  # (B, C); the runner syncs the device
        t2 = time.perf_counter()
        probs = softmax(logits.astype(np.float32))
        ids = probs.argmax(-1)
        labels = [self.classes[i] for i in ids]
        t3 = time.perf_counter()
        return TextPrediction(probs, ids, labels, StageTimings(len(texts), (t1 - t0) * 1e3, (t2 - t1) * 1e3,
                                                               (t3 - t2) * 1e3))

    __call__ = predict

    def predict_texts(self, texts: Sequence[str]) -> tuple[np.ndarray, StageTimings]:
        pred = self.predict(texts)
        return pred.probs, pred.timings


def stage_breakdown(clf: TextClassifierRunner, texts: Sequence[str], batch_size: int, iters: int = 10,
                    warmup: int = 2) -> dict[str, LatencyStats]:
    """Latency statistics per stage over `iters` batches of `batch_size` texts (cycled from `texts`)."""
    if batch_size < 1 or not texts:
        raise ValueError("stage_breakdown needs batch_size >= 1 and at least one text")
    rows: dict[str, list[float]] = {"tokenize": [], "forward": [], "postprocess": [], "total": []}
    for i in range(warmup + iters):
        chunk = [texts[(i * batch_size + j) % len(texts)] for j in range(batch_size)]
        t = clf.predict(chunk).timings
        if i >= warmup:
            for k, v in zip(rows, (t.tokenize_ms, t.forward_ms, t.postprocess_ms, t.total_ms)):
                rows[k].append(v)
    return {k: latency_stats(v) for k, v in rows.items()}


# ----------------------------------------------------------------------------- tokenizers: slow (Python) vs fast (Rust)


def slow_tokenizer():
    """transformers' pure-Python WordPiece (BertTokenizerLegacy) over MiniLM's hash-checked vocab.txt."""
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    from ailab.models import TRUSTED_SHA256, minilm_dir, verify_file

    vocab = minilm_dir() / "vocab.txt"
    verify_file(vocab, TRUSTED_SHA256["minilm"]["vocab.txt"])
    return BertTokenizerLegacy(vocab_file=str(vocab), do_lower_case=True, model_max_length=512)


@dataclass
class TokenizerComparison:
    n_texts: int
    fast_ms: float   # median over repeats, whole list
    slow_ms: float
    same_ids: bool   # the two produce identical input_ids and attention masks

    @property
    def speedup(self) -> float:
        return self.slow_ms / self.fast_ms


def compare_tokenizers(fast, slow, texts: Sequence[str], max_length: int = 64, repeats: int = 3) -> TokenizerComparison:
    """Time both tokenizers on the same texts (median of `repeats`) and check they agree id for id."""
    if not texts:
        raise ValueError("compare_tokenizers needs at least one text")
    texts = list(texts)

    def timed(tok):
        times, out = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="np")
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times)), out

    fast_ms, a = timed(fast)
    slow_ms, b = timed(slow)
    same = all(a[k].shape == b[k].shape and bool((a[k] == b[k]).all()) for k in ("input_ids", "attention_mask"))
    return TokenizerComparison(len(texts), fast_ms, slow_ms, same)


# ----------------------------------------------------------------------------- the course's sentiment model, ready to serve


def sentiment_onnx(classifier=None, max_length: int = 64) -> Path:
    """The sentiment classifier (logits + embedding) exported once and cached under cache_dir()/onnx.

    The file name carries a hash of the weights rounded to 3 decimals: the head's L-BFGS training is not
    bit-identical across thread counts, and a 1e-7 difference should not cost a new export, while a
    retrained head does get one. Returns the path of the .onnx file.
    """
    import hashlib

    from ailab.models import cache_dir, sentiment_classifier

    classifier = classifier if classifier is not None else sentiment_classifier(max_length=max_length).model
    h = hashlib.sha256()
    for k, v in classifier.state_dict().items():
        h.update(k.encode())
        h.update(np.round(v.detach().float().cpu().numpy(), 3).tobytes())
    path = cache_dir() / "onnx" / f"sentiment-{h.hexdigest()[:16]}.onnx"
    if not path.exists():
        sample = {"input_ids": torch.randint(1000, 5000, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
        tmp = path.with_name(path.stem + f".tmp{os.getpid()}.onnx")
        export_onnx(ClassifierWithEmbedding(classifier), sample, tmp, output_names=("logits", "sentence_embedding"))
        os.replace(tmp, path)  # atomic: a reader never sees half a file
    return path


def sentiment_runner(backend: str = "onnx", precision: str = "fp32", threads: int | None = None,
                     max_length: int = 64, trained=None) -> TextClassifierRunner:
    """A ready TextClassifierRunner for the course's sentiment model.

    backend='torch' (precision fp32/fp16/bf16) or 'onnx' (fp32, or int8 = dynamic INT8 via ailab.quantize).
    `trained` is an ailab.models.TrainedClassifier to reuse (saves loading it again).
    """
    from ailab.models import sentiment_classifier

    if backend not in ("torch", "onnx"):
        raise ValueError(f"backend={backend!r}; choose 'torch' or 'onnx'")
    trained = trained if trained is not None else sentiment_classifier(max_length=max_length)
    tok, classes = trained.encoder.tokenizer, trained.split.classes
    if backend == "torch":
        if threads is not None:
            torch.set_num_threads(threads)
        runner = TorchRunner(trained.model, text_input_spec(), name=f"torch-sentiment-{precision}", device="cpu",
                             precision=precision)
        return TextClassifierRunner(runner, tok, max_length, classes)
    if precision not in ("fp32", "int8"):
        raise ValueError(f"precision={precision!r} for backend='onnx'; choose 'fp32' or 'int8'")
    path = sentiment_onnx(trained.model, max_length)
    if precision == "int8":
        from ailab.quantize import quantize_dynamic_int8

        path = quantize_dynamic_int8(path)
    runner = OnnxRunner(path, threads=threads, name=f"onnx-sentiment-{precision}")
    return TextClassifierRunner(runner, tok, max_length, classes)
