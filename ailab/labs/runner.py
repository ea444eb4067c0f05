"""Run a lab notebook the way a learner would and report which checks passed."""
from __future__ import annotations

import os
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ailab.labs.build import lab_name
from ailab.labs.core import REPORT_ENV


@dataclass
class LabReport:
    path: str
    lab: str
    checks: list[dict] = field(default_factory=list)       # {"check", "passed", "message"}
    cell_errors: list[str] = field(default_factory=list)   # errors outside any check

    @property
    def passed(self) -> list[str]:
        return [c["check"] for c in self.checks if c["passed"]]

    @property
    def failed(self) -> list[dict]:
        return [c for c in self.checks if not c["passed"]]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and not self.failed

    def summary(self) -> str:
        lines = [f"{self.path} ({self.lab}): {len(self.passed)} of {len(self.checks)} checks passed"]
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
    except Exception as e:  # noqa: BLE001 - nbformat raises several kinds
        raise ValueError(f"{path} is not a readable Jupyter notebook: {e}") from e


def run_lab(path: str | Path, timeout: int = 900) -> LabReport:
    """Execute every cell (continuing past errors) and collect the checks' outcomes."""
    from nbclient import NotebookClient

    nb = read_notebook(path)
    lab = lab_name(nb, path)
    with tempfile.TemporaryDirectory() as tmp:
        report_file = Path(tmp) / "report.jsonl"
        report_file.touch()
        old = os.environ.get(REPORT_ENV)
        os.environ[REPORT_ENV] = str(report_file)  # inherited by the kernel process
        try:
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                    resources={"metadata": {"path": str(Path(path).parent.resolve())}})
            client.execute()
        finally:
            if old is None:
                os.environ.pop(REPORT_ENV, None)
            else:
                os.environ[REPORT_ENV] = old
        checks = [json.loads(line) for line in report_file.read_text().splitlines() if line.strip()]
    errors = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") != "LabCheckFailed":
                errors.append(f"cell {i}: {out['ename']}: {out['evalue']}")
    return LabReport(str(path), lab, checks, errors)
