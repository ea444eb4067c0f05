"""Run async code from sync code, also inside Jupyter (whose own event loop is already running)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable


def run_sync(coro_fn: Callable[[], Any]):
    """asyncio.run(coro_fn()) on a helper thread, so it works whether or not a loop runs here."""
    box: dict = {}

    def target():
        try:
            box["result"] = asyncio.run(coro_fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="ailab-run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
