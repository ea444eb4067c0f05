"""ipywidgets explorers. The callback behind each widget is a plain function (tested in pytest):
`explorer` only wires controls to it. Most callbacks sit beside the concept they draw (memory.kv.kv_view,
engine.text.stage_view); a callback that spans several lessons' results lives here.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, Sequence

STATIC_ENV = "AILAB_STATIC"  # set by `make book`: no kernel will be there to answer the controls


def explorer(callback: Callable[..., object], controls: Mapping[str, object], title: str = ""):
    """Show `controls` (name -> ipywidget) and redraw `callback(**values)` whenever one changes.

    The callback returns a plotly Figure, a string, or anything IPython can display.
    Returns the container widget, so a test can find it and a notebook can display it.

    In a static page (the book: AILAB_STATIC=1 while it executes) a widget would show nothing, since no
    kernel answers its controls; the callback's result at the controls' starting values is returned
    instead, under a line that names the knobs.
    """
    import ipywidgets as w
    from IPython.display import HTML, display

    if os.environ.get(STATIC_ENV) == "1":
        values = {name: ctl.value for name, ctl in controls.items()}
        shown = ", ".join(f"{getattr(ctl, 'description', '') or name} = {ctl.value}" for name, ctl in controls.items())
        display(HTML(f"<b>{title}</b> <i>(at {shown}; open the notebook in JupyterLab to turn the knobs)</i>"))
        return callback(**values)

    out = w.Output()

    def redraw(_change=None):
        values = {name: ctl.value for name, ctl in controls.items()}
        out.clear_output(wait=True)
        with out:
            result = callback(**values)
            if result is not None:
                display(result)

    for ctl in controls.values():
        ctl.observe(redraw, names="value")
    box = w.VBox(([w.HTML(f"<b>{title}</b>")] if title else []) + [w.HBox(list(controls.values())), out])
    redraw()
    return box


# ----------------------------------------------------------------------------- the callbacks


def precision_view(rows: Sequence[Mapping], precision: str, batch_size: int, baseline: str | None = None) -> dict:
    """What the precision widget draws: p50 latency of every variant at `batch_size`, titled with how
    `precision` compares to the baseline (speed, size, accuracy, agreement). Returns viz.bar_chart kwargs.

    rows: one dict per (variant, batch size) with keys name, batch_size, p50_ms, size_mb, accuracy, agreement.
    """
    names = list(dict.fromkeys(r["name"] for r in rows))
    sizes = sorted({r["batch_size"] for r in rows})
    if precision not in names:
        raise ValueError(f"precision {precision!r} was not measured; choose one of {names}")
    if batch_size not in sizes:
        raise ValueError(f"batch size {batch_size} was not measured; choose one of {sizes}")
    baseline = baseline or names[0]
    at = {r["name"]: r for r in rows if r["batch_size"] == batch_size}
    sel, base = at[precision], at[baseline]
    title = (
        f"{precision} at batch {batch_size}: {base['p50_ms'] / sel['p50_ms']:.2f}x the speed of {baseline}, "
        f"{base['size_mb'] / sel['size_mb']:.1f}x smaller, accuracy {(sel['accuracy'] - base['accuracy']) * 100:+.1f} pt, "
        f"agreement {sel['agreement']:.1%}"
    )
    return {
        "categories": names,
        "series": {f"p50 ms at batch {batch_size}": [at[n]["p50_ms"] for n in names]},
        "title": title,
        "y_title": "p50 latency (ms)",
    }
