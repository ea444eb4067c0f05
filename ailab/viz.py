"""Plotly figure builders shared by the notebooks. Every figure names the hardware it measured."""
from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go


def use_static_renderer() -> None:
    """Figures displayed from now on render as HTML for a page that loads plotly.min.js itself (the book):
    the figure's <div> and its Plotly.newPlot call, nothing fetched from a CDN."""
    import plotly.io as pio
    from plotly.io.base_renderers import MimetypeRenderer

    class StaticHtml(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            return {"text/html": pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False,
                                             full_html=False, validate=False)}

    pio.renderers["ailab_static"] = StaticHtml()
    pio.renderers.default = "ailab_static"


def hardware_label() -> str:
    from ailab.device import describe_hardware

    return describe_hardware().one_line()


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, subtitle: str | None, log_x: bool, log_y: bool):
    sub = subtitle if subtitle is not None else f"measured on {hardware_label()}"
    fig.update_layout(title={"text": f"{title}<br><sup>{sub}</sup>"}, xaxis_title=x_title, yaxis_title=y_title,
                      template="plotly_white", height=420, legend={"orientation": "h", "y": -0.2})
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def line_chart(x: Sequence, series: Mapping[str, Sequence[float]], title: str, x_title: str, y_title: str,
               subtitle: str | None = None, log_x: bool = False, log_y: bool = False) -> go.Figure:
    """One line per named series over a shared x axis."""
    fig = go.Figure([go.Scatter(x=list(x), y=list(ys), mode="lines+markers", name=name) for name, ys in series.items()])
    return _layout(fig, title, x_title, y_title, subtitle, log_x, log_y)


def bar_chart(categories: Sequence[str], series: Mapping[str, Sequence[float]], title: str, y_title: str,
              subtitle: str | None = None, log_y: bool = False) -> go.Figure:
    """Grouped bars: one group per category, one bar per named series."""
    fig = go.Figure([go.Bar(x=list(categories), y=list(v), name=name) for name, v in series.items()])
    fig.update_layout(barmode="group")
    return _layout(fig, title, "", y_title, subtitle, False, log_y)


def sweep_figure(sweep) -> go.Figure:
    """A concurrency sweep (ailab.bench.sweep): p50/p99 and req/s against clients, the SLO line, the best point."""
    import math

    pts = sweep.points()
    fig = line_chart([p["clients"] for p in pts], {"p99 ms": [p["p99_ms"] for p in pts],
                                                    "p50 ms": [p["p50_ms"] for p in pts]},
                     "Concurrency sweep: latency rises once the server saturates", "concurrent clients",
                     "latency (ms)", log_x=True)
    fig.add_trace(go.Scatter(x=[p["clients"] for p in pts], y=[p["rps"] for p in pts], name="req/s",
                             yaxis="y2", mode="lines+markers", line={"dash": "dot"}))
    fig.add_hline(y=sweep.slo_p99_ms, line_dash="dash", annotation_text=f"SLO p99 {sweep.slo_p99_ms:g} ms")
    fig.update_layout(yaxis2={"title": "req/s", "overlaying": "y", "side": "right"})
    if sweep.best_within_slo:
        best = sweep.best_within_slo["clients"]
        fig.add_vline(x=best, line_dash="dot")
        # An annotation on a log axis is placed in log10 units (add_vline's annotation_text is not, and
        # once stretched this axis to 10^18): put the label there by hand.
        fig.add_annotation(x=math.log10(best), y=1, yref="paper", text="best within SLO", showarrow=False,
                           xanchor="left", yanchor="bottom")
    return fig


def soak_figure(soak) -> go.Figure:
    """A soak (ailab.bench.soak): RSS and p99 over the run, titled with the RSS slope and the verdict."""
    t = [s["t_s"] / 60 for s in soak.samples]
    fig = line_chart(t, {"RSS (MB)": [s["rss_mb"] for s in soak.samples]},
                     f"Soak: RSS slope {soak.rss_slope_mb_per_min:+.2f} MB/min, verdict: {soak.verdict}",
                     "minutes", "RSS (MB)")
    fig.add_trace(go.Scatter(x=t, y=[s["p99_ms"] for s in soak.samples], name="p99 ms", yaxis="y2",
                             mode="lines+markers", line={"dash": "dot"}))
    fig.update_layout(yaxis2={"title": "p99 (ms)", "overlaying": "y", "side": "right"})
    return fig
