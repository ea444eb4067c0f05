"""Monitoring: scrape /metrics, keep a metric history in a database, evaluate alert rules over it.

- rules.py       `load_rules("monitoring/alerts.yml")`: the Prometheus rules file; each rule also carries an
                 `ailab_check` ("p99_ms > 200") and window that this package evaluates without a Prometheus server.
- exposition.py  `scrape(url)` -> `Snapshot`: the cumulative latency histogram and request counters of a server;
                 `window_stats(old, new)`: p50/p99 (histogram_quantile, as Prometheus computes it), error rate
                 and req/s over the time between two snapshots.
- history.py     `MetricHistory`: samples (time, run, name, value) in SQLite by default, in PostgreSQL given a
                 DSN; `Recorder`: a background thread that scrapes every N seconds and writes window stats to it.
- alerts.py      `evaluate(rule, series)`: Prometheus's alert states (inactive -> pending -> firing) over a
                 recorded series; `time_scale` compresses "for 5m" so a notebook can show it in seconds.
- faults.py      `InjectedSlowdown`: a fault drill's wrapper around a real predictor.

The figure of alert results is `ailab.viz.alert_figure`.
"""

from ailab.monitoring.alerts import AlertResult, evaluate
from ailab.monitoring.exposition import (
    LATENCY_METRIC,
    NOT_TRAFFIC,
    PREDICT_ROUTE,
    REQUESTS_METRIC,
    RSS_METRIC,
    Snapshot,
    histogram_from_metrics,
    histogram_quantile,
    parse_exposition,
    read_metrics,
    samples,
    scrape,
    window_stats,
)
from ailab.monitoring.faults import InjectedSlowdown
from ailab.monitoring.history import MetricHistory, Recorder
from ailab.monitoring.rules import Rule, load_rules, parse_duration

__all__ = [
    "AlertResult",
    "InjectedSlowdown",
    "LATENCY_METRIC",
    "MetricHistory",
    "NOT_TRAFFIC",
    "PREDICT_ROUTE",
    "REQUESTS_METRIC",
    "RSS_METRIC",
    "Recorder",
    "Rule",
    "Snapshot",
    "evaluate",
    "histogram_from_metrics",
    "histogram_quantile",
    "load_rules",
    "parse_duration",
    "parse_exposition",
    "read_metrics",
    "samples",
    "scrape",
    "window_stats",
]
