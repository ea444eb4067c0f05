"""A pytest plugin for the GPU suite (`-p nbval_outputs`, scripts/ on PYTHONPATH): what each notebook cell
printed becomes that test's captured stdout, so `pytest -rA` writes every figure a notebook printed into the
suite's log, passing cells included. nbval keeps a cell's outputs on its test item (`test_outputs`) and
otherwise drops them; a GPU run is rare, and its figures are what it is for.

Streams are kept, and the plain-text form of results and displays when it is short (a figure's is not).
"""

from __future__ import annotations

import pytest

MAX_CHARS = 6000  # of one cell's output (its end is kept)
MAX_PLAIN = 1500  # longer plain-text reprs (plotly figures, widgets) are left out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    outputs = getattr(item, "test_outputs", None)
    if report.when != "call" or not outputs:
        return
    parts = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(out.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            plain = out.get("data", {}).get("text/plain", "")
            if plain and len(plain) <= MAX_PLAIN:
                parts.append(plain if plain.endswith("\n") else plain + "\n")
    text = "".join(parts)
    if text:
        report.sections.append(("Captured stdout call", text[-MAX_CHARS:]))
