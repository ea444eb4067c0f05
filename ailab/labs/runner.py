"""Run a lab notebook the way a learner would and report which checks passed.

Each run gets a fresh kernel and runs the cells up to the last one that calls a check: the cells after it show
the answer at work (a timing, a served request) and cannot change a check's outcome, so a report does not wait
for them. A run that goes past its time limit, or whose kernel dies (a learner's
`os._exit(1)`, a segfault, memory), is not an exception: the report's `status` says "timeout" or
"crashed" and `detail` names the cell; the checks that ran before it are kept.
"""

from __future__ import annotations

import os
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ailab.labs.build import lab_name
from ailab.labs.core import REPORT_ENV


KERNEL_START_ATTEMPTS = 3  # a kernel that dies before running any cell is started again


@dataclass
class LabReport:
    path: str
    lab: str
    checks: list[dict] = field(default_factory=list)  # {"check", "passed", "message"}
    cell_errors: list[str] = field(default_factory=list)  # errors outside any check
    status: str = "ok"  # "ok", "timeout" or "crashed"
    detail: str = ""  # where it timed out or crashed

    @property
    def passed(self) -> list[str]:
        return [c["check"] for c in self.checks if c["passed"]]

    @property
    def failed(self) -> list[dict]:
        return [c for c in self.checks if not c["passed"]]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and not self.failed and self.status == "ok"

    def summary(self) -> str:
        lines = [f"{self.path} ({self.lab}): {len(self.passed)} of {len(self.checks)} checks passed"]
        if self.status != "ok":
            lines.append(f"  {self.status.upper()}: {self.detail}")
        lines += [f"  PASS  {c['check']}" for c in self.checks if c["passed"]]
        lines += [f"  FAIL  {c['check']}: {c['message']}" for c in self.failed]
        if not self.checks:
            lines.append("  no check ran: did an earlier cell fail? errors below")
        lines += [f"  error {e}" for e in self.cell_errors[:5]]
        return "\n".join(lines)


def read_notebook(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; labs are listed in book.yml (for example labs/0_orientation/)")
    try:
        return nbformat.read(str(path), as_version=4)
    except Exception as e:  # nbformat raises several kinds
        raise ValueError(f"{path} is not a readable Jupyter notebook: {e}") from e


_CHECK_CALL = re.compile(r"\bcheck_\w+\s*\(")


def through_last_check(nb):
    """The cells up to and including the last one that calls a check (every cell when none does, so that the
    report can say no check ran and why)."""
    calls = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _CHECK_CALL.search(c.source)]
    if calls:
        nb.cells = nb.cells[: calls[-1] + 1]
    return nb


class _TimeLimit(Exception):
    """The whole notebook's time limit ran out before a cell could start."""


def run_lab(path: str | Path, timeout: int = 900, limit_s: float | None = None) -> LabReport:
    """Execute the cells through the last check (past errors) in a fresh kernel; collect the checks' outcomes.

    `timeout` bounds each cell; `limit_s`, when given, bounds all cells together (kernel start-up
    excluded) and the kernel is then killed at once rather than asked to shut down.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = through_last_check(read_notebook(path))
    lab = lab_name(nb, path)
    where = {"cell": None, "deadline": None}

    def cell_timeout(cell) -> float:
        now = time.monotonic()
        if limit_s is None:
            return timeout
        if where["deadline"] is None:
            where["deadline"] = now + limit_s
        left = where["deadline"] - now
        if left <= 0:
            raise _TimeLimit()
        return min(timeout, left)

    def on_cell_execute(cell, cell_index, **_):
        where["cell"] = cell_index

    status, detail = "ok", ""
    with tempfile.TemporaryDirectory() as tmp:
        report_file = Path(tmp) / "report.jsonl"
        report_file.touch()
        # The kernel gets its own environment, so several runs can go on at once in one process.
        env = {**os.environ, REPORT_ENV: str(report_file)}
        for attempt in range(KERNEL_START_ATTEMPTS):
            client = NotebookClient(
                nb,
                timeout=timeout,
                timeout_func=cell_timeout,
                kernel_name="python3",
                allow_errors=True,
                on_cell_execute=on_cell_execute,
                shutdown_kernel="graceful" if limit_s is None else "immediate",
                resources={"metadata": {"path": str(Path(path).parent.resolve())}},
            )
            try:
                client.execute(env=env)
            except (CellTimeoutError, _TimeLimit):
                limit = f"{limit_s:g} s for the notebook" if limit_s is not None else f"{timeout} s per cell"
                status, detail = "timeout", f"time limit ({limit}) reached in cell {where['cell']}"
            except Exception as e:  # sorted below: the learner's crash, or a kernel that never started
                if where["cell"] is None and attempt + 1 < KERNEL_START_ATTEMPTS:
                    # No cell ran: the kernel failed to start (kernels started at once can race for the ports
                    # they were given). That is the machine's failure, not the learner's: start another.
                    continue
                if not isinstance(e, DeadKernelError):
                    raise
                status, detail = "crashed", f"the kernel died in cell {where['cell']}"
            break
        checks = [json.loads(line) for line in report_file.read_text().splitlines() if line.strip()]
    errors = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") != "LabCheckFailed":
                errors.append(f"cell {i}: {out['ename']}: {out['evalue']}")
    return LabReport(str(path), lab, checks, errors, status, detail)
