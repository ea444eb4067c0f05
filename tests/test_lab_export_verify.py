"""Lab export_verify: the checks pass the right answers and fail the stub and plausible wrong ones."""
import numpy as np
import onnxruntime as ort
import pytest
import torch

from ailab.labs import LabCheckFailed
from ailab.labs import lab_export_verify as lab


def _export(model, sample, path, axes):
    dims = {}
    shapes = {n: {a: dims.setdefault(label, torch.export.Dim(label)) for a, label in axes.items()} or None for n in sample}
    torch.onnx.export(model.eval(), (sample["input_ids"], sample["attention_mask"]), str(path), dynamo=True,
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamic_shapes=shapes if axes else None, external_data=False, verbose=False)
    return path


def right_export(model, sample, path):
    return _export(model, sample, path, {0: "batch", 1: "seq"})


def fixed_export(model, sample, path):  # forgot dynamic_shapes
    return _export(model, sample, path, {})


def batch_only_export(model, sample, path):  # batch dynamic, sequence length frozen
    return _export(model, sample, path, {0: "batch"})


def _outputs(model, onnx_path, batch):
    got = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, batch)[0]
    with torch.no_grad():
        ref = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    return got, ref


def right_parity(model, onnx_path, batch, tol=1e-4):
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).max())
    assert diff <= tol
    return diff


def shapes_only_parity(model, onnx_path, batch, tol=1e-4):
    got, ref = _outputs(model, onnx_path, batch)
    assert got.shape == ref.shape
    return 0.0


def fixed_tolerance_parity(model, onnx_path, batch, tol=1e-4):  # ignores tol
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).max())
    assert diff <= 1e-4
    return diff


def bool_parity(model, onnx_path, batch, tol=1e-4):  # returns allclose instead of the difference
    got, ref = _outputs(model, onnx_path, batch)
    ok = bool(np.allclose(got, ref, atol=tol))
    assert ok
    return ok


def stub(*args, **kwargs):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    lab.check_dynamic_export(right_export)
    lab.check_parity(right_parity)


@pytest.mark.parametrize("wrong, message", [(fixed_export, "fixed batch size"), (batch_only_export, "fixed sequence length"),
                                            (stub, "not implemented")])
def test_export_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_dynamic_export(wrong)


@pytest.mark.parametrize("wrong", [shapes_only_parity, fixed_tolerance_parity, bool_parity, stub])
def test_parity_check_rejects(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_parity(wrong)
