"""Lower precision, measured: fp16/bf16 casts, INT8 dynamic and static (calibrated) through ONNX Runtime,
and a QuantReport that accepts a model only within a stated accuracy drop (topics E3, E4).

    fp16/bf16  cast_runner(model, "bf16", ...)        a torch cast; checked per device
    INT8 dyn.  quantize_dynamic_int8(path)            weights INT8 ahead of time, activations per batch
    INT8 stat. quantize_static_int8(path, reader)     activations' ranges fixed from calibration samples
    gate       quant_report(candidate, fp32, inputs, labels).passed
    decoder    quantize_decoder(gpt, "int8" | "int4")      weight-only: the linear weights in fewer bits

torch.ao.quantization is deprecated; INT8 here goes through onnxruntime.quantization.

One concept per file: casts.py (fp16/bf16), static_int8.py (calibration), evaluate.py (held-out rows
through a runner), report.py (the gate and the QuantReport), weight_only.py (the decoder's weights). The
precision explorer's callback is ailab.widgets.precision_view.
"""

from __future__ import annotations

from ailab.engine.int8 import quantize_dynamic_int8  # INT8 dynamic lives in the engine
from ailab.quantize.casts import PrecisionSupport, cast_runner, model_size_bytes, precision_support
from ailab.quantize.evaluate import Evaluation, batches_of, evaluate, mean_cosine, text_inputs
from ailab.quantize.report import (
    DEFAULT_GATE_POINTS,
    GateResult,
    QuantReport,
    accuracy_gate,
    interleaved_latency,
    latency_batch,
    quant_report,
)
from ailab.quantize.static_int8 import CALIBRATION_METHODS, CalibrationReader, quantize_static_int8
from ailab.quantize.weight_only import (
    Int4WeightOnlyLinear,
    Int8WeightOnlyLinear,
    linear_weight_bytes,
    quantize_decoder,
)
