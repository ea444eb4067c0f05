"""Plotly figure builders shared by the notebooks. Every figure names the hardware it measured."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import plotly.graph_objects as go


def use_static_renderer() -> None:
    """Figures displayed from now on render as HTML for a page that loads plotly.min.js itself (the book):
    the figure's <div> and its Plotly.newPlot call, nothing fetched from a CDN."""
    import plotly.io as pio
    from plotly.io.base_renderers import MimetypeRenderer

    class StaticHtml(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            return {
                "text/html": pio.to_html(
                    fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False, validate=False
                )
            }

    pio.renderers["ailab_static"] = StaticHtml()
    pio.renderers.default = "ailab_static"


def hardware_label() -> str:
    from ailab.device import describe_hardware

    return describe_hardware().one_line()


# Log axes get ticks a reader can read: at the points themselves when they are a few whole numbers (batch sizes
# 1, 2, 4, 8, 16, 32), else at 1-2-5 steps over the data's range. Plotly's own log ticks label the minor digits
# (9 1 2 3 ... 10 2 3), which read as noise.
MAX_LABELLED_POINTS = 12


def _log_ticks(values: Sequence) -> list[float]:
    points = sorted({float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0})
    if not points:
        return []
    if len(points) <= MAX_LABELLED_POINTS and all(v.is_integer() for v in points):
        return points
    lo, hi = points[0], points[-1]
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 2, 5), range(1, 10)):  # within a decade or so, every digit
        ticks = [m * 10.0**k for k in decades for m in mantissas]
        ticks = [v for v in ticks if lo / 1.2 <= v <= hi * 1.2]
        if len(ticks) >= 3:
            return ticks
    return ticks


def log_axis(values: Sequence) -> dict:
    """Plotly axis settings for a log axis over `values`, with readable ticks (see `_log_ticks`)."""
    ticks = _log_ticks(values)
    if len(ticks) < 2:
        return {"type": "log"}
    return {"type": "log", "tickmode": "array", "tickvals": ticks, "ticktext": [f"{v:g}" for v in ticks]}


# A right-hand axis gets its own round ticks: plotly's default for an overlaying axis ("sync") puts them on the
# left axis's grid lines, at values like 46 / 60 / 74 / 88.1.
RIGHT_AXIS = {"tickmode": "auto", "showgrid": False}


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, subtitle: str | None, log_x: bool, log_y: bool):
    sub = subtitle if subtitle is not None else f"measured on {hardware_label()}"
    fig.update_layout(
        title={"text": f"{title}<br><sup>{sub}</sup>"},
        xaxis_title=x_title,
        yaxis_title=y_title,
        template="plotly_white",
        height=420,
        legend={"orientation": "h", "y": -0.2},
    )
    if log_x:
        fig.update_xaxes(**log_axis([x for t in fig.data for x in (t.x or ())]))
    if log_y:
        fig.update_yaxes(**log_axis([y for t in fig.data if t.yaxis in (None, "y") for y in (t.y or ())]))
    return fig


def line_chart(
    x: Sequence,
    series: Mapping[str, Sequence[float]],
    title: str,
    x_title: str,
    y_title: str,
    subtitle: str | None = None,
    log_x: bool = False,
    log_y: bool = False,
    right: Mapping[str, Sequence[float]] | None = None,
    right_title: str | None = None,
) -> go.Figure:
    """One line per named series over a shared x axis. `right`'s series (dotted) get an axis of their own on
    the right, with its own scale and round ticks: a quantity of another size (per item beside per batch,
    req/s beside ms) drawn on the left axis is flattened to a line at zero."""
    fig = go.Figure([go.Scatter(x=list(x), y=list(ys), mode="lines+markers", name=name) for name, ys in series.items()])
    for name, ys in (right or {}).items():
        fig.add_trace(
            go.Scatter(x=list(x), y=list(ys), mode="lines+markers", name=name, yaxis="y2", line={"dash": "dot"})
        )
    if right:
        fig.update_layout(yaxis2={"title": right_title or "", "overlaying": "y", "side": "right", **RIGHT_AXIS})
    return _layout(fig, title, x_title, y_title, subtitle, log_x, log_y)


def bar_chart(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str,
    y_title: str,
    subtitle: str | None = None,
    log_y: bool = False,
) -> go.Figure:
    """Grouped bars: one group per category, one bar per named series."""
    fig = go.Figure([go.Bar(x=list(categories), y=list(v), name=name) for name, v in series.items()])
    fig.update_layout(barmode="group")
    return _layout(fig, title, "", y_title, subtitle, False, log_y)


def sweep_figure(sweep) -> go.Figure:
    """A concurrency sweep (ailab.bench.sweep): p50/p99 and req/s against clients, the SLO line, the best point."""
    pts = sweep.points()
    fig = line_chart(
        [p["clients"] for p in pts],
        {"p99 ms": [p["p99_ms"] for p in pts], "p50 ms": [p["p50_ms"] for p in pts]},
        "Concurrency sweep: latency rises once the server saturates",
        "concurrent clients",
        "latency (ms)",
        log_x=True,
        right={"req/s": [p["rps"] for p in pts]},
        right_title="req/s",
    )
    fig.add_hline(y=sweep.slo_p99_ms, line_dash="dash", annotation_text=f"SLO p99 {sweep.slo_p99_ms:g} ms")
    if sweep.best_within_slo:
        best = sweep.best_within_slo["clients"]
        fig.add_vline(x=best, line_dash="dot")
        # An annotation on a log axis is placed in log10 units (add_vline's annotation_text is not, and
        # once stretched this axis to 10^18): put the label there by hand.
        fig.add_annotation(
            x=math.log10(best),
            y=1,
            yref="paper",
            text="best within SLO",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
        )
    return fig


def soak_figure(soak) -> go.Figure:
    """A soak (ailab.bench.soak): RSS and p99 over the run, titled with the RSS slope and the verdict."""
    t = [s["t_s"] / 60 for s in soak.samples]
    return line_chart(
        t,
        {"RSS (MiB)": [s["rss_mib"] for s in soak.samples]},
        f"Soak: RSS slope {soak.rss_slope_mb_per_min:+.2f} MiB/min, verdict: {soak.verdict}",
        "minutes",
        "RSS (MiB)",
        right={"p99 ms": [s["p99_ms"] for s in soak.samples]},
        right_title="p99 (ms)",
    )


def alert_figure(results, title: str) -> go.Figure:
    """Alert results (ailab.monitoring.evaluate): one panel per rule, the metric over time, the threshold, firing
    periods shaded."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=len(results),
        cols=1,
        shared_xaxes=True,
        subplot_titles=[f"{r.rule.name}: {r.rule.metric} {r.rule.op} {r.rule.threshold:g}" for r in results],
    )
    for i, res in enumerate(results, 1):
        t0 = res.states[0][0] if res.states else 0.0
        xs = [ts - t0 for ts, _, _ in res.states]
        fig.add_trace(
            go.Scatter(x=xs, y=[v for _, _, v in res.states], name=res.rule.metric, mode="lines+markers"), row=i, col=1
        )
        fig.add_hline(y=res.rule.threshold, line_dash="dash", row=i, col=1)
        for (ts, state, _), x in zip(res.states, xs):
            if state == "firing":
                fig.add_vrect(x0=x - 0.5, x1=x + 0.5, fillcolor="red", opacity=0.2, line_width=0, row=i, col=1)
    fig.update_layout(
        title={"text": f"{title}<br><sup>measured on {hardware_label()}</sup>"},
        template="plotly_white",
        height=250 * len(results) + 100,
        showlegend=False,
    )
    fig.update_xaxes(title_text="seconds since recording started", row=len(results), col=1)
    return fig


def prefix_ttft_figure(rows: Sequence[Mapping], samples: Mapping[int, Sequence[float]], prompt_tokens: int):
    """TTFT of one prompt against how many of its tokens the prefix cache served (rows and samples:
    ailab.generation.measure.ttft_by_cached_prefix): the median per size, each round's time as a dot, and on
    the right the tokens the step still computed."""
    x = [r["served"] for r in rows]
    fig = line_chart(
        x,
        {"TTFT, median of the rounds": [r["ttft_ms"] for r in rows]},
        f"TTFT of a {prompt_tokens}-token prompt by how much of it is already cached",
        "prompt tokens served from the cache",
        "TTFT (ms)",
        right={"prompt tokens computed": [r["computed"] for r in rows]},
        right_title="tokens computed",
    )
    dots = [(r["served"], t) for r in rows for t in samples[r["cached"]]]
    fig.add_trace(
        go.Scatter(
            x=[d[0] for d in dots], y=[d[1] for d in dots], mode="markers", name="each round",
            marker={"size": 5, "opacity": 0.35},
        )
    )  # fmt: skip
    return fig


def hit_rate_figure(rows: Sequence[Mapping]) -> go.Figure:
    """Prefix-cache hit rate against the share of the prompts' tokens that is the shared prefix, one point per
    prefix size (rows: ailab.generation.measure.chat_trace_run's), beside y = x: a cache that served every
    shared token of every request."""
    share = [r["shared_share"] for r in rows]
    fig = line_chart(
        share,
        {"hit rate (tokens served / tokens asked for)": [r["hit_rate"] for r in rows]},
        "Prefix-cache hit rate against the shared share of the prompts",
        "shared share of the prompts' tokens",
        "hit rate",
    )
    fig.data[0].text = [f"{r['prefix_bytes']} B" for r in rows]
    fig.data[0].mode, fig.data[0].textposition = "lines+markers+text", "top left"
    top = max(share + [0.0]) or 1.0
    fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="every shared token served (y = x)",
                             line={"dash": "dash", "color": "grey"}))  # fmt: skip
    return fig


def step_times_figure(runs: Mapping[str, Sequence[Mapping]], prefilling: int, title: str) -> go.Figure:
    """Each step's wall time against when it started, one line per run (runs: name -> the steps of
    ailab.generation.measure.run_by_steps): every decode in a step waits that long for its next token. The steps
    that computed part of request `prefilling`'s prompt are marked."""
    fig = line_chart([], {}, title, "ms since the run began", "the step's time (ms): each decode's wait")
    for name, steps in runs.items():
        fig.add_trace(go.Scatter(x=[s["start_ms"] for s in steps], y=[s["ms"] for s in steps], mode="lines+markers",
                                 name=name, marker={"size": 4}))  # fmt: skip
        marked = [s for s in steps if any(rid == prefilling for rid, _ in s["prefill"])]
        fig.add_trace(
            go.Scatter(
                x=[s["start_ms"] for s in marked], y=[s["ms"] for s in marked], mode="markers",
                name=f"{name}: a step that computed the long prompt", marker={"size": 10, "symbol": "circle-open"},
            )
        )  # fmt: skip
    return fig
