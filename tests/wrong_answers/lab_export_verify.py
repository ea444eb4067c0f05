"""Independent wrong answers for lab_export_verify, written from labs/2_engine/lab_export_verify.ipynb's contract
alone."""

import numpy as np
import onnxruntime as ort
import torch


def export_dynamic(model, sample, path):
    """Export `model` (called as model(input_ids, attention_mask)) to ONNX at `path`, batch and sequence dynamic."""
    model = model.eval()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    axes = {0: batch, 1: seq}
    torch.onnx.export(
        model,
        (sample["input_ids"], sample["attention_mask"]),
        str(path),
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": axes, "attention_mask": axes},
        external_data=False,
        verbose=False,
    )
    return path


def parity_check(model, onnx_path, batch, tol=1e-4):
    """Max |onnx - torch| over the outputs for `batch` (dict of numpy int64 arrays); AssertionError above `tol`."""
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max())
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol:.0e}"
    return diff


def export_returns_nothing(model, sample, path):
    """Writes the file but returns nothing: the path was given, so why hand it back."""
    # differs on: any model -> right returns path, wrong None
    model = model.eval()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    axes = {0: batch, 1: seq}
    torch.onnx.export(
        model,
        (sample["input_ids"], sample["attention_mask"]),
        str(path),
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": axes, "attention_mask": axes},
        external_data=False,
        verbose=False,
    )


def export_output_named_output(model, sample, path):
    """Names the graph's output 'output' (the exporter's usual example) instead of 'logits'."""
    # differs on: any model -> right session output name "logits", wrong "output"
    model = model.eval()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    axes = {0: batch, 1: seq}
    torch.onnx.export(
        model,
        (sample["input_ids"], sample["attention_mask"]),
        str(path),
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["output"],
        dynamic_shapes={"input_ids": axes, "attention_mask": axes},
        external_data=False,
        verbose=False,
    )
    return path


def export_one_dim_for_both_axes(model, sample, path):
    """Makes a single torch.export.Dim and uses it for both the batch and the sequence axis, which tells the exporter
    that the batch size always equals the length."""
    # differs on: a sample of shape (2, 8) -> right exports, wrong refuses the sample (2 != 8)
    model = model.eval()
    dynamic = torch.export.Dim("dynamic")
    axes = {0: dynamic, 1: dynamic}
    torch.onnx.export(
        model,
        (sample["input_ids"], sample["attention_mask"]),
        str(path),
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": axes, "attention_mask": axes},
        external_data=False,
        verbose=False,
    )
    return path


def export_with_external_data(model, sample, path):
    """Leaves external_data at its default, so the weights go to a second file next to the model."""
    # differs on: any model -> right writes one file, wrong writes path and path.data
    model = model.eval()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    axes = {0: batch, 1: seq}
    torch.onnx.export(
        model,
        (sample["input_ids"], sample["attention_mask"]),
        str(path),
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_shapes={"input_ids": axes, "attention_mask": axes},
        verbose=False,
    )
    return path


def parity_strict_below_tol(model, onnx_path, batch, tol=1e-4):
    """Raises when the difference equals tol (>= instead of >)."""
    # differs on: tol = the exact difference of a run (or tol=0.0 with identical outputs) -> right returns, wrong raises
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max())
    assert diff < tol, f"ONNX differs from PyTorch by {diff:.2e} >= tol {tol:.0e}"
    return diff


def parity_signed_difference(model, onnx_path, batch, tol=1e-4):
    """Takes the max of onnx - torch without the absolute value, so an ONNX output that is lower is never seen."""
    # differs on: an ONNX model whose logits are 1.0 below PyTorch's -> right AssertionError, wrong passes
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float((got.astype(np.float64) - ref.astype(np.float64)).max())
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol:.0e}"
    return diff


def parity_ignores_nan(model, onnx_path, batch, tol=1e-4):
    """Uses np.nanmax so a NaN in one output (a warning otherwise) is skipped rather than failing the check."""
    # differs on: an ONNX model that outputs NaN in one element, the rest equal -> right AssertionError, wrong 0.0
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float(np.nanmax(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol:.0e}"
    return diff


def parity_in_float32(model, onnx_path, batch, tol=1e-4):
    """Subtracts the float32 outputs directly, so the difference is rounded to float32 before it meets tol (and is
    returned as a numpy float32)."""
    # differs on: ONNX output 3.0 where PyTorch gives 1e-8, tol=10 -> right 2.99999999 (float), wrong
    #   np.float32(3.0); on any input the result is a numpy float32, not a Python float
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = np.abs(got - ref).max()
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol:.0e}"
    return diff


_sessions = {}


def parity_reuses_sessions(model, onnx_path, batch, tol=1e-4):
    """Keeps one InferenceSession per path (sessions are slow to build), so a file re-exported at the same path is
    not reloaded."""
    # differs on: check a good export at p, overwrite p with a broken export, check again -> right raises, wrong passes
    key = str(onnx_path)
    if key not in _sessions:
        _sessions[key] = ort.InferenceSession(key, providers=["CPUExecutionProvider"])
    got = _sessions[key].run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max())
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol:.0e}"
    return diff


RIGHT = {"export_dynamic": export_dynamic, "parity_check": parity_check}
WRONG = [
    ("export_dynamic", export_returns_nothing, "misread prose"),
    ("export_dynamic", export_output_named_output, "order/parsing"),
    ("export_dynamic", export_one_dim_for_both_axes, "misread prose"),
    ("export_dynamic", export_with_external_data, "resources"),
    ("parity_check", parity_strict_below_tol, "boundaries"),
    ("parity_check", parity_signed_difference, "misread prose"),
    ("parity_check", parity_ignores_nan, "error handling"),
    ("parity_check", parity_in_float32, "units/rounding"),
    ("parity_check", parity_reuses_sessions, "state"),
]
