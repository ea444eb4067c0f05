"""Metric history: samples (time, run, name, value) in SQLite, or PostgreSQL given a DSN, and a recorder thread
that scrapes a server every N seconds and writes the window's statistics to it."""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ailab.monitoring.exposition import Snapshot, scrape, window_stats


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
        self._exec(
            f"CREATE TABLE IF NOT EXISTS metric_samples (ts {real} NOT NULL, run TEXT NOT NULL, "
            f"name TEXT NOT NULL, value {real})"
        )
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
