"""ipywidgets explorers. The callback behind each widget is a plain function (tested in pytest);
this module only wires controls to it, so nothing here holds logic worth testing on its own.
"""
from __future__ import annotations

from typing import Callable, Mapping


def explorer(callback: Callable[..., object], controls: Mapping[str, object], title: str = ""):
    """Show `controls` (name -> ipywidget) and redraw `callback(**values)` whenever one changes.

    The callback returns a plotly Figure, a string, or anything IPython can display.
    Returns the container widget, so a test can find it and a notebook can display it.
    """
    import ipywidgets as w
    from IPython.display import display

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
