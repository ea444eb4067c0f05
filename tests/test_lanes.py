"""`make test`'s third lane holds only tests and solution notebooks that compute.

The Makefile runs LANE_TESTS and LANE_NOTEBOOKS at nice 10 beside the two pytest workers. At that priority a test can wait
seconds for a core while a neighbour's timing claim runs, so a lane test must not read a clock, start a
server or bound its own wall time: it would fail on a busy machine for no fault of the code. The runaway
guard of the differential checks (5 s a call, for a loop that never ends) is the one bound allowed; the
calls it bounds take milliseconds.
"""

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What makes a test depend on the time it is given: a clock, a sleep, a server, a subprocess with a limit.
TIMED = re.compile(
    r"time\.(perf_counter|monotonic|time)\b|\bsleep\(|start_\w*server|\bservices\.|subprocess|socket|timeout="
)
# Where a lane test may still say so, and why that holds at nice 10.
ALLOWED = {
    # The run must stop after its last check, before a 60 s sleep in the next cell: a bound of 50 s leaves
    # a kernel 50 s to start and run two cells that take under a second.
    ("tests/test_labs.py", 'nbformat.v4.new_code_cell("import time\\ntime.sleep(60)"),'),
    ("tests/test_labs.py", "start = time.monotonic()"),
    (
        "tests/test_labs.py",
        'assert report.passed == ["always"] and not report.cell_errors and time.monotonic() - start < 50',
    ),
}


def lane_tests() -> list[str]:
    out = subprocess.run(["make", "-s", "lane-tests"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def code_lines(path: Path) -> list[str]:
    if path.suffix != ".ipynb":
        return path.read_text().splitlines()
    cells = json.loads(path.read_text())["cells"]
    return [line for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()]


def test_the_lane_holds_files_that_exist_and_none_that_time_themselves():
    lane = lane_tests()
    assert len(lane) >= 20 and any(n.endswith(".ipynb") for n in lane), f"the lane lost its tests: {lane}"
    timed = []
    for name in lane:
        path = ROOT / name
        assert path.is_file(), f"the Makefile's lane names {name}, which does not exist"
        for number, line in enumerate(code_lines(path), 1):
            code = line.split("#", 1)[0].strip()
            if TIMED.search(code) and (name, code) not in ALLOWED:
                timed.append(f"{name}:{number}: {code}")
    assert not timed, "these lane tests depend on time; move the file out of the lane:\n" + "\n".join(timed)


def test_the_main_run_skips_the_lane():
    makefile = (ROOT / "Makefile").read_text()
    ignored = "$(addprefix --ignore=,$(REHEARSED) $(LANE_TESTS) $(LANE_NOTEBOOKS))"
    assert ignored in makefile, "the lane's tests would run twice"


def test_the_files_that_start_a_ray_cluster_go_to_one_worker_one_after_the_other():
    """The root conftest.py's scheduler: every other file is a work unit of its own, as in --dist loadfile."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)

    class Config:
        def __init__(self, dist):
            self.values = {"dist": dist, "tx": ["2*popen"]}

        def getvalue(self, name):
            return self.values[name]

    assert root.pytest_xdist_make_scheduler(Config("load"), None) is None
    sched = root.pytest_xdist_make_scheduler(Config("loadfile"), None)
    ray = [f"{path}::{name}" for path in sorted(root.RAY_CLUSTERS) for name in ("a", "Cell 0")]
    scopes = {sched._split_scope(nodeid) for nodeid in ray}
    assert len(scopes) == 1, scopes
    assert sched._split_scope("tests/test_server.py::test_x") == "tests/test_server.py"
    assert all((ROOT / path).exists() for path in root.RAY_CLUSTERS)
    # nothing else starts a cluster: the files that call what starts one are those two
    starts = re.compile(r"RayCluster\(|RayServe\(|autoscaling_run\(|ray\.init\(|--ray\b|serve_with_ray")
    found = {
        str(p.relative_to(ROOT))
        for folder in ("tests", "notebooks", "solutions")
        for p in (ROOT / folder).rglob("*.*")
        if p.suffix in (".py", ".ipynb") and p != Path(__file__) and starts.search(p.read_text(errors="replace"))
    }
    assert found <= root.RAY_CLUSTERS, found - root.RAY_CLUSTERS
