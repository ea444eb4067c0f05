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
