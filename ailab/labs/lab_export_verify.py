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

import math
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ailab.labs import differential
from ailab.labs.core import LabCheckFailed, check, expect
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


# ------------------------------------------------------------------------- the differential check (export)
# The contract's samples: batch and sequence of 2 or more (torch.export fixes a size-1 axis to a constant, so a
# size-1 sample is outside it), square or not, and a path with or without a file already there to replace.
_EXPORT_EDGES = (
    ((2, 2, False),),  # the smallest sample, square: its two axes must stay two symbols, not one
    ((5, 2, True),),  # more rows than tokens, over a file already at the path
    ((2, 24, False),),  # a long sample with two rows
)


def _export_samples():
    from hypothesis import strategies as st

    return st.tuples(st.tuples(st.integers(2, 6), st.integers(2, 24), st.booleans()))


def _probes(batch: int, seq: int) -> list[tuple[int, int]]:
    """Shapes to run an export at: one row of one token, more rows and longer texts than its sample, and the
    model's longest text (64 positions) in a batch of 16."""
    return [(1, 1), (batch + 3, min(seq + 7, 64)), (16, 64)]


def _exported_logits(export_dynamic):
    """What one sample's export answers: export with `export_dynamic` into a folder of its own, then the
    logits ONNX Runtime gives at each probe shape, by shape."""

    def answer(spec):
        batch, seq, replace = spec
        model = tiny_classifier(0)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            if replace:
                path.write_bytes(b"an older file at this path")
            export_dynamic(model, token_batch(batch, seq, seed=batch * 31 + seq), path)
            sess = _session(path)
            return {
                f"logits at {shape}": sess.run(None, token_batch(*shape, seed=7, as_numpy=True))[0]
                for shape in _probes(batch, seq)
            }

    return answer


def _pytorch_logits(spec):
    """The reference: what the model itself answers at each probe shape."""
    batch, seq, _ = spec
    model = tiny_classifier(0)
    with torch.no_grad():
        return {f"logits at {shape}": model(**token_batch(*shape, seed=7)).numpy() for shape in _probes(batch, seq)}


def _say_sample(spec) -> str:
    batch, seq, replace = spec
    there = "a file already at the path" if replace else "no file at the path yet"
    return f"a sample of {batch} rows x {seq} tokens, {there} (then run at shapes {_probes(batch, seq)})"


@check(LAB, "export matches PyTorch whatever sample it is given")
def check_dynamic_export_same_as_reference(export_dynamic):
    """The export of any sample in the contract, run through ONNX Runtime at shapes it never saw, gives the
    model's own logits (within 1e-4)."""
    differential.same_as_reference(
        _exported_logits(export_dynamic),
        _pytorch_logits,
        _export_samples(),
        describe=_say_sample,
        compare=differential.close(rel=0.0, abs_=1e-4),
        edges=_EXPORT_EDGES,
        arg_names=("sample",),
        examples=3,  # an export takes seconds: the edges and three drawn samples, about half a minute
        limit_s=120.0,
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
            "(tol=1.0): a NaN is never within tolerance, so it must raise (AssertionError, as for any failure)",
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


# --------------------------------------------------------------------------- the differential check (issue 42)
#
# A case is plain data: a fake classifier (logits = sum of kept ids x scale + number of kept tokens x per_token +
# bias: which input is which matters), its ONNX twin plus a chosen difference at some elements (0.25, 2**-14 around
# the default tol, NaN, inf, ...), or an ONNX output of one column, a file that is not a model, or no file; a batch
# of any shape with its padding id and its keys in either order; tol left at its default or given (0, exactly the
# difference, just below it, ...); the model handed over in training mode or not; and sometimes a first call on
# another file written at the same path. The reference and the learner each run the case in their own folder.


def _reference_parity_check(model, onnx_path, batch, tol=1e-4):
    """The contract: max |onnx - torch| over every element, the model in eval mode; AssertionError above tol."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max())
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol}"
    return diff


class _Fake(nn.Module):
    """logits = (sum of kept ids) * scale + (kept tokens) * per_token + bias, then dropout (training mode only)."""

    def __init__(self, scale, per_token, bias):
        super().__init__()
        for name, v in (("scale", scale), ("per_token", per_token), ("bias", bias)):
            setattr(self, name, nn.Parameter(torch.tensor(v, dtype=torch.float32).reshape(1, -1)))
        self.dropout = nn.Dropout(0.5)

    def forward(self, input_ids, attention_mask):
        total = (input_ids * attention_mask).sum(1, keepdim=True).float()
        count = attention_mask.sum(1, keepdim=True).float()
        return self.dropout(total * self.scale + count * self.per_token + self.bias)


def _fake_onnx(path: Path, scale, per_token, bias, delta: np.ndarray, one_column: bool) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, v):
        return numpy_helper.from_array(np.asarray(v, np.float32).reshape(1, -1), name)

    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
        helper.make_node("Cast", ["kept"], ["kept_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["kept_f", "axes"], ["total"], keepdims=1),
    ]
    if one_column:  # the sum alone, shape (batch, 1)
        nodes.append(helper.make_node("Identity", ["total"], ["logits"]))
    else:
        inits += [const("scale", scale), const("per_token", per_token), const("bias", bias)]
        inits.append(numpy_helper.from_array(delta.astype(np.float32), "delta"))
        nodes += [
            helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", ["mask_f", "axes"], ["count"], keepdims=1),
            helper.make_node("Mul", ["total", "scale"], ["a"]),
            helper.make_node("Mul", ["count", "per_token"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["ab"]),
            helper.make_node("Add", ["ab", "bias"], ["affine"]),
            helper.make_node("Add", ["affine", "delta"], ["logits"]),
        ]
    width = 1 if one_column else len(scale)
    graph = helper.make_graph(
        nodes,
        "fake",
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


_DELTAS = (0.25, -0.25, 0.5, 3.0, 2.0**-12, 2.0**-13, 2.0**-14, -(2.0**-14), 1e-3, math.nan, math.inf, -math.inf)


def _parity_cases():
    """Hypothesis: (case,), the case a dict of plain data (see the comment above)."""
    from hypothesis import strategies as st

    file = st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["model"] * 8 + ["one column", "not a model", "no file"]),
            "scale": st.integers(1, 5).flatmap(
                lambda c: st.lists(st.sampled_from([0, 1, 2, 3, 40, 44]), min_size=c, max_size=c)
            ),
            "per_token": st.sampled_from([0, 1, -2]),
            "bias": st.integers(-4, 4),
            "cells": st.lists(st.tuples(st.integers(0, 7), st.integers(0, 4), st.sampled_from(_DELTAS)), max_size=3),
        }
    )

    @st.composite
    def case(d):
        main = d(file)
        finite = [abs(v) for _, _, v in main["cells"] if math.isfinite(v)]
        top = max(finite, default=0.0)
        tol = d(
            st.one_of(
                st.just(None),  # left at its default
                st.sampled_from([0, 0.0, 1e-4, 2.0**-14, 0.2499, 0.25, 1.0, 10, 1e3]),
                st.sampled_from([top, top, max(top - 5e-7, 0.0)]),  # exactly the difference, and just below it
            )
        )
        return {
            "file": main,
            "before": d(st.one_of(st.none(), file)),  # a first call on another file at the same path
            "rows": d(st.integers(1, 6)),
            "tokens": d(st.integers(1, 8)),
            "seed": d(st.integers(0, 2**16)),
            "pad_id": d(st.sampled_from([0, 1])),
            "mask_first": d(st.booleans()),
            "tol": tol,
            "train": d(st.booleans()),
            "as_str": d(st.booleans()),
        }

    return case().map(lambda c: (c,))  # the argument tuple


def _parity_batch(case: dict) -> dict:
    rows, tokens = case["rows"], case["tokens"]
    g = np.random.default_rng(case["seed"])
    lengths = g.integers(1, tokens + 1, rows)
    lengths[0] = tokens  # one row fills the sequence
    mask = (np.arange(tokens)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, g.integers(2, 50, (rows, tokens)), case["pad_id"]).astype(np.int64)
    keys = ("attention_mask", "input_ids") if case["mask_first"] else ("input_ids", "attention_mask")
    return {k: {"input_ids": ids, "attention_mask": mask}[k] for k in keys}


def _write_case_file(path: Path, f: dict, rows: int) -> _Fake:
    scale = f["scale"]
    per_token, bias = [f["per_token"]] * len(scale), [f["bias"] * k for k in range(len(scale))]
    path.unlink(missing_ok=True)
    if f["kind"] == "not a model":
        path.write_bytes(b"this is not an ONNX model")
    elif f["kind"] != "no file":
        delta = np.zeros((rows, len(scale)), np.float32)
        for r, c, v in f["cells"]:
            delta[r % rows, c % len(scale)] = v
        _fake_onnx(path, scale, per_token, bias, delta, one_column=f["kind"] == "one column")
    return _Fake(scale, per_token, bias)


def _never_passes(f: dict, rows: int) -> bool:
    """A case where any exception is the right answer: NaN, a shape mismatch, a file ONNX Runtime cannot load."""
    if f["kind"] in ("not a model", "no file") or (f["kind"] == "one column" and len(f["scale"]) > 1):
        return True
    return f["kind"] == "model" and any(math.isnan(v) for r, c, v in f["cells"])


def _parity_call(parity_check, case: dict, f: dict, folder: Path) -> tuple:
    path = folder / "model.onnx"
    model = _write_case_file(path, f, case["rows"])
    model.train(case["train"])
    batch = _parity_batch(case)
    kept = {k: v.copy() for k, v in batch.items()}
    given = str(path) if case["as_str"] else path
    try:
        if case["tol"] is None:
            value = parity_check(model, given, batch)
        else:
            value = parity_check(model, given, batch, tol=case["tol"])
        out = ("returns", value)
    except (NotImplementedError, LabCheckFailed):
        raise
    except AssertionError:
        out = ("refuses",)
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything
        out = ("refuses",) if _never_passes(f, case["rows"]) else ("raises", f"{type(e).__name__}: {_first_line(e)}")
    if list(batch) != list(kept) or any(not np.array_equal(batch[k], kept[k]) for k in kept):
        out = ("changes the batch it was given",)
    return out


def _parity_player(parity_check):
    def play(case: dict) -> list:
        folder = Path(tempfile.mkdtemp(dir=scratch_dir("ailab-lab-export-diff-")))
        try:
            calls = [] if case["before"] is None else [_parity_call(parity_check, case, case["before"], folder)]
            return calls + [_parity_call(parity_check, case, case["file"], folder)]
        finally:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)

    return play


def _say_file(f: dict, rows: int) -> str:
    if f["kind"] == "not a model":
        return "a file that is not an ONNX model"
    if f["kind"] == "no file":
        return "no file at all"
    c = len(f["scale"])
    if f["kind"] == "one column":
        if c == 1:
            return "an ONNX model that outputs the sum of the kept ids alone (PyTorch's logit adds more)"
        return f"an ONNX model whose output has 1 column where PyTorch's has {c}"
    cells = [f"{v:+g} at row {r % rows}, class {c_ % c}" for r, c_, v in f["cells"]]
    return f"an ONNX twin of a {c}-class model, " + (
        "its output off by " + "; ".join(cells) if cells else "equal to PyTorch's everywhere"
    )


def _say_case(case: dict) -> str:
    rows, tol = case["rows"], case["tol"]
    keys = list(_parity_batch(case))
    said = (
        f"a batch of shape ({rows}, {case['tokens']}) (padding id {case['pad_id']}, keys {keys}), "
        + ("tol left at its default" if tol is None else f"tol={tol!r}")
        + f", the model in {'training' if case['train'] else 'eval'} mode, "
        f"the path as a {'str' if case['as_str'] else 'Path'}: "
    )
    if case["before"] is not None:
        said += f"first {_say_file(case['before'], rows)}, then at the same path "
    return said + _say_file(case["file"], rows)


def _same_parity(mine: list, ref: list) -> str | None:
    for k, (m, r) in enumerate(zip(mine, ref), 1):
        at = f"at call {k}: " if len(ref) > 1 else ""
        if r[0] == "returns" and m[0] == "returns":
            if not isinstance(m[1], (float, np.floating)):
                return f"{at}parity_check should return the max absolute difference as a float, {r[1]!r}; got {m[1]!r}"
            how = differential.close(rel=1e-6, abs_=1e-12)(float(m[1]), r[1])
            if how:
                return f"{at}the max |onnx - torch| is {r[1]!r}; yours returned {float(m[1])!r}"
            continue
        if m[0] == r[0] and m[0] != "raises":
            continue
        said = {"returns": lambda o: f"returns {o[1]!r}", "refuses": lambda o: "raises AssertionError"}
        ref_said = said.get(r[0], lambda o: f"raises {o[1]}")(r)
        mine_said = said.get(m[0], lambda o: f"raises {o[1]}" if len(o) > 1 else o[0])(m)
        return f"{at}the reference {ref_said}; yours {mine_said}"
    return None


def _edge(cells=(), tol=None, before=None, small=False, kind="model", per_token=1, **case) -> tuple:
    """A case the contract names, as the argument tuple: a 5-class twin on a (4, 6) batch, eval mode, a Path;
    logits in the thousands, or below 512 with `small` (where float32 still holds a difference of 2**-14)."""
    scale = [1, 1, 1, 1, 1] if small else [40, 41, 42, 43, 44]
    file = {"kind": kind, "scale": scale, "per_token": per_token, "bias": 0, "cells": list(cells)}
    base = {"file": file, "before": before, "rows": 4, "tokens": 6, "seed": 1, "pad_id": 0, "mask_first": False}
    base.update({"tol": tol, "train": False, "as_str": False})
    base.update(case)
    return (base,)


_PARITY_EDGES = (
    _edge([(2, 4, 0.25)], tol=0.25),  # a difference equal to tol passes
    _edge([(3, 3, -0.25)], tol=1.0),  # below PyTorch's, in the last row: the largest |difference|
    _edge([(1, 2, 2.0**-12)], small=True),  # 2.4e-4 fails the default 1e-4
    _edge([(1, 2, 2.0**-14)], small=True, tol=0),  # 6.1e-5 fails a tol of 0: 0 is a tolerance, not "none given"
    _edge([(1, 2, 2.0**-14)], small=True, tol=2.0**-14),  # 6.1e-5 exactly at tol: returned as it is, not rounded
    _edge([(2, 4, 0.25)], tol=0.25 - 5e-7),  # just above tol fails
    _edge([(0, 0, 0.5)], tol=1.0, before=_edge()[0]["file"]),  # another model rewritten at the same path
    _edge(mask_first=True, pad_id=1, tol=0.0),  # keys in another order; padding id 1
    _edge([(0, 0, 0.25)], tol=0.2499, train=True, as_str=True),  # training mode; logits in the thousands
    _edge([(2, 3, math.nan)], tol=1.0),  # a NaN never passes
    _edge(kind="one column", small=True, per_token=0, tol=1.0),  # (4, 1) against (4, 5) equal columns: no broadcasting
    _edge(kind="not a model", tol=1.0),  # ONNX Runtime cannot load it: its error, not a difference
)


@check(LAB, "parity check does what the reference does on any model, batch, difference and tol")
def check_parity_same_as_reference(parity_check):
    differential.same_as_reference(
        _parity_player(parity_check),
        _parity_player(_reference_parity_check),
        _parity_cases(),
        describe=_say_case,
        compare=_same_parity,
        edges=_PARITY_EDGES,
        arg_names=("case",),
        examples=30,
    )
