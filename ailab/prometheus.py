"""A real Prometheus (Debian's package) on loopback, scraping ailab servers with the course's rules loaded.

- `start_prometheus(targets, rules_files)`: a throwaway Prometheus in a temp folder on a free port,
  scraping each `host:port` target's /metrics; `.alerts()` reads its own /api/v1/alerts.
- `scaled_rules(path, out, time_scale)`: a copy of a rules file with every `for:` and every range window
  (`[5m]`) multiplied by `time_scale`, so a "for 5 minutes" alert can be watched in a notebook. The
  expressions and thresholds are untouched: the demo runs the production rules, only faster.
- `promtool(...)`: Prometheus's own checker (`promtool check rules`, `promtool test rules`).

As with Redis and PostgreSQL (ailab.services), nothing is mocked: a missing binary or a failed start
raises `ServiceError` saying why.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ailab.monitoring import parse_duration
from ailab.services import HeldServer, ServiceError, answers_200, free_port, hold_started, start_logged

_INSTALL = "Install Debian's Prometheus: `apt-get install -y prometheus` (it brings promtool too)."


def _binary(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise ServiceError(f"{name!r} is not on PATH. {_INSTALL}")
    return exe


def promtool(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run promtool with `args`; returns the finished process (check `.returncode`, `.stdout`)."""
    return subprocess.run([_binary("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


# --------------------------------------------------------------------------- scaled copies of a rules file


def _scaled(text: str, time_scale: float, min_s: float) -> str:
    return f"{max(min_s, parse_duration(text) * time_scale) * 1000:.0f}ms"


def scaled_rules(path: str | Path, out: str | Path, time_scale: float, min_window_s: float = 2.0) -> Path:
    """Write `path` with every `for:` and `[window]` scaled by `time_scale` to `out`; return `out`.

    A range window is kept at `min_window_s` or more: rate() needs at least two scrapes inside it.
    """
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if "for" in rule:
                rule["for"] = _scaled(str(rule["for"]), time_scale, 0.0)
            rule["expr"] = re.sub(
                r"\[(\d+(?:\.\d+)?(?:ms|s|m|h))\]",
                lambda m: f"[{_scaled(m.group(1), time_scale, min_window_s)}]",
                rule["expr"],
            )
    out = Path(out)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


# --------------------------------------------------------------------------- the server


@dataclass
class PrometheusServer(HeldServer):
    stop_timeout_s: ClassVar[float] = 10.0

    def alerts(self) -> list[dict]:
        """Prometheus's own view of its alerts: [{'name', 'state' (pending/firing), 'active_at'}, ...]."""
        import httpx

        data = httpx.get(self.url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return [{"name": a["labels"]["alertname"], "state": a["state"], "active_at": a.get("activeAt")} for a in data]

    def query(self, promql: str) -> list[dict]:
        import httpx

        return httpx.get(self.url + "/api/v1/query", params={"query": promql}, timeout=5).json()["data"]["result"]


def start_prometheus(
    targets: list[str],
    rules_files: list[str | Path] = (),
    scrape_interval_s: float = 0.5,
    evaluation_interval_s: float = 0.5,
    timeout_s: float = 30.0,
) -> PrometheusServer:
    """Prometheus on 127.0.0.1 (a free port) scraping `targets` ("127.0.0.1:8000") with `rules_files` loaded."""
    import yaml

    exe = _binary("prometheus")
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="ailab-prometheus-"))
    rule_paths = [str(shutil.copy(p, folder / f"rules-{i}.yml")) for i, p in enumerate(rules_files)]
    config = {
        "global": {
            "scrape_interval": f"{scrape_interval_s * 1000:.0f}ms",
            "evaluation_interval": f"{evaluation_interval_s * 1000:.0f}ms",
        },
        "rule_files": rule_paths,
        "scrape_configs": [{"job_name": "ailab", "static_configs": [{"targets": list(targets)}]}],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = folder / "prometheus.log"
    cmd = [
        exe,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    server = PrometheusServer(port, folder, start_logged(cmd, log))
    return hold_started(server, answers_200(server.url + "/-/ready", 1), timeout_s, f"prometheus on port {port}", log)
