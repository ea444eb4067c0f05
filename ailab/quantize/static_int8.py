"""INT8 static (calibrated) through ONNX Runtime: activation ranges fixed ahead of time from calibration
samples, QDQ format. (INT8 dynamic lives in the engine: ailab.engine.int8.)"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ailab.engine import OnnxRunner, check_batch
from ailab.engine.export import quiet_logger


def _reader_base():
    from onnxruntime.quantization import CalibrationDataReader

    return CalibrationDataReader


class CalibrationReader(_reader_base()):
    """Feeds calibration batches (dicts of input name -> array) to onnxruntime's calibrator, then None.

    The samples must look like production inputs: the ranges observed here become the fixed INT8
    scales of every activation.
    """

    def __init__(self, batches: Iterable[Mapping[str, np.ndarray]]):
        self.batches = [{k: np.ascontiguousarray(v) for k, v in b.items()} for b in batches]
        if not self.batches:
            raise ValueError(
                "the calibration set is empty: static INT8 needs real, representative samples "
                "to measure activation ranges (a few hundred rows is typical)"
            )
        if any(not isinstance(b, Mapping) or not b for b in self.batches):
            raise TypeError("each calibration batch must be a non-empty dict of input name -> array")
        self.rows = sum(len(next(iter(b.values()))) for b in self.batches)
        self._i = 0

    def get_next(self):
        if self._i >= len(self.batches):
            return None
        self._i += 1
        return self.batches[self._i - 1]

    def rewind(self):
        self._i = 0

    def __len__(self):
        return len(self.batches)


CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


def quantize_static_int8(
    path: str | os.PathLike,
    reader: CalibrationReader,
    out: str | os.PathLike | None = None,
    method: str = "minmax",
    per_channel: bool = False,
    op_types: Sequence[str] | None = None,
    percentile: float = 99.999,
) -> Path:
    """INT8 weights *and* activations, with activation ranges measured on `reader`'s samples; QDQ format.

    method: 'minmax' (the observed range: one outlier stretches it), 'entropy' (the range that keeps
    the histogram's information), 'percentile' (clip values beyond the `percentile`-th percentile; the
    default 99.999 ignores an outlier only when there are well over 100,000 values).
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX model at {path}; export one with ailab.engine.export_onnx()")
    if not isinstance(reader, CalibrationReader):
        raise TypeError(f"reader must be an ailab.quantize.CalibrationReader, got {type(reader).__name__}")
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method={method!r}; choose one of {CALIBRATION_METHODS}")
    spec = OnnxRunner(path).input_spec
    for b in reader.batches:  # a wrong calibration batch fails here, in words, not inside the calibrator
        check_batch(b, spec, f"calibration for {path.name}")
    if not 50.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (50, 100], got {percentile}")
    if method != "minmax" and len({tuple(v.shape for v in b.values()) for b in reader.batches}) > 1:
        raise ValueError(
            f"method={method!r} builds histograms and needs every calibration batch to have the same "
            "shape; make them with batches_of(..., drop_last=True) and pad text to a fixed length"
        )
    calib = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[method]
    out = Path(out) if out is not None else path.with_name(f"{path.stem}.int8-static-{method}.onnx")
    reader.rewind()
    tmp = out.with_name(out.stem + f".tmp{os.getpid()}.onnx")
    with quiet_logger(""), contextlib.redirect_stdout(io.StringIO()):  # histogram calibrators print progress lines
        quantize_static(
            str(path),
            str(tmp),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            calibrate_method=calib,
            op_types_to_quantize=list(op_types) if op_types else None,
            extra_options={"CalibPercentile": percentile} if method == "percentile" else None,
        )
    os.replace(tmp, out)
    for leftover in Path.cwd().glob("augmented_model*.onnx"):  # older calibrators drop this in the cwd
        leftover.unlink(missing_ok=True)
    return out
