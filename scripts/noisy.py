"""Run the notebooks beside a busy neighbour: the course's claims must hold on a learner's laptop, not a quiet one.

    python scripts/noisy.py --hog steady --hog bursty --runs 2 notebooks solutions
    make test-noisy                      # the same, over every notebook and solution (NOISY_ARGS to narrow it)

For each kind of hog and each run, a CPU hog starts beside nbval (`pytest --nbval-lax`) and stops with it:
- `steady`: one process spinning on a core for the whole run (a build, a video call);
- `bursty`: one process that spins for a random 0.2-2 s, then sleeps as long, again and again (a browser tab, an
  IDE indexing): the load a one-shot timing of A and then B charges to whichever ran in the burst.
Every cell that failed is listed with its run and hog, and the exit status is 1 if any did. `--workers 2` runs
two notebooks at a time as `make test` does (each is then the other's neighbour too).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOGS = ("steady", "bursty")

# The hog is a separate Python process, so it competes for a core as any other program would (a thread would share
# our interpreter's lock instead). It spins on arithmetic: no memory traffic to speak of, no I/O.
_HOG_CODE = """
import random, sys, time
kind, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(10_000):
            x += i * i
while True:
    if kind == "steady":
        spin(3600)
    else:
        burst = rng.uniform(0.2, 2.0)
        spin(burst)
        time.sleep(burst)
"""


def start_hog(kind: str, seed: int, procs: int = 1) -> list[subprocess.Popen]:
    """`procs` hog processes of `kind` ('steady' or 'bursty'), each with its own seed so bursts do not line up."""
    if kind not in HOGS:
        raise ValueError(f"the hog is one of {', '.join(HOGS)}; got {kind!r}")
    return [
        subprocess.Popen([sys.executable, "-c", _HOG_CODE, kind, str(seed + i)], stdin=subprocess.DEVNULL)
        for i in range(procs)
    ]


def stop_hog(hogs: list[subprocess.Popen]) -> None:
    for p in hogs:
        p.kill()
    for p in hogs:
        p.wait()


def failed_cells(junit_xml: Path) -> list[str]:
    """'notebook::Cell N: first line of the failure' for every failed or errored test case of a JUnit report."""
    failed = []
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            message = (bad.get("message") or bad.text or "").strip().splitlines()
            where = f"{case.get('classname', '')}::{case.get('name', '')}".replace(".ipynb.", ".ipynb::")
            failed.append(f"{where}: {message[0][:200] if message else '(no message)'}")
    return failed


def notebook_seconds(junit_xml: Path) -> dict[str, float]:
    """Seconds each notebook's cells took, from a JUnit report: where a run's time goes."""
    out: dict[str, float] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        name = case.get("classname", "").replace(".ipynb", "").replace(".", "/") + ".ipynb"
        out[name] = out.get(name, 0.0) + float(case.get("time") or 0)
    return out


def nbval_command(paths: list[str], junit_xml: Path, workers: int) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=900"]
    cmd += ["-p", "no:cacheprovider", f"--junitxml={junit_xml}"]
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "loadfile"]
    return cmd + paths


def run_once(paths: list[str], kind: str, seed: int, workers: int, procs: int) -> tuple[list[str], float, int]:
    """One nbval run beside a hog: (failed cells, seconds, pytest's exit status); prints the slowest notebooks."""
    with tempfile.TemporaryDirectory(prefix="ailab-noisy-") as tmp:
        junit = Path(tmp) / "junit.xml"
        hogs = start_hog(kind, seed, procs)
        t0 = time.perf_counter()
        try:
            rc = subprocess.call(nbval_command(paths, junit, workers), cwd=ROOT)
        finally:
            stop_hog(hogs)
        seconds = time.perf_counter() - t0
        failed = failed_cells(junit) if junit.exists() else [f"(pytest exited {rc} before writing a report)"]
        if junit.exists():
            slowest = sorted(notebook_seconds(junit).items(), key=lambda kv: -kv[1])[:8]
            print("noisy: slowest: " + ", ".join(f"{Path(k).stem} {v:.0f} s" for k, v in slowest), flush=True)
    return failed, seconds, rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["notebooks", "solutions"], help="notebooks or folders to run")
    ap.add_argument(
        "--hog", action="append", choices=HOGS, help="the kind of neighbour (repeat for both; default both)"
    )
    ap.add_argument("--runs", type=int, default=2, help="runs under each hog (default 2: two in a row must pass)")
    ap.add_argument("--workers", type=int, default=1, help="notebooks at a time (pytest-xdist; make test runs 2)")
    ap.add_argument("--hog-procs", type=int, default=1, help="hog processes (default 1: one core of a 2-core laptop)")
    ap.add_argument("--seed", type=int, default=None, help="the bursty hog's seed (default: from the clock, printed)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.workers < 1 or args.hog_procs < 1:
        ap.error("--runs, --workers and --hog-procs must be at least 1")
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    kinds = args.hog or list(HOGS)
    print(
        f"noisy: {', '.join(args.paths)}; hogs {kinds} x {args.runs} runs, {args.workers} notebook(s) at a time, "
        f"{args.hog_procs} hog process(es) on {os.cpu_count()} cores, seed {seed}",
        flush=True,
    )
    report, any_failed = [], False
    for kind in kinds:
        for run in range(1, args.runs + 1):
            failed, seconds, rc = run_once(args.paths, kind, seed + 1000 * run, args.workers, args.hog_procs)
            any_failed |= bool(failed) or rc != 0
            line = f"{kind} hog, run {run}: {'passed' if not failed and rc == 0 else f'{len(failed)} failed'} "
            report.append(line + f"in {seconds:.0f} s" + "".join(f"\n    {f}" for f in failed))
            print(f"noisy: {report[-1]}", flush=True)
    print("\nnoisy: summary\n" + "\n".join(report))
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
