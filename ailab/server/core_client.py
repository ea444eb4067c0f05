"""The front end's way to the engine core (vLLM v1's EngineCoreClient): one interface, two places the core runs.

    InprocClient  the core's busy loop in a thread of this process (notebooks, tests, --generation-in-thread)
    MPClient      the core in a process of its own, two pipes between (the server's default; core_loop.py says why)

Both take EngineCoreRequests and aborts, and hand every step's EngineCoreOutputs to `on_outputs` on their own
thread (the core's thread, or the thread that reads the core's pipe). A core that dies calls `on_dead(reason)`
once; `ready` is set when the model is built (or the core failed to start).
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

from ailab.generation.core_io import EngineCoreOutputs, EngineCoreRequest, EngineCoreRequestType
from ailab.generation.core_loop import core_process_main, make_core, run_busy_loop

OnOutputs = Callable[[EngineCoreOutputs], None]
OnDead = Callable[[str], None]


class EngineCoreClient:
    """What the front end (async_llm.AsyncLLM) needs from a core, wherever it runs."""

    max_model_len: int | None = None
    vocab_size: int | None = None

    def __init__(self, on_outputs: OnOutputs, on_dead: OnDead):
        self.on_outputs, self.on_dead = on_outputs, on_dead
        self.ready = threading.Event()
        self.closed = False

    def add_request(self, req: EngineCoreRequest) -> None:
        self._send(EngineCoreRequestType.ADD, req)

    def abort_request(self, request_id: int) -> None:
        self._send(EngineCoreRequestType.ABORT, request_id)

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    def close(self, timeout_s: float = 5.0) -> None:
        raise NotImplementedError

    def _send(self, kind: EngineCoreRequestType, item) -> None:
        raise NotImplementedError


class InprocClient(EngineCoreClient):
    def __init__(self, model, core_kw: dict, threads: int | None, on_outputs: OnOutputs, on_dead: OnDead):
        super().__init__(on_outputs, on_dead)
        self.max_model_len, self.vocab_size = model.max_positions, model.vocab_size
        self.core = None  # the core itself, for tests that look inside
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(model, core_kw, threads), name="ailab-engine-core")
        self._thread.daemon = True
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout_s: float = 5.0) -> None:
        self.closed = True
        self._wake.set()
        self._thread.join(timeout_s)

    def _send(self, kind: EngineCoreRequestType, item) -> None:
        self._inbox.put((kind, item))
        self._wake.set()

    def _take(self, wait_s: float) -> list:
        if wait_s and self._inbox.empty():
            self._wake.wait(wait_s)
        self._wake.clear()
        got = []
        while not self._inbox.empty():
            got.append(self._inbox.get_nowait())
        return got

    def _main(self, model, core_kw: dict, threads: int | None) -> None:
        try:
            if threads:
                import torch

                torch.set_num_threads(threads)  # this thread's OpenMP team (see server/model_thread.py)
            self.core = make_core(model, **core_kw)
            self.ready.set()
            run_busy_loop(self.core, self._take, self.on_outputs, lambda: self.closed)
        except BaseException as e:  # noqa: BLE001 - the core's death is reported by /readyz, not lost
            self.on_dead(f"the engine core's thread stopped: {type(e).__name__}: {e}")
            self.ready.set()


class MPClient(EngineCoreClient):
    def __init__(self, factory, core_kw: dict, threads: int | None, on_outputs: OnOutputs, on_dead: OnDead):
        """`factory`: a picklable callable that builds the model in the core's process."""
        import multiprocessing

        super().__init__(on_outputs, on_dead)
        self.failed: str | None = None
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no fork of torch's threads
        self._commands, child_commands = ctx.Pipe(duplex=False)[::-1]
        child_outputs, self._outputs = ctx.Pipe(duplex=False)[::-1]
        self._send_lock = threading.Lock()
        self.proc = ctx.Process(
            target=core_process_main,
            args=(child_commands, child_outputs, factory, core_kw, threads),
            name="ailab-engine-core",
            daemon=True,
        )
        self.proc.start()
        child_commands.close()
        child_outputs.close()
        threading.Thread(target=self._read_outputs, name="ailab-engine-core-outputs", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def close(self, timeout_s: float = 5.0) -> None:
        self.closed = True
        try:
            self._send(EngineCoreRequestType.CLOSE, None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout_s)
        if self.proc.is_alive():
            self.proc.terminate()

    def _send(self, kind: EngineCoreRequestType, item) -> None:
        with self._send_lock:
            self._commands.send((kind, item))

    def _read_outputs(self) -> None:
        try:
            while True:
                message = self._outputs.recv()
                if isinstance(message, EngineCoreOutputs):
                    self.on_outputs(message)
                elif message[0] == "ready":
                    self.max_model_len, self.vocab_size = message[1]
                    self.ready.set()
                else:
                    self.failed = f"the engine core's process failed to start: {message[1]}"
                    self.on_dead(self.failed)
                    self.ready.set()
                    return
        except (EOFError, OSError):
            if not self.closed:
                self.on_dead("the engine core's process ended")
                self.ready.set()


def make_client(
    model, core_kw: dict, threads: int | None, process: bool, on_outputs: OnOutputs, on_dead: OnDead
) -> EngineCoreClient:
    """`model`: a Decoder (the core runs in a thread here), or with `process` a picklable callable that builds one."""
    cls = MPClient if process else InprocClient
    return cls(model, core_kw, threads, on_outputs, on_dead)
