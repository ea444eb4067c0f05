"""ailab.profiling: torch.profiler's operator table grouped into the parts of a step, checked against what the
decoder's code says a step runs."""

from __future__ import annotations

import json

import pytest
import torch

from ailab.generation import Decoder, PagedKVCache
from ailab.generation.decode import decode_paged
from ailab.models import tiny_gpt
from ailab.profiling import part_of, profile_steps


def test_operators_fall_into_the_parts_the_course_names():
    assert part_of("aten::addmm") == part_of("aten::mm") == "matmul"
    assert part_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert part_of("aten::index_select") == "KV gather"
    assert part_of("aten::native_layer_norm") == "layer norm"
    assert part_of("aten::view") == "copies and views"
    assert part_of("aten::add") == "other"


def test_a_decode_step_profiled_counts_what_the_decoder_runs(tmp_path):
    model = Decoder(tiny_gpt("1m"))  # 4 layers
    pool = PagedKVCache.for_model(model, 64, 16)
    for i in range(4):
        pool.allocator.allocate(i, 40)
    view, token = pool.view(list(range(4)), 1), torch.zeros(4, 1, dtype=torch.long)
    with torch.inference_mode():
        report = profile_steps(
            lambda: decode_paged(model, view, token), steps=3, label="decode_step", trace_dir=tmp_path
        )
    rows = {r.name: r for r in report.rows}
    # four matmuls a layer through addmm (QKV, attention out, MLP in and out), and the tied head's one mm
    assert rows["aten::addmm"].calls_per_step == 4 * model.n_layer
    assert "[4, 128]" in rows["aten::addmm"].shapes  # 4 sequences, 128 wide
    assert rows["aten::_scaled_dot_product_flash_attention_for_cpu"].calls_per_step == model.n_layer
    assert sum(report.shares.values()) == pytest.approx(1.0)
    assert set(report.shares) >= {"matmul", "attention", "KV gather"}
    assert report.ranges["decode_step"] >= report.self_ms_per_step * 0.5 > 0
    assert report.calls_per_step > 100  # every view and transpose is a call: what a step pays whatever its size
    trace = json.loads(open(report.trace_path).read())
    assert any(e.get("name") == "decode_step" for e in trace["traceEvents"])
    assert "aten::addmm" in report.table(5)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="steps >= 1"):
        profile_steps(lambda: None, steps=0)
