"""ailab.services starts the real servers (Debian's redis-server, PostgreSQL 15) on loopback."""

from __future__ import annotations

import socket
import time

import pytest

from ailab import services as S


def test_redis_is_a_real_server_and_is_cleaned_up():
    with S.start_redis() as r:
        c = r.client()
        c.lpush("jobs", b"a", b"b")
        assert c.brpop("jobs", timeout=1) == (b"jobs", b"a")  # LPUSH + BRPOP = first in, first out
        assert c.config_get("save")["save"] == "" and c.config_get("appendonly")["appendonly"] == "no"
        assert c.config_get("bind")["bind"] == "127.0.0.1"
        folder, proc = r.folder, r.proc
    assert proc.poll() is not None and not folder.exists()


def test_redis_goes_when_the_process_that_started_it_is_killed():
    """A notebook kernel killed (as nbval stops every one) runs no atexit: its redis-server must not outlive it."""
    import os
    import subprocess
    import sys
    import time

    code = (
        "import os, signal; from ailab import services; r = services.start_redis(); "
        "print(r.proc.pid, r.folder, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert child.returncode == -9, child.stderr
    pid, folder = child.stdout.split()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(int(pid), 9)
        pytest.fail("redis-server outlived the killed process that started it")
    from ailab.scratch import sweep

    sweep()
    assert not os.path.exists(folder), "its folder goes at the next sweep"


def test_redis_on_a_taken_port_says_why():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(S.ServiceError, match="exited at start-up|did not become ready"):
            S.start_redis(port=port, timeout_s=5)


def test_missing_binaries_are_named():
    with pytest.raises(S.ServiceError, match="apt-get install -y redis-server"):
        S.start_redis(binary="redis-server-that-does-not-exist")


def test_missing_postgres_binaries_are_named(monkeypatch, tmp_path):
    monkeypatch.setenv("AILAB_PG_BIN", str(tmp_path))
    with pytest.raises(S.ServiceError, match="apt-get install -y postgresql"):
        S.start_postgres()


def test_postgres_throwaway_cluster():
    with S.start_postgres() as pg:
        assert pg.dsn.startswith("postgresql://") and "127.0.0.1" in pg.dsn
        with pg.connect() as conn:
            conn.execute("create table t (x int)")
            conn.execute("insert into t values (1), (2), (41)")
            assert conn.execute("select sum(x) from t").fetchone() == (44,)
            assert conn.execute("show listen_addresses").fetchone() == ("127.0.0.1",)
        folder = pg.folder
    assert not folder.exists()


def test_free_port_is_free():
    port = S.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # would raise if something listened there


def test_every_server_we_start_is_one_holder(tmp_path):
    """Port, scratch folder, process, URL, stop and `with` are written once (HeldServer); each server adds only
    what it alone offers. Stopping removes the scratch, whichever server it is."""
    import dataclasses
    import subprocess
    import sys

    from ailab.prometheus import PrometheusServer

    for cls in (S.RedisServer, S.PostgresServer, PrometheusServer, S.ServerProcess):
        assert issubclass(cls, S.HeldServer), cls
        assert [f.name for f in dataclasses.fields(cls)][:3] == ["port", "folder", "proc"], cls
        assert not {"pid", "stop", "__enter__", "__exit__"} & set(vars(cls)), cls
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "serve.log").write_text("started\n")
    with S.ServerProcess(8123, tmp_path, proc) as held:
        assert held.url == "http://127.0.0.1:8123" and held.pid == proc.pid and held.log.read_text() == "started\n"
    assert proc.poll() is not None and not tmp_path.exists()
    assert S.RedisServer(6379, tmp_path).url == "redis://127.0.0.1:6379/0"
    with pytest.raises(S.ServiceError, match="daemonised"):
        S.PostgresServer(5432, tmp_path, bin_dir=tmp_path).pid


def test_wait_drained_waits_out_the_backlog_an_overload_left():
    import threading

    import httpx

    from ailab.monitoring.exposition import read_metrics
    from ailab.services import start_ailab_server

    with start_ailab_server(["--max-batch-size", "8", "--max-wait-ms", "5"]) as server:
        url = server.url + "/v1/predict"
        body = {"inputs": ["a slow, long and winding film that goes nowhere at all"] * 32}

        def flood():  # 16 clients at once, each a batch of 32 texts: a queue the server works through for a while
            with httpx.Client(timeout=60) as c:
                threads = [threading.Thread(target=c.post, args=(url,), kwargs={"json": body}) for _ in range(16)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()

        flooding = threading.Thread(target=flood)
        flooding.start()
        time.sleep(0.5)
        waited = server.wait_drained(timeout_s=60)
        m = read_metrics(httpx.get(server.url + "/metrics").text)
        flooding.join()
    assert waited > 0.05, "there was a backlog to wait for"
    assert m["ailab_queue_depth"] == 0 and m["ailab_in_flight"] == 0


def test_hold_started_holds_a_ready_server_and_stops_one_that_fails(tmp_path, monkeypatch):
    """The one start-and-wait sequence every starter ends with: ready, then stopped at exit; or stopped and why."""
    import atexit
    import subprocess
    import sys

    held_at_exit = []
    monkeypatch.setattr(atexit, "register", held_at_exit.append)
    log = tmp_path / "dead" / "server.log"
    log.parent.mkdir()
    log.write_text("no such model\n")
    dead = S.HeldServer(1, log.parent, subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]))
    with pytest.raises(S.ServiceError, match=r"(?s)dead exited at start-up \(code 3\).*no such model"):
        S.hold_started(dead, lambda: False, 30, "dead", log)
    assert not log.parent.exists() and held_at_exit == []

    slow = S.HeldServer(2, tmp_path / "slow", subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    with pytest.raises(S.ServiceError, match="slow did not become ready within 0 s"):
        S.hold_started(slow, lambda: False, 0.3, "slow", None)
    assert slow.proc.poll() is not None and held_at_exit == []

    calls = []
    ok = S.HeldServer(3, tmp_path / "ok", subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    try:
        got = S.hold_started(ok, lambda: calls == ["started"], 30, "ok", None, start=lambda: calls.append("started"))
        assert got is ok and calls == ["started"] and held_at_exit == [ok.stop] and ok.proc.poll() is None
    finally:
        ok.stop()


def test_a_server_in_its_own_session_stops_with_its_workers(tmp_path):
    """vLLM's engine core, a peer's worker processes: started in the server's session, gone when it stops."""
    import os
    import subprocess
    import sys
    from typing import ClassVar

    import psutil

    class WithWorkers(S.HeldServer):
        whole_session: ClassVar[bool] = True

    code = (
        "import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(w.pid, flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(proc.stdout.readline())
    server = WithWorkers(1, tmp_path, proc)
    assert server.rss_mib() > 5  # the server and its worker, read as one tree
    server.stop()

    def gone(pid):
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped by its new parent
        except psutil.NoSuchProcess:
            return True

    deadline = time.monotonic() + 5
    while not gone(worker):
        if time.monotonic() > deadline:
            os.kill(worker, 9)
            pytest.fail("the worker outlived the server that started it")
        time.sleep(0.05)
    assert proc.poll() is not None and not tmp_path.exists()
