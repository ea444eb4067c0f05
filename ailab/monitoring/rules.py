"""Alert rules: the Prometheus rules file (monitoring/alerts.yml), each rule with the `ailab_check` this package
evaluates without a Prometheus server."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def parse_duration(text: str) -> float:
    """Prometheus durations ("30s", "5m", "1h") in seconds."""
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h)")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}[m.group(2)]


# --------------------------------------------------------------------------- rules


@dataclass
class Rule:
    name: str
    expr: str  # PromQL, for Prometheus
    for_s: float  # how long the condition must hold before the alert fires
    metric: str  # what ailab.monitoring compares: "p99_ms", "error_rate", ...
    op: str
    threshold: float
    window_s: float  # the rate() window the PromQL uses
    severity: str = ""

    def holds(self, value: float) -> bool:
        """The condition on one value; no data (NaN) never fires, as in Prometheus."""
        return value is not None and not math.isnan(value) and _OPS[self.op](value, self.threshold)


def load_rules(path: str | Path = "monitoring/alerts.yml") -> list[Rule]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no rules file at {path}; the course's is monitoring/alerts.yml")
    doc = yaml.safe_load(path.read_text())
    rules = []
    for group in doc.get("groups", []):
        for r in group.get("rules", []):
            ann = r.get("annotations", {})
            check = ann.get("ailab_check")
            if check == "prometheus-only":  # a rule for Prometheus alone, said so explicitly
                continue
            if "alert" not in r or not check:
                raise ValueError(f"{path}: rule {r.get('alert', r)!r} needs `alert` and an `ailab_check` annotation")
            m = re.match(r"^\s*(\w+)\s*(>=|<=|>|<)\s*([-\d.eE]+)\s*$", check)
            if not m:
                raise ValueError(f"{path}: ailab_check {check!r} must look like 'p99_ms > 200'")
            rules.append(
                Rule(
                    r["alert"],
                    r["expr"],
                    parse_duration(r.get("for", "0s")),
                    m.group(1),
                    m.group(2),
                    float(m.group(3)),
                    parse_duration(ann.get("ailab_window", "1m")),
                    r.get("labels", {}).get("severity", ""),
                )
            )
    if not rules:
        raise ValueError(f"{path} holds no alerting rules")
    return rules
