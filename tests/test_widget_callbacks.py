"""The callbacks behind the notebooks' widgets (DESIGN.md, Notebooks): plain functions that redraw from
numbers already measured or from a formula. For each: the right numbers at a few knob values, a value
out of range refused with words, and the figure's traces."""

from __future__ import annotations

import math

import pytest

from ailab import viz
from ailab.bench.sweep import rate_view
from ailab.engine.text import stage_view
from ailab.memory import PUBLISHED_CONFIGS, DecoderConfig
from ailab.memory.kv import kv_view
from ailab.retrieval import TradeOff, nprobe_figure, nprobe_view
from ailab.roofline import attainable, attainable_figure
from ailab.suites.serving_view import bucketing_view, padding_by_bucket
from ailab.widgets import precision_view

GiB = 2**30


# ----------------------------------------------------------------------------- 1_hardware/03: KV cache


def test_kv_view_numbers():
    llama = PUBLISHED_CONFIGS["Llama-2-7B"]
    kw = kv_view(llama, 2048, 8, "float16")
    assert 2048 in kw["x"] and kw["x"][-1] == 4096 and kw["y_title"] == "GiB"
    cache = kw["series"]["KV cache, batch 8, float16"]
    assert cache[kw["x"].index(2048)] == pytest.approx(8.0)  # 2 x 32 x 32 x 128 x 2048 x 8 x 2 bytes = 8 GiB
    assert "8.00 GiB" in kw["title"]
    fp32 = kv_view(llama, 2048, 8, "float32")["series"]["KV cache, batch 8, float32"]
    assert fp32[kw["x"].index(2048)] == pytest.approx(16.0)  # twice the bytes per element
    mistral = kv_view(PUBLISHED_CONFIGS["Mistral-7B-v0.1"], 2048, 8)["series"]["KV cache, batch 8, float16"]
    assert mistral[kw["x"].index(2048)] == pytest.approx(2.0)  # 8 KV heads of 32: a quarter
    weights = kw["series"]["weights, float16"]
    assert weights[0] == pytest.approx(6.74e9 * 2 / GiB) and len(set(weights)) == 1


def test_kv_view_names_the_measured_cache():
    tiny = DecoderConfig("tiny", 0.0, layers=4, heads=8, kv_heads=2, head_dim=32, max_context=512, source="here")
    kw = kv_view(tiny, 200, 3, "float16", measured={(200, 3, "float16"): tiny.kv_bytes(200, 3)})
    assert "allocated for real here: 614,400 bytes, the formula's count exactly" in kw["title"]
    assert list(kw["series"]) == ["KV cache, batch 3, float16"]  # no weights for a config without parameters
    assert "allocated" not in kv_view(tiny, 256, 3, measured={(200, 3, "float16"): 1})["title"]


def test_kv_view_refuses_out_of_range():
    llama = PUBLISHED_CONFIGS["Llama-2-7B"]
    with pytest.raises(ValueError, match="context window of 4096"):
        kv_view(llama, 8192, 1)
    with pytest.raises(ValueError, match="batch must be a positive"):
        kv_view(llama, 1024, 0)
    with pytest.raises(ValueError, match="not a dtype"):
        kv_view(llama, 1024, 1, "float13")


def test_kv_view_figure():
    fig = viz.line_chart(**kv_view(PUBLISHED_CONFIGS["Llama-3-8B"], 4096, 4, "bfloat16"))
    assert [t.name for t in fig.data] == ["KV cache, batch 4, bfloat16", "weights, bfloat16"]
    assert fig.layout.xaxis.type == "log"


# ----------------------------------------------------------------------------- 1_hardware/05: roofline

OPS = [
    {"op": "GELU", "intensity": 0.25, "gflops": 3.0, "p50_ms": 0.1},
    {"op": "QKV projection", "intensity": 60.0, "gflops": 80.0, "p50_ms": 1.0},
]


def test_attainable_numbers():
    a = attainable(10.0, 100.0, 1.0, OPS)  # ridge at 10 FLOP/B
    assert a["attainable_gflops"] == pytest.approx(10.0) and a["bound"] == "memory"
    assert a["share_of_peak"] == pytest.approx(0.1) and a["ridge"] == pytest.approx(10.0)
    assert a["nearest_op"] == "GELU"
    b = attainable(10.0, 100.0, 50.0, OPS)
    assert (
        b["attainable_gflops"] == pytest.approx(100.0)
        and b["bound"] == "compute"
        and b["nearest_op"] == "QKV projection"
    )
    assert attainable(10.0, 100.0, 10.0)["nearest_op"] is None


def test_attainable_refuses_out_of_range():
    for bad in (0, -1, 1e5, "1"):
        with pytest.raises(ValueError, match="intensity must be"):
            attainable(10.0, 100.0, bad)


def test_attainable_figure():
    fig = attainable_figure(10.0, 100.0, OPS, 2.0)
    assert [t.name for t in fig.data][1:] == ["GELU", "QKV projection", "chosen intensity"]
    assert fig.data[0].name.startswith("roof:")
    assert list(fig.data[-1].y) == [pytest.approx(20.0)]
    assert "at most 20.0 GFLOP/s" in fig.layout.title.text and "memory-bound" in fig.layout.title.text


# ----------------------------------------------------------------------------- 4_application/01: offered rate


def _pt(offered, rps, p99, keeps_up, within):
    return {"offered_rps": offered, "rps": rps, "p99_ms": p99, "keeps_up": keeps_up, "within_slo": within}


POINTS = [
    _pt(40.0, 30.0, math.inf, False, False),
    _pt(10.0, 10.0, 60.0, True, True),
    _pt(20.0, 19.8, 150.0, True, True),
]


def test_rate_view_numbers():
    kw = rate_view(POINTS, 20.0, 300.0)
    assert kw["x"] == [10.0, 20.0, 40.0]
    assert kw["series"]["goodput, % of offered"] == pytest.approx([100.0, 99.0, 75.0])
    assert kw["series"]["p99, % of the 300 ms SLO"] == [pytest.approx(20.0), pytest.approx(50.0), None]
    assert "served 19.8 (99%), p99 150 ms: keeps up, within the SLO" in kw["title"]
    assert "no answer: falls behind, breaks the SLO" in rate_view(POINTS, 40.0, 300.0)["title"]


def test_rate_view_refuses_out_of_range():
    with pytest.raises(ValueError, match="was not measured; choose one of"):
        rate_view(POINTS, 15.0, 300.0)
    with pytest.raises(ValueError, match="slo_p99_ms must be positive"):
        rate_view(POINTS, 10.0, 0)


def test_rate_view_figure():
    fig = viz.line_chart(**rate_view(POINTS, 10.0, 300.0))
    assert [t.name for t in fig.data] == ["goodput, % of offered", "p99, % of the 300 ms SLO", "100 %"]


# ----------------------------------------------------------------------------- 4_application/06: nprobe

ROWS = [
    TradeOff("Flat (exact)", None, 1.0, 1.0, 1.5, 6.0),
    TradeOff("IVF-PQ", 1, 0.3, 0.05, 0.08, 0.3),
    TradeOff("IVF-PQ", 8, 0.5, 0.2, 0.3, 0.3),
    TradeOff("IVF-PQ + re-rank", 1, 0.5, 0.1, 0.2, 6.3),
    TradeOff("IVF-PQ + re-rank", 8, 0.9, 0.25, 0.4, 6.3),
]


def test_nprobe_view_numbers():
    v = nprobe_view(ROWS, 8)
    assert list(v) == ["IVF-PQ", "IVF-PQ + re-rank"]
    assert v["IVF-PQ + re-rank"]["recall_at_10"] == 0.9 and v["IVF-PQ + re-rank"]["speedup_vs_exact"] == pytest.approx(
        4.0
    )
    assert nprobe_view(ROWS, 1)["IVF-PQ"]["speedup_vs_exact"] == pytest.approx(20.0)


def test_nprobe_view_refuses_out_of_range():
    for bad in (2, 0, None):
        with pytest.raises(ValueError, match="was not measured; choose one of \\[1, 8\\]"):
            nprobe_view(ROWS, bad)


def test_nprobe_figure():
    fig = nprobe_figure(ROWS, 8)
    assert [t.name for t in fig.data] == ["Flat (exact)", "IVF-PQ", "IVF-PQ + re-rank", "nprobe=8"]
    assert list(fig.data[-1].y) == [0.5, 0.9] and list(fig.data[-1].x) == [0.2, 0.25]
    assert fig.layout.title.text.startswith("nprobe=8: IVF-PQ: recall 0.50") and "measured on" in fig.layout.title.text


# ----------------------------------------------------------------------------- 3_serving/03: bucket width


def test_padding_by_bucket_numbers():
    lengths = [5, 40, 6, 38, 7, 39]
    plain = padding_by_bucket(lengths, None, max_batch_size=4)
    # batches [5, 40, 6, 38] (padded to 40) and [7, 39] (padded to 39)
    assert plain["token_slots"] == 4 * 40 + 2 * 39 and plain["batches"] == 2 and plain["real_tokens"] == 135
    assert padding_by_bucket(lengths, 0, 4) == plain
    b16 = padding_by_bucket(lengths, 16, max_batch_size=4)
    # bands: short texts in band 0 -> [5, 6, 7] padded to 7; long ones in band 2 -> [40, 38, 39] padded to 40
    assert b16["token_slots"] == 3 * 7 + 3 * 40 and b16["batches"] == 2
    assert b16["padding_waste"] == pytest.approx(1 - 135 / 141)
    assert padding_by_bucket([3] * 10, 8, max_batch_size=4)["batches"] == 3


def test_padding_by_bucket_refuses_out_of_range():
    with pytest.raises(ValueError, match="bucket_tokens must be"):
        padding_by_bucket([5, 6], -4)
    with pytest.raises(ValueError, match="positive token counts"):
        padding_by_bucket([5, 0], 8)
    with pytest.raises(ValueError, match="max_batch_size"):
        padding_by_bucket([5, 6], 8, max_batch_size=0)
    with pytest.raises(ValueError, match="not one of the widths shown"):
        bucketing_view([5, 6], 12)


def test_bucketing_view_and_figure():
    lengths = [5, 40, 6, 38, 7, 39]
    measured = {None: {"padding_waste": 0.4, "texts_per_s": 100.0}, 16: {"padding_waste": 0.05, "texts_per_s": 150.0}}
    kw = bucketing_view(lengths, 16, widths=(0, 8, 16), max_batch_size=4, measured=measured)
    assert kw["categories"] == ["no buckets", "8 tokens", "16 tokens"]
    computed = kw["series"]["padding, computed from the lengths (%)"]
    assert computed[2] == pytest.approx(100 * (1 - 135 / 141)) and computed[0] > computed[2]
    assert kw["series"]["padding, measured through the batcher (%)"] == pytest.approx([40.0, 0.0, 5.0])
    assert "measured: 5.0% padding, 150 texts/s" in kw["title"]
    assert "measured" not in bucketing_view(lengths, 8, widths=(0, 8, 16), measured=measured)["title"]
    fig = viz.bar_chart(**kw)
    assert [t.name for t in fig.data] == [
        "padding, computed from the lengths (%)",
        "padding, measured through the batcher (%)",
    ]


# ----------------------------------------------------------------------------- 2_engine/02: stage shares

STAGE_ROWS = [
    {"model": "MiniLM", "batch_size": 32, "tokenize": 2.0, "forward": 36.0, "postprocess": 2.0},
    {"model": "MiniLM", "batch_size": 1, "tokenize": 0.2, "forward": 1.6, "postprocess": 0.2},
    {"model": "tiny BERT", "batch_size": 1, "tokenize": 0.3, "forward": 0.1, "postprocess": 0.1},
]


def test_stage_view_numbers():
    kw = stage_view(STAGE_ROWS, "MiniLM", 32)
    assert kw["categories"] == ["batch 1", "batch 32"]
    assert kw["series"]["forward"] == pytest.approx([80.0, 90.0]) and kw["series"]["tokenize"] == pytest.approx(
        [10.0, 5.0]
    )
    assert "forward 36.00 ms (90%)" in kw["title"] and "1.25 ms per text" in kw["title"]
    assert stage_view(STAGE_ROWS, "tiny BERT", 1)["series"]["tokenize"] == pytest.approx([60.0])


def test_stage_view_refuses_out_of_range():
    with pytest.raises(ValueError, match="batch_size=32 was not measured for tiny BERT"):
        stage_view(STAGE_ROWS, "tiny BERT", 32)
    with pytest.raises(ValueError, match="model 'GPT' was not measured"):
        stage_view(STAGE_ROWS, "GPT", 1)


def test_stage_view_figure():
    fig = viz.bar_chart(**stage_view(STAGE_ROWS, "MiniLM", 1))
    assert [t.name for t in fig.data] == ["tokenize", "forward", "postprocess"]
    assert list(fig.data[0].x) == ["batch 1", "batch 32"]


def test_explorer_is_live_in_a_kernel_and_a_figure_in_a_static_page(monkeypatch):
    """The book executes notebooks with AILAB_STATIC=1: a widget there would render as nothing."""
    import ipywidgets as w

    from ailab.widgets import STATIC_ENV, explorer

    seen = []

    def callback(n):
        seen.append(n)
        return f"n={n}"

    monkeypatch.delenv(STATIC_ENV, raising=False)
    slider = w.IntSlider(value=3, min=1, max=9, description="n")
    box = explorer(callback, {"n": slider}, title="t")
    assert isinstance(box, w.VBox) and seen == [3]
    slider.value = 5
    assert seen == [3, 5], "moving a control redraws through the callback"
    monkeypatch.setenv(STATIC_ENV, "1")
    assert explorer(callback, {"n": w.IntSlider(value=4, min=1, max=9)}, title="t") == "n=4"


# ----------------------------------------------------------------------------- 2_engine/03: precision


def test_precision_view_callback():
    rows = [
        {"name": n, "batch_size": bs, "p50_ms": ms * bs, "size_mb": size, "accuracy": acc, "agreement": agr}
        for n, ms, size, acc, agr in (("fp32", 4.0, 90.0, 0.80, 1.0), ("int8", 2.0, 22.5, 0.79, 0.98))
        for bs in (1, 32)
    ]
    view = precision_view(rows, "int8", 32)
    assert view["categories"] == ["fp32", "int8"]
    assert view["series"] == {"p50 ms at batch 32": [128.0, 64.0]}
    assert "2.00x the speed of fp32" in view["title"] and "4.0x smaller" in view["title"]
    assert "-1.0 pt" in view["title"] and "98.0%" in view["title"]
    assert "1.00x" in precision_view(rows, "fp32", 1)["title"]
    with pytest.raises(ValueError, match="not measured"):
        precision_view(rows, "fp16", 32)
    with pytest.raises(ValueError, match="batch size 8"):
        precision_view(rows, "int8", 8)
    from ailab import viz

    assert viz.bar_chart(**view, subtitle="test").layout.title.text.startswith("int8 at batch 32")
