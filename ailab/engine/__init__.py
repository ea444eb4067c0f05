"""The inference engine: one Runner interface over PyTorch eager and ONNX Runtime, ONNX export with a
parity check, and a text classifier with per-stage timing.

- runners.py  InputSpec, check_batch, Runner, TorchRunner, OnnxRunner
- export.py   export_onnx (dynamic axes + parity), ExportResult, ExportParityError
- int8.py     quantize_dynamic_int8 (ONNX Runtime dynamic INT8; ailab.quantize re-exports it)
- fusion.py   ONNX Runtime's transformer fusions: export_for_fusion, fuse_transformer, node counts before and after
- text.py     TextClassifierRunner (stage timing), slow vs fast tokenizer, sentiment_onnx (every engine for the
              sentiment model is built by ailab.variants.build_variant)
"""

from ailab.engine.runners import (
    InputSpec,
    describe_spec,
    check_batch,
    spec_from_sample,
    Runner,
    TorchRunner,
    onnx_precision,
    OnnxRunner,
)
from ailab.engine.export import (
    ExportParityError,
    ExportResult,
    default_dynamic_axes,
    resized_sample,
    export_onnx,
)
from ailab.engine.text import (
    ClassifierWithEmbedding,
    text_input_spec,
    StageTimings,
    TextPrediction,
    softmax,
    TextClassifierRunner,
    stage_breakdown,
    slow_tokenizer,
    TokenizerComparison,
    compare_tokenizers,
    weights_key,
    sentiment_onnx,
)

__all__ = [
    "InputSpec",
    "describe_spec",
    "check_batch",
    "spec_from_sample",
    "Runner",
    "TorchRunner",
    "onnx_precision",
    "OnnxRunner",
    "ExportParityError",
    "ExportResult",
    "default_dynamic_axes",
    "resized_sample",
    "export_onnx",
    "ClassifierWithEmbedding",
    "text_input_spec",
    "StageTimings",
    "TextPrediction",
    "softmax",
    "TextClassifierRunner",
    "stage_breakdown",
    "slow_tokenizer",
    "TokenizerComparison",
    "compare_tokenizers",
    "weights_key",
    "sentiment_onnx",
]
