"""The course's one rules file, checked by Prometheus's own tools, and a real Prometheus scraping the server."""

import time
from pathlib import Path

import pytest
import yaml

from ailab import prometheus as P
from ailab.server import create_app, start_in_thread
from ailab.server.predictors import tiny_predictor

RULES = Path("monitoring/alerts.yml")
TESTS = Path("monitoring/alerts_test.yml")


def test_promtool_accepts_the_rules_file():
    r = P.promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5 rules found" in r.stdout


def test_promtool_unit_tests_of_every_alert_pass():
    r = P.promtool("test", "rules", TESTS.name, cwd=TESTS.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_promtool_test():
    rules = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {t["alertname"] for case in yaml.safe_load(TESTS.read_text())["tests"] for t in case["alert_rule_test"]}
    assert rules == tested


@pytest.mark.parametrize(
    "old, new",
    [
        ("by (le)) > 0.2", "by (le)) > 0.6"),  # a latency threshold nobody reaches
        ("for: 5m", "for: 15m"),  # an alert that waits too long
        ("[1m])) > 0.01", "[1m])) >= 0.01"),  # the error-rate boundary: exactly 1 % must not page
        ("> 0.8", "> 0.95"),  # a queue alert that comes too late
    ],
)
def test_the_promtool_tests_fail_on_a_broken_rule(tmp_path, old, new):
    text = RULES.read_text()
    assert old in text
    (tmp_path / "alerts.yml").write_text(text.replace(old, new, 1))
    (tmp_path / "alerts_test.yml").write_text(TESTS.read_text())
    r = P.promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert r.returncode != 0, f"the promtool tests passed a broken rule ({old!r} -> {new!r})"


def test_scaled_rules_shrink_time_and_keep_thresholds(tmp_path):
    out = P.scaled_rules(RULES, tmp_path / "fast.yml", time_scale=1 / 60, min_window_s=2.0)
    rules = {r["alert"]: r for g in yaml.safe_load(out.read_text())["groups"] for r in g["rules"]}
    assert rules["HighP99Latency"]["for"] == "5000ms" and "[5000ms]" in rules["HighP99Latency"]["expr"]
    assert "[2000ms]" in rules["HighErrorRate"]["expr"]  # 1 m / 60 = 1 s, kept at 2 s so rate() sees two scrapes
    assert "> 0.2" in rules["HighP99Latency"]["expr"] and "> 0.01" in rules["HighErrorRate"]["expr"]
    assert P.promtool("check", "rules", str(out)).returncode == 0


def test_a_real_prometheus_scrapes_the_server_with_the_rules_loaded():
    server = start_in_thread(create_app({"tiny": tiny_predictor}, "tiny"))
    try:
        with P.start_prometheus([server.url.split("//")[1]], [RULES]) as prom:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                up = prom.query("up")
                if up and up[0]["value"][1] == "1":
                    break
                time.sleep(0.25)
            assert up and up[0]["value"][1] == "1", f"Prometheus never scraped the server: {up}"
            assert prom.alerts() == []  # healthy and idle: nothing pending, nothing firing
    finally:
        server.stop()


def test_a_missing_binary_is_explained(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(P.ServiceError, match="apt-get install -y prometheus"):
        P.promtool("check", "rules", str(RULES))
