"""Lab checks: export a text classifier to ONNX with dynamic axes, and verify it against PyTorch.

The learner writes
- `export_dynamic(model, sample, path) -> path`: torch.onnx.export with batch and sequence axes dynamic;
- `parity_check(model, onnx_path, batch, tol=1e-4) -> float`: the max |onnx - torch| over the outputs,
  raising AssertionError when it exceeds `tol`.

What each must guarantee, and so what the checks test:

- the export is one self-contained file at the path it is given (and that path is returned), with inputs
  input_ids and attention_mask (int64, both axes symbolic) and the output logits, and it matches PyTorch at
  shapes it never saw: one row, one token, more rows and longer texts than the sample;
- the parity check returns the *largest* absolute difference (not a mean, not a signed difference, not over
  one row), compares against the model in eval mode, raises AssertionError exactly when the difference
  exceeds `tol` (the argument; 1e-4 by default; absolute, whatever the size of the logits; a difference equal
  to tol passes), and never reports success for a NaN, outputs of different shapes or a file ONNX Runtime
  cannot load.

The export check uses a tiny BERT classifier (2 layers, 32 wide) so an export takes seconds. The parity checks
use, besides that model, tiny hand-built ONNX graphs next to a PyTorch module computing the same integer-valued
logits, so the difference between the two is known exactly: 0 everywhere, or a chosen value at one element.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ailab.labs.core import check, expect
from ailab.scratch import scratch_dir

LAB = "lab_export_verify"
_CACHE: dict = {}


def tiny_classifier(seed: int = 0) -> nn.Module:
    """A 2-layer, 32-wide BERT + linear head, random weights (fixed by `seed`): fast to export."""
    from transformers import BertConfig, BertModel

    from ailab.models import MeanPoolEncoder, SentimentClassifier

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return SentimentClassifier(MeanPoolEncoder(BertModel(cfg, add_pooling_layer=False)), nn.Linear(32, 2)).eval()


def token_batch(batch: int, seq: int, seed: int = 0, as_numpy: bool = False, vocab: int = 1000) -> dict:
    """Random token ids with a ragged attention mask (some rows padded), like a real tokenized batch."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    lengths = torch.randint(max(1, seq // 2), seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()  # (B, T)
    ids = ids * mask
    out = {"input_ids": ids, "attention_mask": mask}
    return {k: v.numpy() for k, v in out.items()} if as_numpy else out


def _reference_export():
    """(model, path to its correct export), made once per process."""
    if "ref" not in _CACHE:
        from ailab.engine import export_onnx

        folder = scratch_dir("ailab-lab-export-")
        model = tiny_classifier(0)
        good = export_onnx(model, token_batch(2, 8), folder / "model.onnx", output_names=("logits",)).path
        _CACHE["ref"] = (model, good)
    return _CACHE["ref"]


def _session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [""])[0][:200]


# ------------------------------------------------------------------------------------------------ export
@check(LAB, "export keeps batch and sequence dynamic")
def check_dynamic_export(export_dynamic):
    model = tiny_classifier(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "export"
        folder.mkdir()
        path = folder / "mine.onnx"
        returned = export_dynamic(model, token_batch(3, 11, seed=1), path)  # a sample shape no note mentions
        expect(
            path.is_file(),
            f"export_dynamic should write the model at the path it is given ({path}); nothing is "
            f"there (it returned {returned!r})",
        )
        expect(
            isinstance(returned, (str, Path)) and Path(returned).resolve() == path.resolve(),
            f"export_dynamic should return the path it wrote the model to ({path}); got {returned!r}",
        )
        extra = sorted(p.name for p in folder.iterdir() if p.name != path.name)
        expect(
            not extra,
            f"export_dynamic wrote extra files next to the model ({extra}): write one self-contained "
            "file (see external_data in the notes)",
        )
        sess = _session(path)
        inputs = {i.name: i for i in sess.get_inputs()}
        expect(
            sorted(inputs) == ["attention_mask", "input_ids"],
            f"the ONNX inputs should be named input_ids and attention_mask (pass input_names); got {sorted(inputs)}",
        )
        for name, arg in inputs.items():
            shape = arg.shape
            expect(
                arg.type == "tensor(int64)",
                f"{name} should take int64 token ids, like the sample; the export expects {arg.type}",
            )
            expect(len(shape) == 2, f"{name} should have 2 axes (batch, seq); the export has shape {shape}")
            expect(
                not isinstance(shape[0], int),
                f"{name} has a fixed batch size {shape[0]} in the exported graph: mark axis 0 dynamic "
                "(dynamic_shapes with torch.export.Dim), or a request with another batch size fails",
            )
            expect(
                not isinstance(shape[1], int),
                f"{name} has a fixed sequence length {shape[1]}: mark axis 1 dynamic too, texts differ in length",
            )
        outputs = [o.name for o in sess.get_outputs()]
        expect(
            outputs == ["logits"],
            f"the ONNX model should have one output named logits (pass output_names); got {outputs}",
        )
        for batch, seq in ((5, 13), (1, 1), (3, 11), (7, 40)):  # shapes the export never saw, and its own
            other = token_batch(batch, seq, seed=batch * 100 + seq, as_numpy=True)
            try:
                got = sess.run(None, other)[0]
            except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
                expect(False, f"the exported model fails on a batch of shape ({batch}, {seq}): {_first_line(e)}")
            with torch.no_grad():
                ref = model(**{k: torch.from_numpy(v) for k, v in other.items()}).numpy()
            expect(
                got.shape == ref.shape,
                f"at shape ({batch}, {seq}) the export returns logits of shape {got.shape}; "
                f"PyTorch returns {ref.shape}",
            )
            diff = float(np.abs(got - ref).max())
            expect(
                diff < 1e-4, f"at shape ({batch}, {seq}) the export differs from PyTorch by {diff:.2e}; expected < 1e-4"
            )


# ------------------------------------------------------------------------------------ fakes with known diffs
SCALE_BIG, BIAS_BIG = (40, 41, 42, 43, 44), (0, 1, -1, 2, -2)  # logits in the thousands, 5 classes
SCALE_SMALL, BIAS_SMALL = (1, 1, 1, 1, 1), (0, 1, 2, 3, 4)  # logits below 256: float32 steps of 2**-16


class Affine(nn.Module):
    """logits = (sum of kept token ids) * scale + bias, then dropout (active only in training mode)."""

    def __init__(self, scale, bias):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale, dtype=torch.float32).reshape(1, -1))
        self.bias = nn.Parameter(torch.tensor(bias, dtype=torch.float32).reshape(1, -1))
        self.dropout = nn.Dropout(0.5)

    def forward(self, input_ids, attention_mask):
        total = (input_ids * attention_mask).sum(1, keepdim=True).float()
        return self.dropout(total * self.scale + self.bias)


def affine_onnx(path: Path, scale, bias, delta: np.ndarray | None = None, one_column: bool = False) -> Path:
    """The ONNX twin of `Affine(scale, bias).eval()`, plus `delta` (shape (batch, classes)) when given;
    with `one_column`, it returns only the (batch, 1) sum - a shape PyTorch's output does not have."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
        helper.make_node("Cast", ["kept"], ["kept_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["kept_f", "axes"], ["total"], keepdims=1),
    ]
    width = 1 if one_column else len(scale)
    if one_column:
        nodes.append(helper.make_node("Identity", ["total"], ["logits"]))
    else:
        inits += [
            numpy_helper.from_array(np.asarray(scale, np.float32).reshape(1, -1), "scale"),
            numpy_helper.from_array(np.asarray(bias, np.float32).reshape(1, -1), "bias"),
        ]
        nodes += [
            helper.make_node("Mul", ["total", "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "bias"], ["affine" if delta is not None else "logits"]),
        ]
        if delta is not None:
            inits.append(numpy_helper.from_array(np.asarray(delta, np.float32), "delta"))
            nodes.append(helper.make_node("Add", ["affine", "delta"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "affine",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
            for n in ("input_ids", "attention_mask")
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", width])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ailab-lab-check")
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def int_batch(batch: int, seq: int, seed: int = 0) -> dict:
    """Token ids 1..49 with a ragged mask, as numpy int64: the fakes' logits stay integers, exact in float32."""
    return token_batch(batch, seq, seed=seed, as_numpy=True, vocab=50)


def _one(batch: int, classes: int, row: int, col: int, value: float) -> np.ndarray:
    delta = np.zeros((batch, classes), np.float32)
    delta[row, col] = value
    return delta


def _call(parity_check, model, path, batch, what: str, **kwargs):
    """('returned', value) or ('raised', exception) - the learner's stub still fails as a stub."""
    try:
        return "returned", parity_check(model, path, batch, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - raising is what some cases expect
        return "raised", e


def _raised(e: Exception) -> str:
    line = _first_line(e)
    return f"raised {type(e).__name__}" + (f" ({line})" if line else "")


def _expect_value(kind, value, want: float, what: str, advice: str = "") -> None:
    advice = f". {advice}" if advice else ""
    expect(
        kind == "returned",
        f"{what}: parity_check {_raised(value) if kind == 'raised' else ''}; it should return {want:g}{advice}",
    )
    expect(
        isinstance(value, (float, np.floating)) and not isinstance(value, bool),
        f"{what}: parity_check should return the max absolute difference as a float; got {value!r}",
    )
    expect(
        abs(float(value) - want) <= 1e-6 + 1e-6 * want,
        f"{what}: the max |onnx - torch| is {want:g}; parity_check returned {float(value):g}{advice}",
    )


def _expect_assertion(kind, value, what: str) -> None:
    expect(kind == "raised", f"{what}: parity_check returned {value!r}; it should raise AssertionError")
    expect(isinstance(value, AssertionError), f"{what}: parity_check {_raised(value)}; raise AssertionError")


@check(LAB, "parity check compares values and honours the tolerance")
def check_parity(parity_check):
    model, good = _reference_export()
    batch = token_batch(4, 12, seed=7, as_numpy=True)
    kind, diff = _call(parity_check, model, good, batch, "", tol=1e-4)
    expect(kind == "returned", f"on a correct export parity_check raised {type(diff).__name__}: {_first_line(diff)}")
    expect(
        isinstance(diff, (float, np.floating)) and not isinstance(diff, bool),
        f"parity_check should return the max absolute difference as a float, got {diff!r}",
    )
    expect(0 <= float(diff) < 1e-4, f"a correct export should differ by < 1e-4; your check reported {diff}")
    other = tiny_classifier(1)  # same shapes, other weights
    kind, err = _call(parity_check, other, good, batch, "", tol=1e-4)
    expect(
        kind == "raised" and isinstance(err, AssertionError),
        "parity_check accepted an ONNX model with the right shapes but different weights: it must compare the "
        "output *values* (max |onnx - torch|) and raise AssertionError above tol"
        + (f" (it raised {type(err).__name__})" if kind == "raised" else ""),
    )
    kind, big = _call(parity_check, other, good, batch, "", tol=1e3)
    expect(
        kind == "returned", "with tol=1e3 the same mismatch should pass: use the tol argument, not a fixed tolerance"
    )
    expect(float(big) > 1e-3, f"for two different models the max difference should be large; you returned {big}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        batch = int_batch(4, 6, seed=1)
        for row, col, value, where in ((3, 3, 0.25, "the last row, class 3"), (0, 1, -0.25, "row 0, class 1")):
            path = affine_onnx(tmp / f"d{row}.onnx", SCALE_BIG, BIAS_BIG, _one(4, 5, row, col, value))
            what = (
                f"the ONNX output is {'above' if value > 0 else 'below'} PyTorch's by 0.25 at one element "
                f"({where} of a (4, 5) output) and equal elsewhere"
            )
            kind, got = _call(parity_check, Affine(SCALE_BIG, BIAS_BIG).eval(), path, batch, what, tol=1.0)
            _expect_value(
                kind,
                got,
                0.25,
                what + " (tol=1.0)",
                "Take the largest absolute difference over every element of the output",
            )
        path = affine_onnx(tmp / "same.onnx", SCALE_BIG, BIAS_BIG)
        trained = Affine(SCALE_BIG, BIAS_BIG).train()  # dropout on: only eval mode matches the export
        what = (
            "for a model handed over in training mode (its dropout active) and an export that matches it in eval mode"
        )
        kind, got = _call(parity_check, trained, path, batch, what)
        _expect_value(kind, got, 0.0, what, "Compare against the model in eval mode")


@check(LAB, "parity check raises AssertionError exactly when the difference exceeds tol")
def check_parity_tolerance(parity_check):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        batch = int_batch(3, 5, seed=2)
        path = affine_onnx(tmp / "quarter.onnx", SCALE_BIG, BIAS_BIG, _one(3, 5, 2, 4, 0.25))
        model = Affine(SCALE_BIG, BIAS_BIG).eval()
        for tol in (0.25, 0.3, 10.0):
            what = f"outputs that differ by exactly 0.25 at one element, with tol={tol}"
            kind, got = _call(parity_check, model, path, batch, what, tol=tol)
            _expect_value(
                kind,
                got,
                0.25,
                what,
                "Only a difference *above* tol fails" + (", and tol is the argument" if tol > 0.25 else ""),
            )
        for tol in (0.2499, 0.2, 1e-4):
            what = (
                f"outputs that differ by 0.25 (logits in the thousands), with tol={tol}: an absolute tolerance, "
                "whatever the size of the logits"
            )
            _expect_assertion(*_call(parity_check, model, path, batch, what, tol=tol), what)
        small = Affine(SCALE_SMALL, BIAS_SMALL).eval()
        for value, fails in ((2.0**-15, False), (2.0**-12, True)):  # 3.1e-5 and 2.4e-4 around the default 1e-4
            path = affine_onnx(tmp / f"small{value}.onnx", SCALE_SMALL, BIAS_SMALL, _one(3, 5, 1, 2, value))
            what = f"called without tol (the default is 1e-4), outputs that differ by {value:.2e}"
            if fails:
                _expect_assertion(*_call(parity_check, small, path, batch, what), what)
            else:
                _expect_value(*_call(parity_check, small, path, batch, what), value, what)
        path = affine_onnx(tmp / "plain.onnx", SCALE_SMALL, BIAS_SMALL)
        for b, t in ((1, 1), (7, 3), (2, 30)):  # one row and one token; other shapes
            what = f"a matching export, on a batch of shape ({b}, {t})"
            _expect_value(*_call(parity_check, small, path, int_batch(b, t, seed=b + t), what, tol=1e-4), 0.0, what)
        path = affine_onnx(tmp / "one.onnx", SCALE_SMALL, BIAS_SMALL, _one(1, 5, 0, 4, 0.5))
        what = "one row (shape (1, 4)) whose last logit differs by 0.5"
        _expect_value(*_call(parity_check, small, path, int_batch(1, 4, seed=5), what, tol=1.0), 0.5, what)


@check(LAB, "parity check never passes a NaN, a shape mismatch or a broken file")
def check_parity_failures(parity_check):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        batch = int_batch(4, 6, seed=3)
        model = Affine(SCALE_SMALL, BIAS_SMALL).eval()
        path = affine_onnx(tmp / "nan.onnx", SCALE_SMALL, BIAS_SMALL, _one(4, 5, 2, 3, np.nan))
        kind, got = _call(parity_check, model, path, batch, "", tol=1.0)
        expect(
            kind == "raised",
            f"the ONNX output holds a NaN (row 2, class 3) and parity_check returned {got!r} "
            "(tol=1.0): a NaN is never within tolerance, so it must raise AssertionError",
        )
        path = affine_onnx(tmp / "column.onnx", SCALE_SMALL, (0, 0, 0, 0, 0), one_column=True)
        kind, got = _call(parity_check, Affine(SCALE_SMALL, (0, 0, 0, 0, 0)).eval(), path, batch, "", tol=1.0)
        expect(
            kind == "raised",
            f"the ONNX output has shape (4, 1) and PyTorch's (4, 5), and parity_check returned "
            f"{got!r}: outputs of different shapes are not equal, whatever broadcasting says - "
            "compare the shapes first and raise",
        )
        broken = tmp / "broken.onnx"
        broken.write_bytes(b"this is not an ONNX model")
        kind, got = _call(parity_check, model, broken, batch, "", tol=1.0)
        expect(
            kind == "raised",
            f"ONNX Runtime cannot load {broken.name} (it is not a model), and parity_check "
            f"returned {got!r}: let the runtime's error propagate - a check that cannot run "
            "must not report a difference",
        )
