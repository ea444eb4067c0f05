"""Monitoring: scrape /metrics, keep a metric history in a database, evaluate alert rules over it.

- `load_rules("monitoring/alerts.yml")`: the Prometheus rules file; each rule also carries an
  `ailab_check` ("p99_ms > 200") and window that this module can evaluate without a Prometheus server.
- `scrape(url)` -> `Snapshot`: the cumulative latency histogram and request counters of a server.
- `window_stats(old, new)`: p50/p99 (histogram_quantile, as Prometheus computes it), error rate and
  req/s over the time between two snapshots.
- `MetricHistory`: samples (time, run, name, value) in SQLite by default, in PostgreSQL given a DSN.
- `Recorder`: a background thread that scrapes every N seconds and writes window stats to the history.
- `evaluate(rule, series)`: Prometheus's alert states (inactive -> pending -> firing) over a recorded
  series; `time_scale` compresses "for 5m" so a notebook can show it in seconds.
"""
from __future__ import annotations

import math
import operator
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LATENCY_METRIC = "ailab_request_latency_seconds"   # labelled by route: the latency SLO is /v1/predict's
REQUESTS_METRIC = "ailab_requests"  # exposed as ailab_requests_total{route="...",status="..."}
PREDICT_ROUTE = "/v1/predict"
NOT_TRAFFIC = ("/healthz", "/readyz", "/metrics")   # probes and scrapes: counted by the server, not users' requests
RSS_METRIC = "ailab_process_resident_memory_bytes"
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
    expr: str          # PromQL, for Prometheus
    for_s: float       # how long the condition must hold before the alert fires
    metric: str        # what ailab.monitoring compares: "p99_ms", "error_rate", ...
    op: str
    threshold: float
    window_s: float    # the rate() window the PromQL uses
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
            rules.append(Rule(r["alert"], r["expr"], parse_duration(r.get("for", "0s")), m.group(1), m.group(2),
                              float(m.group(3)), parse_duration(ann.get("ailab_window", "1m")),
                              r.get("labels", {}).get("severity", "")))
    if not rules:
        raise ValueError(f"{path} holds no alerting rules")
    return rules


# --------------------------------------------------------------------------- scraping

@dataclass
class Snapshot:
    """Cumulative counters of one scrape (Prometheus counters only ever go up)."""

    t: float
    buckets: dict[float, float]           # upper bound (s) -> cumulative count, including +Inf
    requests: dict[str, float]            # HTTP status -> count
    rss_bytes: float = math.nan


def samples(text: str):
    """Every sample (name, labels, value) of a Prometheus text exposition: the one parser the course uses."""
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        yield from fam.samples


def read_metrics(text: str) -> dict:
    """Prometheus text -> {sample name + labels: value}, e.g. 'ailab_requests_total{route="/v1/predict",status="200"}'."""
    out = {}
    for s in samples(text):
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def histogram_from_metrics(metrics: dict, name: str) -> tuple[list[float], list[float]]:
    """(upper bounds, count per bucket - not cumulative) of a Prometheus histogram read by read_metrics."""
    cum = sorted(((float(k.split('le="')[1].rstrip('"}')), v) for k, v in metrics.items()
                  if k.startswith(name + "_bucket")), key=lambda kv: kv[0])
    bounds = [b for b, _ in cum]
    counts = [v - (cum[i - 1][1] if i else 0) for i, (_, v) in enumerate(cum)]
    return bounds, counts


def parse_exposition(text: str, t: float | None = None, route: str = PREDICT_ROUTE) -> Snapshot:
    """Read the Prometheus text format (what /metrics returns) into a Snapshot: the latency of `route`, and the
    requests of every route but the probes and /metrics (as the rules in monitoring/alerts.yml select them)."""
    buckets, requests, rss = {}, {}, math.nan
    for s in samples(text):
        where = s.labels.get("route")
        if s.name == LATENCY_METRIC + "_bucket" and where in (None, route):
            buckets[float(s.labels["le"])] = s.value
        elif s.name == REQUESTS_METRIC + "_total" and where not in NOT_TRAFFIC:
            status = s.labels.get("status", "")
            requests[status] = requests.get(status, 0.0) + s.value
        elif s.name == RSS_METRIC:
            rss = s.value
    if not buckets:
        raise ValueError(f"no {LATENCY_METRIC} histogram in the metrics: is this an ailab server's /metrics?")
    return Snapshot(time.time() if t is None else t, buckets, requests, rss)


def scrape(url: str, timeout_s: float = 5.0, headers: dict | None = None) -> Snapshot:
    """GET `url` (a /metrics endpoint) and parse it."""
    import httpx

    try:
        r = httpx.get(url, timeout=timeout_s, headers=headers)
    except httpx.HTTPError as e:
        raise ConnectionError(f"cannot scrape {url}: {type(e).__name__}: {e}") from None
    if r.status_code != 200:
        raise ConnectionError(f"scraping {url} answered HTTP {r.status_code}: {r.text[:200]}")
    return parse_exposition(r.text)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus's histogram_quantile: find the bucket holding rank q*count, interpolate linearly in it."""
    bounds = sorted(buckets)
    counts = [buckets[b] for b in bounds]
    total = counts[-1] if counts else 0
    if total <= 0:
        return math.nan
    rank = q * total
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, counts):
        if c >= rank:
            if math.isinf(b):  # beyond the last finite bucket: the best answer is that bucket's bound
                return prev_b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c) if c > prev_c else b
        prev_b, prev_c = b, c
    return prev_b


def window_stats(old: Snapshot, new: Snapshot) -> dict:
    """p50/p99 latency (ms), error rate (5xx share) and req/s between two snapshots."""
    dt = new.t - old.t
    if dt <= 0:
        raise ValueError("the second snapshot must be later than the first")
    delta = {b: new.buckets.get(b, 0) - old.buckets.get(b, 0) for b in new.buckets}
    n = sum(new.requests.values()) - sum(old.requests.values())
    errors = sum(v - old.requests.get(k, 0) for k, v in new.requests.items() if k.startswith("5"))
    return {"p50_ms": histogram_quantile(0.5, delta) * 1e3, "p99_ms": histogram_quantile(0.99, delta) * 1e3,
            "error_rate": errors / n if n > 0 else math.nan, "rps": n / dt,
            "rss_mb": new.rss_bytes / 2**20 if not math.isnan(new.rss_bytes) else math.nan}


# --------------------------------------------------------------------------- history

class MetricHistory:
    """Metric samples over time: SQLite (a file, or in memory) by default, PostgreSQL when `dsn` is given."""

    def __init__(self, path: str | Path = ":memory:", dsn: str | None = None):
        self.kind = "postgresql" if dsn else "sqlite"
        if dsn:
            import psycopg

            self.conn = psycopg.connect(dsn, autocommit=True)
            self.ph = "%s"
            real = "DOUBLE PRECISION"
        else:
            self.conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self.ph = "?"
            real = "REAL"
        self.lock = threading.Lock()
        self._exec(f"CREATE TABLE IF NOT EXISTS metric_samples (ts {real} NOT NULL, run TEXT NOT NULL, "
                   f"name TEXT NOT NULL, value {real})")
        self._exec("CREATE INDEX IF NOT EXISTS metric_samples_run_name_ts ON metric_samples (run, name, ts)")

    def _exec(self, sql: str, params=(), many: bool = False):
        with self.lock:
            cur = self.conn.cursor()
            (cur.executemany if many else cur.execute)(sql.replace("?", self.ph), params)
            return cur.fetchall() if cur.description else None

    def write(self, ts: float, run: str, values: dict) -> None:
        rows = [(ts, run, k, None if (isinstance(v, float) and math.isnan(v)) else float(v)) for k, v in values.items()]
        self._exec("INSERT INTO metric_samples (ts, run, name, value) VALUES (?, ?, ?, ?)", rows, many=True)

    def series(self, name: str, run: str) -> list[tuple[float, float]]:
        rows = self._exec("SELECT ts, value FROM metric_samples WHERE run = ? AND name = ? ORDER BY ts", (run, name))
        return [(float(t), math.nan if v is None else float(v)) for t, v in rows]

    def runs(self) -> list[str]:
        return [r[0] for r in self._exec("SELECT DISTINCT run FROM metric_samples ORDER BY run")]

    def count(self) -> int:
        return int(self._exec("SELECT count(*) FROM metric_samples")[0][0])

    def close(self) -> None:
        self.conn.close()


@dataclass
class Recorder:
    """Scrape `metrics_url` every `every_s` seconds; write stats over the last `window_s` to `history`."""

    metrics_url: str
    history: MetricHistory
    run: str
    every_s: float = 1.0
    window_s: float = 5.0
    snapshots: list[Snapshot] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    errors: list[str] = field(default_factory=list)

    def record_once(self) -> dict | None:
        snap = scrape(self.metrics_url)
        self.snapshots.append(snap)
        older = [s for s in self.snapshots if s.t <= snap.t - self.window_s + 1e-6]
        base = older[-1] if older else self.snapshots[0]
        if base is snap:
            return None
        stats = window_stats(base, snap)
        self.history.write(snap.t, self.run, stats)
        return stats

    def _loop(self):
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.record_once()
            except Exception as e:  # noqa: BLE001 - a failed scrape is itself worth keeping
                self.errors.append(f"{type(e).__name__}: {e}")
            next_at += self.every_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> "Recorder":
        if self.every_s <= 0:
            raise ValueError(f"every_s must be > 0 (got {self.every_s})")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="ailab-metric-recorder")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


# --------------------------------------------------------------------------- alert evaluation

@dataclass
class AlertResult:
    rule: Rule
    states: list[tuple[float, str, float]]   # (ts, "inactive" | "pending" | "firing", value)
    fired_at: float | None

    @property
    def fired(self) -> bool:
        return self.fired_at is not None


def evaluate(rule: Rule, series: list[tuple[float, float]], time_scale: float = 1.0) -> AlertResult:
    """Step through `series` as Prometheus evaluates a rule: the condition must hold at every evaluation
    for `rule.for_s * time_scale` seconds before the alert fires; one false evaluation resets it."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0 (got {time_scale})")
    hold_s = rule.for_s * time_scale
    states, since, fired_at = [], None, None
    for ts, value in series:
        if rule.holds(value):
            since = ts if since is None else since
            state = "firing" if ts - since >= hold_s else "pending"
            if state == "firing" and fired_at is None:
                fired_at = ts
        else:
            since, state = None, "inactive"
        states.append((ts, state, value))
    return AlertResult(rule, states, fired_at)


def alert_figure(results: list[AlertResult], title: str):
    """One panel per rule: the metric over time, the threshold, firing periods shaded."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from ailab.device import describe_hardware

    fig = make_subplots(rows=len(results), cols=1, shared_xaxes=True,
                        subplot_titles=[f"{r.rule.name}: {r.rule.metric} {r.rule.op} {r.rule.threshold:g}"
                                        for r in results])
    for i, res in enumerate(results, 1):
        t0 = res.states[0][0] if res.states else 0.0
        xs = [ts - t0 for ts, _, _ in res.states]
        fig.add_trace(go.Scatter(x=xs, y=[v for _, _, v in res.states], name=res.rule.metric, mode="lines+markers"),
                      row=i, col=1)
        fig.add_hline(y=res.rule.threshold, line_dash="dash", row=i, col=1)
        for (ts, state, _), x in zip(res.states, xs):
            if state == "firing":
                fig.add_vrect(x0=x - 0.5, x1=x + 0.5, fillcolor="red", opacity=0.2, line_width=0, row=i, col=1)
    fig.update_layout(title={"text": f"{title}<br><sup>measured on {describe_hardware().one_line()}</sup>"},
                      template="plotly_white", height=250 * len(results) + 100, showlegend=False)
    fig.update_xaxes(title_text="seconds since recording started", row=len(results), col=1)
    return fig



class InjectedSlowdown:
    """Wrap a server predictor to inject faults: while `delay_s` > 0 every batch first sleeps that long;
    while `fail` is set every batch raises (the model "is unavailable").

    A fault drill: alerts and fallbacks are only trusted once they have been seen to work on a real fault.
    """

    def __init__(self, predictor):
        self.predictor, self.delay_s, self.fail = predictor, 0.0, False

    def __call__(self, texts):
        if self.fail:
            raise RuntimeError("injected fault: the model is unavailable")
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        return self.predictor(texts)

    def __getattr__(self, name):  # name, sha256, warmup, verify, n_bytes: the wrapped predictor's
        return getattr(self.predictor, name)
