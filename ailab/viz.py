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
