"""ONNX Runtime's transformer fusions: the graph they need, the optimizer that applies them, and what it changed.

The optimizer rewrites attention, residual + layer norm, bias + GELU and embeddings + layer norm into one
operator each. Its pattern matcher knows the graph the TorchScript exporter writes for *eager* attention, not
the dynamo exporter's SDPA graph (measured: nothing but BiasGelu fused there), so `export_for_fusion` exports
the classifier that way first. `op_counts` and `fusion_summary` count the nodes before and after, and
`session_op_counts` what ONNX Runtime fuses by itself when it loads a graph.
ailab.variants builds its `ort_fused` and `ort_fused_int8` variants from these.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from ailab.engine.export import ExportParityError, quiet_logger
from ailab.engine.runners import OnnxRunner
from ailab.engine.text import ClassifierWithEmbedding, weights_key


def op_counts(path: str | os.PathLike) -> dict[str, int]:
    """How many nodes of each operator type the ONNX graph at `path` holds, most frequent first."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return dict(Counter(n.op_type for n in graph.node).most_common())


def session_op_counts(path: str | os.PathLike) -> dict[str, int]:
    """Node counts of the graph as an ONNX Runtime session rewrites it at load time (its own optimisations,
    level 'all'): what ORT fuses by itself, without the offline transformer optimizer."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ailab-ort-") as tmp:
        opts = ort.SessionOptions()
        opts.optimized_model_filepath = str(Path(tmp) / "session.onnx")
        opts.log_severity_level = 3  # it warns that the saved graph holds this CPU's layouts: we only count nodes
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return op_counts(opts.optimized_model_filepath)


def export_for_fusion(classifier, path: str | os.PathLike | None = None, tolerance: float = 1e-4) -> Path:
    """The classifier (logits + embedding) exported with eager attention by the TorchScript exporter: the graph
    ONNX Runtime's transformer optimizer can fuse. Checked against PyTorch at two shapes; cached by weights."""
    from ailab.models import cache_dir

    path = Path(path) if path is not None else cache_dir() / "onnx" / f"sentiment-eager-{weights_key(classifier)}.onnx"
    if path.exists():
        return path
    model = copy.deepcopy(classifier).eval()
    model.encoder.bert.config._attn_implementation = "eager"  # explicit matmul-softmax-matmul: the fusable pattern
    wrapped = ClassifierWithEmbedding(model).eval()
    ids, mask = torch.randint(1000, 5000, (2, 16)), torch.ones(2, 16, dtype=torch.long)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + f".tmp{os.getpid()}.onnx")
    axes = {"batch": 0, "seq": 1}
    with warnings.catch_warnings(), quiet_logger("torch.onnx"):
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated in favour of dynamo; we want its graph
        torch.onnx.export(
            wrapped,
            (ids, mask),
            str(tmp),
            dynamo=False,
            opset_version=17,
            input_names=["input_ids", "attention_mask"],
            output_names=["logits", "sentence_embedding"],
            dynamic_axes={n: {a: k for k, a in axes.items()} for n in ("input_ids", "attention_mask")},
        )
    _check_parity(wrapped, tmp, tolerance)
    os.replace(tmp, path)
    return path


def _check_parity(wrapped, path: Path, tolerance: float) -> float:
    """Max |ONNX - torch| over both outputs at a short and a long, partly padded batch; raise past `tolerance`."""
    runner, worst = OnnxRunner(path, threads=None), 0.0
    gen = torch.Generator().manual_seed(0)
    for b, t in ((2, 16), (3, 40)):
        ids = torch.randint(1000, 5000, (b, t), generator=gen)
        mask = torch.ones(b, t, dtype=torch.long)
        mask[0, t // 2 :] = 0  # (B, T): padding must be masked the same way in both
        with torch.no_grad():
            ref = [r.numpy() for r in wrapped(ids, mask)]
        got = runner.run_all({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        worst = max(worst, *(float(np.abs(r - g).max()) for r, g in zip(ref, got)))
    if not worst <= tolerance:
        raise ExportParityError(
            f"{path.name}: ONNX Runtime differs from PyTorch by up to {worst:.3e} > {tolerance:.0e}"
        )
    return worst


def fuse_transformer(
    path: str | os.PathLike, num_heads: int, hidden_size: int, out: str | os.PathLike | None = None
) -> Path:
    """ONNX Runtime's transformer optimizer on a BERT graph: `<stem>.fused.onnx` beside it (reused when fresh)."""
    from onnxruntime.transformers.optimizer import optimize_model

    path = Path(path)
    out = Path(out) if out is not None else path.with_name(f"{path.stem}.fused.onnx")
    if out.exists() and out.stat().st_mtime >= path.stat().st_mtime:
        return out
    with quiet_logger("onnxruntime.transformers"), quiet_logger(""), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = optimize_model(str(path), model_type="bert", num_heads=num_heads, hidden_size=hidden_size)
    tmp = out.with_name(out.stem + f".tmp{os.getpid()}.onnx")
    fused.save_model_to_file(str(tmp))
    os.replace(tmp, out)
    return out


FUSED_OPS = ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu", "QAttention")


def fusion_summary(before: str | os.PathLike, after: str | os.PathLike) -> dict:
    """Node counts before and after fusion: the fused operators found, and how many nodes the graph lost."""
    a, b = op_counts(before), op_counts(after)
    return {
        "nodes_before": sum(a.values()),
        "nodes_after": sum(b.values()),
        "fused": {op: b.get(op, 0) for op in FUSED_OPS if b.get(op, 0)},
        "matmul_before": a.get("MatMul", 0),
        "matmul_after": b.get("MatMul", 0),
    }
