"""`make test-ui`: the tour as a learner sees it, in a real browser, then one page of the built book.

Starts JupyterLab on a free loopback port, opens the tour in headless Chromium (Debian's package,
driven by Playwright through executable_path: Playwright's own browser download cannot work offline),
runs all cells from the Run menu, asserts that the plotly chart and the widget rendered and that no
cell raised, and saves a screenshot under build/. Then it opens a page of the book `make book` built
(from file://, no server, no network) and asserts that its plotly figures drew and that it shows
numbers measured while the book was built.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "notebooks/0_orientation/00_tour.ipynb"
BOOK_PAGE = ROOT / "build/book/_build/html/notebooks/4_application/01_performance_testing.html"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_course(dest: Path) -> Path:
    """A copy of the course to open, so the browser run (and Jupyter's autosave) never touches the repo."""
    for folder in ("notebooks", "labs", "solutions"):
        shutil.copytree(ROOT / folder, dest / folder)
    for name in ("book.yml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


def start_jupyter(port: int, token: str, root: Path) -> subprocess.Popen:
    log = open(ROOT / "build" / "test-ui-jupyter.log", "w")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "jupyter"),
            "lab",
            "--no-browser",
            "--ip",
            "127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
        ]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"JupyterLab exited early; see {log.name}")
            time.sleep(0.5)
    proc.terminate()
    raise SystemExit("JupyterLab did not answer within 60 s; see build/test-ui-jupyter.log")


def run_tour(url: str, screenshot: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        page.wait_for_selector(
            ".jp-Notebook-ExecutionIndicator[data-status='idle'], .jp-Toolbar-kernelStatus", timeout=60_000
        )
        time.sleep(2)  # let the kernel finish connecting before the first execute request
        try:
            _run_all_and_check(page, screenshot)
        except Exception:
            page.screenshot(path=str(screenshot), full_page=False)
            print(f"test-ui failed; the browser's view is in {screenshot}", file=sys.stderr)
            raise
        finally:
            browser.close()


def _run_all_and_check(page, screenshot: Path) -> None:
    page.get_by_role("menuitem", name="Run").click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    # Done when every code cell shows an execution count and none shows [*].
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent);
            return prompts.length > 0 && prompts.every(t => /\\[\\d+\\]/.test(t));
        }""",
        timeout=int(os.environ.get("AILAB_UI_TIMEOUT", "240")) * 1000,
        polling=1000,
    )
    errors = page.locator(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        ":has-text('Traceback'), .jp-RenderedText:has-text('Traceback (most recent')"
    )
    plot = page.locator(".js-plotly-plot")
    widget = page.locator(".jupyter-widgets .widget-text input, .jupyter-widgets input[type='text']")
    plot.first.wait_for(timeout=30_000)
    widget.first.wait_for(timeout=30_000)
    plot.first.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot), full_page=False)
    assert errors.count() == 0, "a cell raised; see the screenshot"
    assert plot.count() >= 1 and widget.count() >= 1
    # JupyterLab opens as `make lab` opens it (the course's settings, deploy/jupyterlab/overrides.json): no
    # "get notified about Jupyter news?" pop-up over the notebook.
    assert page.get_by_text("notified about").count() == 0, "JupyterLab asked about Jupyter news; see the screenshot"
    _check_tour_chart(plot.first)
    # The widget is live: typing redraws the answer through the kernel.
    widget.first.fill("an utterly joyless, boring film")
    widget.first.press("Enter")
    page.wait_for_function("() => document.body.innerText.includes('utterly joyless')", timeout=30_000)


def _check_tour_chart(plot) -> None:
    """The tour's prose says the time per item falls as the batch grows: drawn on the per-batch axis, that line
    lies flat near zero. It must have an axis of its own that it fills, with ticks at the batch sizes."""
    drawn = plot.evaluate("""el => {
        const line = el._fullData.find(d => d.name.includes('per item'));
        const batch = el._fullData.find(d => d.name.includes('per batch'));
        const axis = name => el._fullLayout[name.replace('y', 'yaxis')];
        return line && batch && {line: line.yaxis, batch: batch.yaxis, ys: [...line.y],
                                 range: axis(line.yaxis).range, ticks: el._fullLayout.xaxis.tickvals};
    }""")
    assert drawn, "the tour's chart has no per-item and per-batch lines"
    assert drawn["line"] != drawn["batch"], f"the per-item line shares the per-batch axis: {drawn}"
    low, high = drawn["range"]
    assert max(drawn["ys"]) - min(drawn["ys"]) >= 0.3 * (high - low), f"the per-item line looks flat: {drawn}"
    assert drawn["ticks"] and all(float(t).is_integer() for t in drawn["ticks"]), f"x ticks: {drawn['ticks']}"


def check_book_page(path: Path, screenshot: Path) -> int:
    """The built page draws its plotly figures offline and shows measured numbers; returns the figure count."""
    from playwright.sync_api import sync_playwright

    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make book` first (make test-ui depends on it)")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(path.as_uri())
            figure = page.locator(".js-plotly-plot .main-svg")  # drawn by plotly.js, not just a placeholder div
            figure.first.wait_for(timeout=30_000)
            figure.first.scroll_into_view_if_needed()
            page.screenshot(path=str(screenshot), full_page=False)
            outputs = page.locator(".cell_output").all_inner_texts()
            measured = [t for t in outputs if re.search(r"\d+(\.\d+)? req/s", t)]
            assert measured, "the page shows no measured throughput: was the book built with execution on?"
            assert "CPU only" in page.inner_text("body") or "CUDA" in page.inner_text("body"), (
                "the page should name the hardware it was measured on"
            )
            return page.locator(".js-plotly-plot").count()
        finally:
            browser.close()


def main() -> int:
    (ROOT / "build").mkdir(exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    shot = ROOT / "build" / "test-ui-tour.png"
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_jupyter(port, token, stage_course(Path(tmp) / "course"))
        try:
            run_tour(f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}", shot)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"test-ui: the tour ran in Chromium; plot and widget rendered; screenshot {shot}")
    book_shot = ROOT / "build" / "test-ui-book.png"
    n = check_book_page(BOOK_PAGE, book_shot)
    print(
        f"test-ui: the book page {BOOK_PAGE.relative_to(ROOT)} drew {n} plotly figure(s) and shows measured "
        f"numbers; screenshot {book_shot}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
