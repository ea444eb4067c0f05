"""ailab.suites.request_time: the figures notebook 3/04 reads about where a request's time goes."""

import math
import subprocess
import sys
import textwrap
import time

import pytest

from ailab.monitoring import read_metrics
from ailab.server import create_app, start_in_thread
from ailab.server.metrics import ACCESS_LOG
from ailab.suites import request_time
from test_server_helpers import tiny


def test_sum_count_adds_every_model_and_keeps_stages_apart():
    m = read_metrics(
        'ailab_batch_stage_seconds_sum{model="a",stage="forward"} 2.0\n'
        'ailab_batch_stage_seconds_count{model="a",stage="forward"} 4.0\n'
        'ailab_batch_stage_seconds_sum{model="b",stage="forward"} 1.0\n'
        'ailab_batch_stage_seconds_count{model="b",stage="forward"} 1.0\n'
        'ailab_batch_stage_seconds_sum{model="a",stage="tokenize"} 9.0\n'
        'ailab_batch_stage_seconds_count{model="a",stage="tokenize"} 9.0\n'
        "ailab_batch_size_sum 64.0\nailab_batch_size_count 2.0\n"
    )
    assert request_time._sum_count(m, "ailab_batch_stage_seconds", "forward") == (3.0, 5.0)
    assert request_time._sum_count(m, "ailab_batch_size") == (64.0, 2.0)
    assert request_time._sum_count(m, "ailab_queue_wait_seconds") == (0.0, 0.0)


def test_thread_roles_follow_the_names_the_server_gives():
    assert request_time.thread_role("batcher-sentiment-worker_0") == "model thread"
    assert request_time.thread_role("MainThread") == "HTTP event loop"
    assert request_time.thread_role("uvicorn-8000") == "HTTP event loop"
    assert request_time.thread_role("ThreadPoolExecutor-0_0") == "other"


def test_handler_costs_are_small_positive_and_leave_the_access_log_as_it_was():
    before = (ACCESS_LOG.level, ACCESS_LOG.propagate, list(ACCESS_LOG.handlers))
    costs = request_time.handler_costs(n=200)
    assert set(costs) == {"parse_and_validate_us", "serialise_us", "access_log_us"}
    assert all(0 < us < 5000 for us in costs.values()), costs
    assert (ACCESS_LOG.level, ACCESS_LOG.propagate, list(ACCESS_LOG.handlers)) == before


def test_server_stages_of_a_running_server_add_up():
    with start_in_thread(create_app({"t": lambda: tiny(0)}, "t", max_wait_ms=5, max_batch_size=8)) as h:
        s = request_time.server_stages(h.url, clients=4, seconds=1.0)
    assert s["errors"] == 0 and s["requests"] > 0 and s["rps"] > 0
    assert 1 <= s["batch_size"] <= 8
    assert 0 <= s["queue_wait_ms"] <= s["handler_ms"] <= s["client_ms"]
    assert s["compute_ms"] <= s["handler_ms"] and 0 < s["model_busy"] <= 1.05
    assert s["cycle_ms"] >= s["compute_ms"] * 0.95
    assert math.isclose(s["outside_handler_ms"], s["client_ms"] - s["handler_ms"], abs_tol=0.02)


def test_profile_threads_counts_samples_by_thread_role(tmp_path):
    script = textwrap.dedent("""
        import threading, time
        def spin():
            while True:
                sum(range(1000))
        threading.Thread(target=spin, name="batcher-demo-worker_0", daemon=True).start()
        while True:
            time.sleep(0.01)
    """)
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        time.sleep(0.5)
        try:
            prof = request_time.profile_threads(child.pid, seconds=1, rate=50)
        except PermissionError as e:  # a machine that forbids reading another process (ptrace_scope)
            pytest.skip(str(e))
    finally:
        child.kill()
        child.wait()
    assert prof["samples"] > 10
    assert prof["by_role"]["model thread"] > 0.8, prof  # the sleeping main thread is idle, not sampled
    assert math.isclose(sum(prof["by_role"].values()), 1.0)
    assert any("spin" in frame for frame, _ in prof["top_frames"]["model thread"])


def test_profile_threads_says_when_the_process_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises((RuntimeError, PermissionError)):
        request_time.profile_threads(child.pid, seconds=1)
