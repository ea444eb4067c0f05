"""scripts/noisy.py: the hog really loads a core, and every failed notebook cell is reported."""

import importlib.util
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("noisy", ROOT / "scripts" / "noisy.py")
noisy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(noisy)


# Loose bounds: the suite may run this beside two notebooks, where any process gets a share of a core, not one.
@pytest.mark.parametrize("kind, least", [("steady", 0.1), ("bursty", 0.02)])
def test_a_hog_spends_cpu_beside_us(kind, least):
    hogs = noisy.start_hog(kind, seed=1)
    try:
        proc = psutil.Process(hogs[0].pid)
        time.sleep(0.5)  # the interpreter's start
        before, t0 = sum(proc.cpu_times()[:2]), time.perf_counter()
        time.sleep(2.5)
        share = (sum(proc.cpu_times()[:2]) - before) / (time.perf_counter() - t0)
    finally:
        noisy.stop_hog(hogs)
    assert share > least, f"a {kind} hog used {share:.0%} of a core"
    assert all(h.poll() is not None for h in hogs)


def test_an_unknown_hog_is_named():
    with pytest.raises(ValueError, match="steady, bursty"):
        noisy.start_hog("loud", seed=1)


def test_failed_cells_and_seconds_come_from_the_junit_report(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(
        """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
        <testcase classname="notebooks.5_generation.02_paged_and_continuous.ipynb" name="Cell 13" time="12.5">
          <failure message="AssertionError: the tail">trace</failure></testcase>
        <testcase classname="notebooks.5_generation.02_paged_and_continuous.ipynb" name="Cell 14" time="2.5"/>
        <testcase classname="solutions.3_serving.ex_swap_plan.ipynb" name="Cell 1" time="1"><error>boom</error></testcase>
        </testsuite></testsuites>"""
    )
    assert noisy.failed_cells(xml) == [
        "notebooks.5_generation.02_paged_and_continuous.ipynb::Cell 13: AssertionError: the tail",
        "solutions.3_serving.ex_swap_plan.ipynb::Cell 1: boom",
    ]
    assert noisy.notebook_seconds(xml) == {
        "notebooks/5_generation/02_paged_and_continuous.ipynb": 15.0,
        "solutions/3_serving/ex_swap_plan.ipynb": 1.0,
    }
