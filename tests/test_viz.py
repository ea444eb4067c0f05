"""ailab.viz: the figure conventions every chart shares, read off the figure plotly would draw."""

from __future__ import annotations

import pytest

from ailab import viz


@pytest.mark.parametrize(
    "values, want",
    [
        ([1, 2, 4, 8, 16, 32], [1, 2, 4, 8, 16, 32]),  # a few batch sizes: ticks at the points
        ([32, 1, 8, 8, 4], [1, 4, 8, 32]),  # order and repeats do not matter
        ([0.53, 1.2, 4.8, 33.1], [0.5, 1, 2, 5, 10, 20]),  # measured values: 1-2-5 steps over the range
        (list(range(1, 20)), [1, 2, 5, 10, 20]),  # too many points to label each
        ([3.2, 3.9], [3, 4]),  # within a decade: every digit
        ([0, -1, 10, 100, float("nan")], [10, 100]),  # a log axis has no place for 0, negatives or nan
        ([], []),
    ],
)
def test_log_ticks_are_readable(values, want):
    assert viz._log_ticks(values) == pytest.approx(want)
    axis = viz.log_axis(values)
    assert axis["type"] == "log"
    if len(want) >= 2:
        assert list(axis["tickvals"]) == pytest.approx(want) and len(axis["ticktext"]) == len(want)
        assert all(not t.endswith(".0") for t in axis["ticktext"])  # 1, 2, 4 rather than 1.0, 2.0, 4.0


def test_a_right_hand_series_gets_its_own_scale_and_round_ticks():
    fig = viz.line_chart(
        [1, 4, 16, 32],
        {"per batch": [10.0, 30.0, 100.0, 190.0]},
        "t",
        "batch",
        "ms per batch",
        subtitle="here",
        log_x=True,
        right={"per item": [10.0, 7.5, 6.2, 5.9]},
        right_title="ms per item",
    )
    left, right = fig.data
    assert left.yaxis in (None, "y") and right.yaxis == "y2" and right.line.dash == "dot"
    y2 = fig.layout.yaxis2
    assert y2.overlaying == "y" and y2.side == "right" and y2.title.text == "ms per item"
    assert y2.tickmode == "auto"  # plotly's default there ("sync") puts ticks at 46 / 60 / 74 / 88.1
    assert list(fig.layout.xaxis.tickvals) == [1, 4, 16, 32]
    plain = viz.line_chart([1, 2], {"a": [1.0, 2.0]}, "t", "x", "y", subtitle="here")
    assert len(plain.data) == 1 and "yaxis2" not in plain.to_dict()["layout"] and plain.layout.xaxis.type is None


def test_the_figures_built_on_line_chart_keep_the_conventions():
    from types import SimpleNamespace

    samples = [{"t_s": 60.0 * i, "rss_mib": 700.0, "p50_ms": 5.0, "p99_ms": 40.0 + i, "rps": 50.0} for i in range(5)]
    soak = SimpleNamespace(samples=samples, rss_slope_mb_per_min=0.0, verdict="steady")
    fig = viz.soak_figure(soak)
    assert [t.yaxis or "y" for t in fig.data] == ["y", "y2"] and fig.layout.yaxis2.tickmode == "auto"
    points = [{"clients": c, "p50_ms": 5.0 * c, "p99_ms": 9.0 * c, "rps": 100.0 * c} for c in (1, 2, 4, 8)]
    sweep = SimpleNamespace(points=lambda: points, slo_p99_ms=50.0, best_within_slo=points[1])
    fig = viz.sweep_figure(sweep)
    assert fig.data[-1].name == "req/s" and fig.data[-1].yaxis == "y2"
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8]


def test_the_alert_figure_draws_one_panel_per_rule_and_shades_firing():
    from ailab import monitoring

    rule = monitoring.Rule("HighP99", "expr", 2.0, "p99_ms", ">", 200.0, 60.0)
    result = monitoring.evaluate(rule, [(float(t), 300.0 if 3 <= t <= 8 else 50.0) for t in range(12)])
    assert result.fired
    fig = viz.alert_figure([result, result], "drill")
    assert len(fig.data) == 2 and len(fig.layout.annotations) == 2  # one panel (and title) per rule
    firing = sum(1 for _, state, _ in result.states if state == "firing")
    assert firing and sum(1 for s in fig.layout.shapes if s.type == "rect") == 2 * firing


def test_the_prefix_cache_figures_draw_what_they_are_given():
    rows = [
        {"cached": k, "served": min(k, 12), "computed": 16 - min(k, 12), "ttft_ms": 9.0 - k / 4} for k in (0, 8, 16)
    ]
    fig = viz.prefix_ttft_figure(rows, {0: [9.0, 9.5], 8: [7.0, 7.2], 16: [5.0, 5.1]}, 16)
    median, computed, dots = fig.data
    assert list(median.x) == [0, 8, 12] and computed.yaxis == "y2" and list(computed.y) == [16, 8, 4]
    assert len(dots.x) == 6 and dots.mode == "markers" and "16-token prompt" in fig.layout.title.text
    chats = [{"prefix_bytes": p, "shared_share": s, "hit_rate": h} for p, s, h in ((0, 0.0, 0.0), (64, 0.5, 0.45))]
    fig = viz.hit_rate_figure(chats)
    assert list(fig.data[0].y) == [0.0, 0.45] and list(fig.data[0].text) == ["0 B", "64 B"]
    assert list(fig.data[1].x) == list(fig.data[1].y) == [0, 0.5], "the y = x line spans the shares"


def test_the_step_times_figure_marks_the_steps_that_computed_the_long_prompt():
    steps = [
        {"start_ms": 0.0, "ms": 5.0, "prefill": [], "decode": [0, 1]},
        {"start_ms": 5.0, "ms": 90.0, "prefill": [(7, 900)], "decode": [0, 1]},
        {"start_ms": 95.0, "ms": 5.0, "prefill": [], "decode": [0, 1, 7]},
    ]
    chunked = [dict(s, prefill=[(7, 57)] if s["prefill"] else []) for s in steps]
    fig = viz.step_times_figure({"no budget": steps, "budget 64": chunked}, 7, "t")
    assert [t.name for t in fig.data] == [
        "no budget", "no budget: a step that computed the long prompt",
        "budget 64", "budget 64: a step that computed the long prompt",
    ]  # fmt: skip
    assert list(fig.data[0].y) == [5.0, 90.0, 5.0] and list(fig.data[1].x) == [5.0] and list(fig.data[3].y) == [90.0]
