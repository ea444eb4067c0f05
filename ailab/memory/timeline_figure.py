"""The memory timeline as a figure: each counter the sampler read over time, each tracker phase shaded and named."""

from __future__ import annotations

from typing import Sequence

from ailab.memory.counters import MiB


def timeline_figure(
    samples: Sequence[dict], marks: Sequence[tuple[str, float, float]], title: str = "Process memory over time"
):
    """RSS (and CUDA allocated/reserved) over time, with each phase shaded and named.

    samples: MemoryTracker.timeline (t in seconds, counters in bytes); marks: MemoryTracker.marks
    ((phase, t_start, t_end) on the same clock). A counter no sample has is left out, not drawn as zero."""
    import plotly.graph_objects as go

    from ailab.device import describe_hardware

    fig = go.Figure()
    ts = [s["t"] for s in samples]
    for key in ("rss", "malloc_in_use", "cuda_allocated", "cuda_reserved", "nvml_used"):
        ys = [s.get(key) for s in samples]
        if any(y is not None for y in ys):
            fig.add_trace(go.Scatter(x=ts, y=[None if y is None else y / MiB for y in ys], name=key, mode="lines"))
    for i, (name, a, b) in enumerate(marks):
        fig.add_vrect(
            x0=a,
            x1=b,
            fillcolor="LightSkyBlue" if i % 2 else "LightGreen",
            opacity=0.25,
            line_width=0,
            annotation_text=name,
            annotation_position="top left",
        )
    fig.update_layout(
        title={"text": f"{title}<br><sup>measured on {describe_hardware().one_line()}</sup>"},
        xaxis_title="seconds",
        yaxis_title="MiB",
        template="plotly_white",
        height=420,
    )
    return fig
