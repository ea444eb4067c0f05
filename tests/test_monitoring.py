"""ailab.monitoring: rules file, histogram quantiles (numpy as oracle), history in SQLite and PostgreSQL,
alert state machine, and a Recorder scraping a real prometheus_client /metrics endpoint."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ailab import monitoring as M
from ailab import services
from test_server_helpers import PlainPredictor

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)


def _server_metrics():
    reg = CollectorRegistry()
    lat = Histogram(M.LATENCY_METRIC, "latency", buckets=BUCKETS, registry=reg)
    req = Counter(M.REQUESTS_METRIC, "requests", ["status"], registry=reg)
    return reg, lat, req


def test_rules_file_matches_the_issue_and_promql_agrees():
    rules = {r.name: r for r in M.load_rules("monitoring/alerts.yml")}
    p99, err = rules["HighP99Latency"], rules["HighErrorRate"]
    assert (p99.metric, p99.op, p99.threshold, p99.for_s) == ("p99_ms", ">", 200.0, 300.0)
    assert (err.metric, err.op, err.threshold, err.for_s) == ("error_rate", ">", 0.01, 60.0)
    # the PromQL thresholds (seconds, ratios) say the same as the ailab checks (ms, ratios)
    assert float(re.search(r">\s*([\d.]+)\s*$", p99.expr).group(1)) * 1e3 == p99.threshold
    assert float(re.search(r">\s*([\d.]+)\s*$", err.expr).group(1)) == err.threshold
    assert "[5m]" in p99.expr and "[1m]" in err.expr and "0.99" in p99.expr
    assert p99.window_s == 300 and err.window_s == 60


def test_bad_rules_files_are_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="alerts.yml"):
        M.load_rules(tmp_path / "nope.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: g\n    rules:\n      - alert: X\n        expr: up == 0\n")
    with pytest.raises(ValueError, match="ailab_check"):
        M.load_rules(bad)
    with pytest.raises(ValueError, match="duration"):
        M.parse_duration("5 minutes")


def test_histogram_quantile_close_to_numpy():
    rng = np.random.default_rng(0)
    reg, lat, _ = _server_metrics()
    samples = rng.lognormal(mean=np.log(0.04), sigma=0.5, size=5000)
    for s in samples:
        lat.observe(s)
    snap = M.parse_exposition(generate_latest(reg).decode(), t=0.0)
    for q in (0.5, 0.99):
        est, exact = M.histogram_quantile(q, snap.buckets), np.percentile(samples, q * 100)
        # interpolation inside one bucket: right to within that bucket's width
        hi = min(b for b in BUCKETS if b >= exact)
        lo = max([0] + [b for b in BUCKETS if b < exact])
        assert lo <= est <= hi and abs(est - exact) <= hi - lo
    assert math.isnan(M.histogram_quantile(0.99, {0.1: 0, math.inf: 0}))


def test_window_stats_use_only_the_difference():
    reg, lat, req = _server_metrics()
    for _ in range(100):
        lat.observe(0.003)
        req.labels("200").inc()
    a = M.parse_exposition(generate_latest(reg).decode(), t=10.0)
    for i in range(100):  # the next window: slow, and 5 % answered 503
        lat.observe(0.4)
        req.labels("503" if i % 20 == 0 else "200").inc()
    b = M.parse_exposition(generate_latest(reg).decode(), t=20.0)
    w = M.window_stats(a, b)
    assert 300 <= w["p99_ms"] <= 500 and 300 <= w["p50_ms"] <= 500  # the fast first window is not mixed in
    assert w["error_rate"] == pytest.approx(0.05) and w["rps"] == pytest.approx(10.0)
    assert math.isnan(M.window_stats(b, M.Snapshot(21.0, b.buckets, b.requests))["error_rate"])  # no traffic


def _rule(for_s=60.0):
    return M.Rule("HighP99Latency", "", for_s, "p99_ms", ">", 200.0, 300.0)


def test_alert_fires_only_after_holding_for_the_whole_duration():
    series = [(float(t), 300.0 if 10 <= t < 30 else 50.0) for t in range(40)]
    res = M.evaluate(_rule(for_s=5.0), series)
    assert res.fired and res.fired_at == 15.0
    assert [s for t, s, _ in res.states if t in (9, 10, 14, 15, 29, 30)] == [
        "inactive",
        "pending",
        "pending",
        "firing",
        "firing",
        "inactive",
    ]
    assert not M.evaluate(_rule(for_s=60.0), series).fired  # 20 s of slowness < for 60 s
    assert M.evaluate(_rule(for_s=60.0), series, time_scale=1 / 6).fired  # 60 s compressed to 10 s


def test_a_single_good_sample_resets_pending_and_nan_never_fires():
    flappy = [(float(t), 50.0 if t % 4 == 3 else 300.0) for t in range(40)]
    assert not M.evaluate(_rule(for_s=5.0), flappy).fired
    assert not M.evaluate(_rule(for_s=0.0), [(0.0, math.nan), (1.0, math.nan)]).fired


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_history_round_trip(backend, tmp_path):
    if backend == "postgresql":
        pg = services.start_postgres()
        hist = M.MetricHistory(dsn=pg.dsn)
    else:
        pg, hist = None, M.MetricHistory(tmp_path / "metrics.sqlite")
    try:
        hist.write(1.0, "healthy", {"p99_ms": 12.5, "error_rate": 0.0})
        hist.write(2.0, "healthy", {"p99_ms": 14.0, "error_rate": math.nan})
        hist.write(1.5, "slow", {"p99_ms": 400.0})
        assert hist.series("p99_ms", "healthy") == [(1.0, 12.5), (2.0, 14.0)]
        assert math.isnan(hist.series("error_rate", "healthy")[1][1])
        assert hist.runs() == ["healthy", "slow"] and hist.count() == 5
        assert hist.kind == backend
    finally:
        hist.close()
        if pg:
            pg.stop()


def test_recorder_scrapes_a_real_metrics_endpoint(tmp_path):
    from prometheus_client import start_http_server

    reg, lat, req = _server_metrics()
    port = services.free_port()
    httpd, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        hist = M.MetricHistory(tmp_path / "h.sqlite")
        rec = M.Recorder(f"http://127.0.0.1:{port}/metrics", hist, "run1", every_s=0.2, window_s=0.6).start()
        t_end = time.time() + 1.5
        while time.time() < t_end:
            lat.observe(0.02)
            req.labels("200").inc()
            time.sleep(0.005)
        rec.stop()
        series = hist.series("p99_ms", "run1")
        assert len(series) >= 4 and not rec.errors
        assert all(10 <= v <= 25 for _, v in series)  # every observation was 20 ms: bucket (10, 25] ms
        assert all(v > 20 for _, v in hist.series("rps", "run1")[1:])
    finally:
        httpd.shutdown()
    with pytest.raises(ConnectionError, match="cannot scrape"):
        M.scrape(f"http://127.0.0.1:{services.free_port()}/metrics", timeout_s=1)


def test_injected_fault_wraps_a_predictor():
    calls = []

    class P(PlainPredictor):
        name = "p"

        def __call__(self, texts):
            calls.append(texts)
            return [len(t) for t in texts]

    f = M.InjectedSlowdown(P())
    assert f(["ab"]) == [2] and f.name == "p"
    f.delay_s = 0.05
    t0 = time.perf_counter()
    f(["x"])
    assert time.perf_counter() - t0 >= 0.05
    f.fail = True
    with pytest.raises(RuntimeError, match="injected"):
        f(["x"])
    assert len(calls) == 2
