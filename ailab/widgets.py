"""ipywidgets explorers. The callback behind each widget is a plain function (tested in pytest);
this module only wires controls to it, so nothing here holds logic worth testing on its own.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

STATIC_ENV = "AILAB_STATIC"   # set by `make book`: no kernel will be there to answer the controls



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
