"""Lab checks: export a text classifier to ONNX with dynamic axes, and verify it against PyTorch.

The learner writes
- `export_dynamic(model, sample, path) -> path`: torch.onnx.export with batch and sequence axes dynamic;
- `parity_check(model, onnx_path, batch, tol=1e-4) -> float`: the max |onnx - torch| over the outputs,
  raising AssertionError when it exceeds `tol`.

The checks use a tiny BERT classifier (2 layers, 32 wide) so an export takes seconds. An export with a
fixed batch (or sequence) size is caught by running it at another shape; a parity check that compares
only shapes is caught by a model with the same shapes and different weights.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ailab.labs.core import check, expect

LAB = "lab_export_verify"
_CACHE: dict = {}


def tiny_classifier(seed: int = 0) -> nn.Module:
    """A 2-layer, 32-wide BERT + linear head, random weights (fixed by `seed`): fast to export."""
    from transformers import BertConfig, BertModel

    from ailab.models import MeanPoolEncoder, SentimentClassifier

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    return SentimentClassifier(MeanPoolEncoder(BertModel(cfg, add_pooling_layer=False)), nn.Linear(32, 2)).eval()


def token_batch(batch: int, seq: int, seed: int = 0, as_numpy: bool = False) -> dict:
    """Random token ids with a ragged attention mask (some rows padded), like a real tokenized batch."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 1000, (batch, seq), generator=g)
    lengths = torch.randint(max(1, seq // 2), seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()  # (B, T)
    ids = ids * mask
    out = {"input_ids": ids, "attention_mask": mask}
    return {k: v.numpy() for k, v in out.items()} if as_numpy else out


def _reference_exports():
    """(model, path to its correct export, path to an export of a *different* model with the same shapes)."""
    if "ref" not in _CACHE:
        from ailab.engine import export_onnx

        folder = Path(tempfile.mkdtemp(prefix="ailab-lab-export-"))
        model, other = tiny_classifier(0), tiny_classifier(1)
        good = export_onnx(model, token_batch(2, 8), folder / "model.onnx", output_names=("logits",)).path
        wrong = export_onnx(other, token_batch(2, 8), folder / "other.onnx", output_names=("logits",)).path
        _CACHE["ref"] = (model, good, wrong)
    return _CACHE["ref"]


def _session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@check(LAB, "export keeps batch and sequence dynamic")
def check_dynamic_export(export_dynamic):
    model = tiny_classifier(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mine.onnx"
        returned = export_dynamic(model, token_batch(2, 8), path)
        expect(returned is not None and Path(returned).is_file(),
               f"export_dynamic should write the model and return its path; got {returned!r}")
        sess = _session(returned)
        inputs = {i.name: i.shape for i in sess.get_inputs()}
        expect(sorted(inputs) == ["attention_mask", "input_ids"],
               f"the ONNX inputs should be named input_ids and attention_mask (pass input_names); got {sorted(inputs)}")
        for name, shape in inputs.items():
            expect(len(shape) == 2, f"{name} should have 2 axes (batch, seq); the export has shape {shape}")
            expect(not isinstance(shape[0], int),
                   f"{name} has a fixed batch size {shape[0]} in the exported graph: mark axis 0 dynamic "
                   "(dynamic_shapes with torch.export.Dim), or a request with another batch size fails")
            expect(not isinstance(shape[1], int),
                   f"{name} has a fixed sequence length {shape[1]}: mark axis 1 dynamic too, texts differ in length")
        other = token_batch(5, 13, seed=3, as_numpy=True)  # a shape the export never saw
        try:
            got = sess.run(None, other)[0]
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
            expect(False, f"the exported model fails on a batch of shape (5, 13): {str(e).splitlines()[0][:200]}")
        with torch.no_grad():
            ref = model(**{k: torch.from_numpy(v) for k, v in other.items()}).numpy()
        diff = float(np.abs(got - ref).max())
        expect(diff < 1e-4, f"at shape (5, 13) the export differs from PyTorch by {diff:.2e}; expected < 1e-4")


@check(LAB, "parity check compares values and honours the tolerance")
def check_parity(parity_check):
    model, good, wrong = _reference_exports()
    batch = token_batch(4, 12, seed=7, as_numpy=True)
    diff = parity_check(model, good, batch, tol=1e-4)
    expect(isinstance(diff, (float, np.floating)) and not isinstance(diff, bool),
           f"parity_check should return the max absolute difference as a float, got {diff!r}")
    expect(0 <= float(diff) < 1e-4, f"a correct export should differ by < 1e-4; your check reported {diff}")
    raised = False
    try:
        parity_check(model, wrong, batch, tol=1e-4)
    except AssertionError:
        raised = True
    expect(raised, "parity_check accepted an ONNX model with the right shapes but different weights: it must "
                   "compare the output *values* (max |onnx - torch|) and raise AssertionError above tol")
    try:
        big = parity_check(model, wrong, batch, tol=1e3)
    except AssertionError:
        expect(False, "with tol=1e3 the same mismatch should pass: use the tol argument, not a fixed tolerance")
    expect(float(big) > 1e-3, f"for two different models the max difference should be large; you returned {big}")
