"""Lab export_verify: the checks pass the right answers and fail the stub and plausible wrong ones.

Each wrong answer is a mistake of a different kind (a fixed axis, a wrong name or dtype, a constant where an
argument belongs, a mean where a max belongs, the sign of a difference, a strict comparison at the boundary, a
relative tolerance, a swallowed error, silent broadcasting), and each must be refused with a message that
names what to look at.

export_dynamic(model, sample, path) -> path
| question | what the checks try |
|---|---|
| which input varies each field | the path (returned as given), the sample (its shape must not be baked in; drawn by the differential check: 2-6 rows, 2-24 tokens) |
| boundaries | one row, one token; more rows and longer texts than the sample; the smallest sample (2 x 2, square); a file already at the path |
| a shape the notes never show | shapes the export never saw, run through ONNX Runtime |
| order or ties | - |
| errors: type and message | one self-contained file; inputs input_ids and attention_mask (int64, both axes symbolic), output logits |
| policy: which item | - |

parity_check(model, onnx_path, batch, tol=1e-4) -> float
| question | what the checks try |
|---|---|
| which input varies each field | the difference set exactly at one element (hand-built ONNX graphs), the tolerance alone, the batch alone |
| boundaries | a difference equal to tol (passes); just above (raises); tol left at its default; logits large enough that a relative tolerance differs |
| a shape the notes never show | a difference in one row only; a negative difference; outputs of different shapes |
| order or ties | - |
| errors: type and message | AssertionError exactly when the difference exceeds tol; never success for NaN, a shape mismatch (no silent broadcasting) or a file ONNX Runtime cannot load; the model compared in eval mode |
| policy: which item | which difference: the largest absolute one, not a mean, signed, or over one row |
"""

import numpy as np
import onnxruntime as ort
import pytest
import torch

from ailab.labs import LabCheckFailed
from ailab.labs import lab_export_verify as lab


# --------------------------------------------------------------------------------------------------- exports
def _export(model, sample, path, axes, cast=None, **kwargs):
    dims = {}
    shapes = {
        n: {a: dims.setdefault(label, torch.export.Dim(label)) for a, label in axes.items()} or None for n in sample
    }
    args = (sample["input_ids"], sample["attention_mask"])
    if cast is not None:
        args = tuple(a.to(cast) for a in args)
    options = dict(input_names=["input_ids", "attention_mask"], output_names=["logits"], external_data=False)
    options.update(kwargs)
    torch.onnx.export(
        model.eval(), args, str(path), dynamo=True, dynamic_shapes=shapes if axes else None, verbose=False, **options
    )
    return path


def right_export(model, sample, path):  # the solution's code
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


def fixed_export(model, sample, path):  # forgot dynamic_shapes
    return _export(model, sample, path, {})


def batch_only_export(model, sample, path):  # batch dynamic, sequence length frozen
    return _export(model, sample, path, {0: "batch"})


def seq_only_export(model, sample, path):  # sequence dynamic, batch frozen
    return _export(model, sample, path, {1: "seq"})


def one_row_export(model, sample, path):  # traces a single row: size 1 is specialised, the batch axis is fixed
    one = {k: v[:1] for k, v in sample.items()}
    return _export(model, one, path, {1: "seq"})


def unnamed_output_export(model, sample, path):  # forgot output_names: the output gets the exporter's name
    return _export(model, sample, path, {0: "batch", 1: "seq"}, output_names=None)


def wrong_input_names_export(model, sample, path):
    return _export(model, sample, path, {0: "batch", 1: "seq"}, input_names=["ids", "mask"])


def external_data_export(model, sample, path):  # the default external_data=True: weights in a second file
    return _export(model, sample, path, {0: "batch", 1: "seq"}, external_data=True)


def int32_export(model, sample, path):  # "saves memory": the graph now refuses the int64 ids the tokenizer gives
    return _export(model, sample, path, {0: "batch", 1: "seq"}, cast=torch.int32)


def program_export(model, sample, path):  # returns what torch.onnx.export returns, not the path
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    axes = {0: batch, 1: seq}
    return torch.onnx.export(
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


def fixed_path_export(model, sample, path):  # a constant where the argument belongs
    target = path.parent.parent / "model.onnx"
    right_export(model, sample, target)
    return target


def cached_export(model, sample, path):  # "skip the slow export when the file is already there": returns a stale file
    from pathlib import Path

    if Path(path).exists():
        return path
    return right_export(model, sample, path)


def stub(*args, **kwargs):
    raise NotImplementedError("write it")


# ------------------------------------------------------------------------------------------- parity checks
def _outputs(model, onnx_path, batch, eval_mode=True):
    got = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, batch)[0]
    if eval_mode:
        model.eval()
    with torch.no_grad():
        ref = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    return got, ref


def right_parity(model, onnx_path, batch, tol=1e-4):  # the solution's code
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape, f"ONNX output shape {got.shape} != PyTorch {ref.shape}"
    diff = float(np.abs(got.astype(np.float64) - ref.astype(np.float64)).max())
    assert diff <= tol, f"ONNX differs from PyTorch by {diff:.2e} > tol {tol:.0e}"
    return diff


def explicit_parity(model, onnx_path, batch, tol=1e-4):  # also right: float32 arithmetic, explicit raise, NaN caught
    got, ref = _outputs(model, onnx_path, batch)
    if got.shape != ref.shape:
        raise AssertionError(f"shapes {got.shape} vs {ref.shape}")
    diff = np.max(np.abs(got - ref))
    if np.isnan(diff) or diff > tol:
        raise AssertionError(f"max |onnx - torch| = {diff}")
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


def mean_parity(model, onnx_path, batch, tol=1e-4):  # a mean where the max belongs
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).mean())
    assert diff <= tol
    return diff


def signed_parity(model, onnx_path, batch, tol=1e-4):  # no abs(): an ONNX output below PyTorch's goes unseen
    got, ref = _outputs(model, onnx_path, batch)
    diff = float((got - ref).max())
    assert diff <= tol
    return diff


def first_row_parity(model, onnx_path, batch, tol=1e-4):  # compares the first row only
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got[0] - ref[0]).max())
    assert diff <= tol
    return diff


def strict_parity(model, onnx_path, batch, tol=1e-4):  # `<`: a difference equal to tol is refused
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).max())
    assert diff < tol
    return diff


def relative_parity(model, onnx_path, batch, tol=1e-4):  # np.allclose's default rtol loosens large logits
    got, ref = _outputs(model, onnx_path, batch)
    assert np.allclose(got, ref, atol=tol)
    return float(np.abs(got - ref).max())


def train_mode_parity(model, onnx_path, batch, tol=1e-4):  # forgets eval(): dropout makes PyTorch's side random
    got, ref = _outputs(model, onnx_path, batch, eval_mode=False)
    diff = float(np.abs(got - ref).max())
    assert diff <= tol
    return diff


def nan_blind_parity(model, onnx_path, batch, tol=1e-4):  # `if diff > tol`: NaN > tol is False, so NaN passes
    got, ref = _outputs(model, onnx_path, batch)
    if got.shape != ref.shape:
        raise AssertionError("shapes differ")
    diff = float(np.abs(got - ref).max())
    if diff > tol:
        raise AssertionError(f"differs by {diff}")
    return diff


def nanmax_parity(model, onnx_path, batch, tol=1e-4):  # np.nanmax skips the NaN it should report
    got, ref = _outputs(model, onnx_path, batch)
    assert got.shape == ref.shape
    diff = float(np.nanmax(np.abs(got - ref)))
    assert diff <= tol
    return diff


def broadcasting_parity(model, onnx_path, batch, tol=1e-4):  # no shape check: (4, 1) - (4, 5) broadcasts
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).max())
    assert diff <= tol
    return diff


def swallowing_parity(model, onnx_path, batch, tol=1e-4):  # a runtime error becomes "no difference"
    try:
        return right_parity(model, onnx_path, batch, tol)
    except AssertionError:
        raise
    except Exception:
        return 0.0


def value_error_parity(model, onnx_path, batch, tol=1e-4):  # the wrong exception type
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).max())
    if not diff <= tol:
        raise ValueError(f"differs by {diff}")
    return diff


def default_tol_parity(model, onnx_path, batch, tol=1e-3):  # the wrong default
    return right_parity(model, onnx_path, batch, tol)


def no_raise_parity(model, onnx_path, batch, tol=1e-4):  # reports, never raises
    got, ref = _outputs(model, onnx_path, batch)
    diff = float(np.abs(got - ref).max())
    if diff > tol:
        print(f"warning: differs by {diff}")
    return diff


def test_right_answers_pass():
    lab.check_dynamic_export(right_export)
    for parity in (right_parity, explicit_parity):
        lab.check_parity(parity)
        lab.check_parity_tolerance(parity)
        lab.check_parity_failures(parity)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (fixed_export, "fixed batch size"),
        (batch_only_export, "fixed sequence length"),
        (seq_only_export, "fixed batch size"),
        (one_row_export, "fixed batch size 1"),
        (unnamed_output_export, r"one output named logits .*got \['linear"),
        (wrong_input_names_export, r"named input_ids and attention_mask .*got \['ids', 'mask'\]"),
        (external_data_export, r"extra files next to the model \(\['mine\.onnx\.data'\]\)"),
        (int32_export, r"input_ids should take int64 token ids.*tensor\(int32\)"),
        (program_export, "should return the path it wrote the model to"),
        (fixed_path_export, "at the path it is given"),
        (stub, "not implemented"),
    ],
)
def test_export_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_dynamic_export(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (shapes_only_parity, "right shapes but different weights"),
        (fixed_tolerance_parity, "with tol=1e3 the same mismatch should pass"),
        (bool_parity, "as a float"),
        (stub, "not implemented"),
        (
            mean_parity,
            r"above PyTorch's by 0\.25 at one element .*max \|onnx - torch\| is 0\.25; parity_check returned 0\.0125",
        ),
        (signed_parity, r"below PyTorch's by 0\.25 .*returned 0\. Take the largest absolute difference"),
        (first_row_parity, r"the last row, class 3 .*returned 0\. Take the largest"),
        (
            train_mode_parity,
            r"training mode .*raised AssertionError.*; it should return 0\. Compare against the model in eval mode",
        ),
    ],
)
def test_parity_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_parity(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            strict_parity,
            r"differ by exactly 0\.25 at one element, with tol=0\.25: parity_check raised AssertionError.*; it should "
            r"return 0\.25\. Only a difference \*above\* tol fails",
        ),
        (fixed_tolerance_parity, r"with tol=0\.25: parity_check raised AssertionError"),
        (relative_parity, r"with tol=0\.2499: an absolute tolerance.*returned 0\.25; it should raise AssertionError"),
        (value_error_parity, r"raised ValueError .*raise AssertionError"),
        (
            default_tol_parity,
            r"called without tol \(the default is 1e-4\), outputs that differ by 2\.44e-04.*should raise",
        ),
        (no_raise_parity, r"tol=0\.2499.*returned 0\.25; it should raise AssertionError"),
        (stub, "not implemented"),
    ],
)
def test_tolerance_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_parity_tolerance(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (nan_blind_parity, r"holds a NaN .*returned nan"),
        (nanmax_parity, r"holds a NaN .*returned 0\.0"),
        (broadcasting_parity, r"shape \(4, 1\) and PyTorch's \(4, 5\), and parity_check returned 0\.0"),
        (swallowing_parity, r"cannot load broken\.onnx .*returned 0\.0"),
        (stub, "not implemented"),
    ],
)
def test_failures_check_rejects(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_parity_failures(wrong)


# --------------------------------------------------------------------------- the differential check (issue 42)
def positional_model_parity(model, onnx_path, batch, tol=1e-4):  # order: calls the model with the dict's values in turn
    got = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(*[torch.from_numpy(v) for v in batch.values()]).numpy()
    assert got.shape == ref.shape
    diff = float(np.abs(got - ref).max())
    assert diff <= tol
    return diff


def zipped_feed_parity(model, onnx_path, batch, tol=1e-4):  # order: pairs the graph's input names with the values
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in sess.get_inputs()], batch.values()))
    got = sess.run(None, feed)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape
    diff = float(np.abs(got - ref).max())
    assert diff <= tol
    return diff


def zero_tol_is_default_parity(model, onnx_path, batch, tol=1e-4):  # boundary: `tol or 1e-4` - 0 means "not given"
    return right_parity(model, onnx_path, batch, tol or 1e-4)


def slack_parity(model, onnx_path, batch, tol=1e-4):  # boundary: "float slack" of 1e-6 above tol
    got, ref = _outputs(model, onnx_path, batch)
    assert got.shape == ref.shape
    diff = float(np.abs(got - ref).max())
    assert diff <= tol + 1e-6
    return diff


_SESSIONS: dict = {}


def session_cache_parity(model, onnx_path, batch, tol=1e-4):  # state: one InferenceSession per path, kept forever
    key = str(onnx_path)
    if key not in _SESSIONS:
        _SESSIONS[key] = ort.InferenceSession(key, providers=["CPUExecutionProvider"])
    got = _SESSIONS[key].run(None, batch)[0]
    with torch.no_grad():
        ref = model.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    assert got.shape == ref.shape
    diff = float(np.abs(got.astype(np.float64) - ref).max())
    assert diff <= tol
    return diff


def masks_in_place_parity(model, onnx_path, batch, tol=1e-4):  # state: zeroes the caller's padding ids in place
    batch["input_ids"] *= batch["attention_mask"]
    return right_parity(model, onnx_path, batch, tol)


def rounded_parity(model, onnx_path, batch, tol=1e-4):  # rounding: the difference rounded to 4 places, as printed
    got, ref = _outputs(model, onnx_path, batch)
    assert got.shape == ref.shape
    diff = round(float(np.abs(got - ref).max()), 4)
    assert diff <= tol
    return diff


def float16_parity(model, onnx_path, batch, tol=1e-4):  # units: compares in float16 "to ignore noise"
    got, ref = _outputs(model, onnx_path, batch)
    assert got.shape == ref.shape
    diff = float(np.abs(got.astype(np.float16) - ref.astype(np.float16)).max())
    assert diff <= tol
    return diff


NEW_WRONG = [
    positional_model_parity,
    zipped_feed_parity,
    zero_tol_is_default_parity,
    slack_parity,
    session_cache_parity,
    masks_in_place_parity,
    rounded_parity,
    float16_parity,
]


@pytest.mark.parametrize("parity", [right_parity, explicit_parity])
def test_right_answers_agree_with_the_reference(parity):
    lab.check_parity_same_as_reference(parity)


@pytest.mark.parametrize(
    "wrong",
    [
        shapes_only_parity,
        fixed_tolerance_parity,
        bool_parity,
        mean_parity,
        signed_parity,
        first_row_parity,
        strict_parity,
        relative_parity,
        train_mode_parity,
        nan_blind_parity,
        nanmax_parity,
        broadcasting_parity,
        swallowing_parity,
        value_error_parity,
        default_tol_parity,
        no_raise_parity,
        stub,
        *NEW_WRONG,
    ],
)
def test_the_differential_check_catches_every_wrong_parity_check(wrong):
    _SESSIONS.clear()
    with pytest.raises(LabCheckFailed, match="the reference|max \\|onnx - torch\\||as a float|not implemented"):
        lab.check_parity_same_as_reference(wrong)


def test_the_differential_check_names_the_case_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        lab.check_parity_same_as_reference(session_cache_parity)
    assert "then at the same path" in str(e.value) and "at call 2: the max |onnx - torch| is 0.5" in str(e.value)
    with pytest.raises(LabCheckFailed) as e:
        lab.check_parity_same_as_reference(zipped_feed_parity)
    assert "keys ['attention_mask', 'input_ids']" in str(e.value)


# --------------------------------------------------------------------------- the differential check (export)


def test_the_right_export_agrees_with_pytorch_on_any_sample():
    lab.check_dynamic_export_same_as_reference(right_export)


def test_an_export_that_keeps_a_stale_file_passes_the_listed_check_but_not_the_differential_one():
    lab.check_dynamic_export(cached_export)  # its folder is fresh: nothing stale to keep
    with pytest.raises(LabCheckFailed, match="a file already at the path") as e:
        lab.check_dynamic_export_same_as_reference(cached_export)
    assert "your code raised" in str(e.value), str(e.value)


@pytest.mark.parametrize("wrong", [fixed_export, batch_only_export, int32_export, fixed_path_export, stub])
def test_the_differential_export_check_catches_the_listed_wrong_exports(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_dynamic_export_same_as_reference(wrong)
