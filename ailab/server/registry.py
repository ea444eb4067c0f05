"""Several models behind one server: loaded on demand, evicted least-recently-used, swapped hot (S7, H6).

Each loaded model owns one DynamicBatcher, hence one worker thread and one copy of the weights.
Hot swap: load the new version BESIDE the old one, verify it, switch the name to it in one
assignment (the event loop is single-threaded, so no request sees half a switch), then close the
old batcher with drain=True: requests already queued on it finish on the old weights.
While both versions are loaded they both count against the memory budget (max_bytes): before loading,
the new version is assumed to be the old one's size and other models are evicted (LRU) to make room;
if old + new cannot fit even alone, the swap is refused (SwapRefusedError, HTTP 409) and the old
version keeps serving. Loads that run meanwhile count the reservation too.
"""

from __future__ import annotations

import asyncio
import gc
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ailab.batching import DynamicBatcher, length_bucket
from ailab.server.predictor import Predictor, require_predictor


class UnknownModelError(KeyError):
    """The request named a model this server does not have (HTTP 404)."""

    def __str__(self) -> str:
        return self.args[0]


class ModelLoadError(RuntimeError):
    """A model could not be loaded or failed its self-test."""


class SwapRefusedError(RuntimeError):
    """A hot swap would hold old + new above the memory budget (HTTP 409); the old version keeps serving."""


@dataclass
class LoadedModel:
    name: str
    predictor: Predictor
    batcher: DynamicBatcher
    version: int
    load_seconds: float
    warmup_seconds: float
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def sha256(self) -> str:
        return self.predictor.sha256

    @property
    def n_bytes(self) -> int:
        return int(self.predictor.n_bytes)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "model": self.predictor.name,
            "sha256": self.sha256,
            "version": self.version,
            "engine": self.predictor.engine,
            "bytes": self.n_bytes,
            "load_seconds": round(self.load_seconds, 3),
            "warmup_seconds": round(self.warmup_seconds, 3),
            "queue_depth": self.batcher.queue_depth,
        }


def _worker_init(threads: int | None):
    def init():
        if threads:
            import torch

            torch.set_num_threads(threads)  # intra-op threads of THIS (the model's) thread

    return init


class ModelRegistry:
    """name -> loader() -> predictor. `max_models` and `max_bytes` bound what stays loaded."""

    def __init__(
        self,
        loaders: dict[str, Callable[[], object]],
        default: str,
        max_models: int = 2,
        max_bytes: int | None = None,
        batcher_kwargs: dict | None = None,
        torch_threads: int | None = None,
        on_batch=None,
        on_load=None,
        warmup: bool = True,
        freeze_gc: bool = False,
    ):
        if (loaders or default is not None) and default not in loaders:  # none at all: a generation-only server
            raise ValueError(f"default model {default!r} is not among the loaders {sorted(loaders)}")
        if max_models < 1:
            raise ValueError(f"max_models must be at least 1 (got {max_models})")
        self.loaders, self.default = dict(loaders), default
        self.max_models, self.max_bytes = max_models, max_bytes
        self.batcher_kwargs = dict(batcher_kwargs or {})
        self.torch_threads, self.on_batch, self.on_load, self.warmup = torch_threads, on_batch, on_load, warmup
        self.freeze_gc = freeze_gc
        self.loaded: dict[str, LoadedModel] = {}
        self.evictions = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._versions: dict[str, int] = {}
        self._closing: set = set()
        self._failed: dict[str, tuple[float, ModelLoadError]] = {}  # name -> (when, error): no reload storm
        self._reserved = 0  # bytes of new versions being loaded by a swap, beside their old one
        self.retry_load_s = 10.0

    def names(self) -> list[str]:
        return sorted(self.loaders)

    async def get(self, name: str | None = None) -> LoadedModel:
        """The loaded model for `name` (default if None), loading it first if needed."""
        name = name or self.default
        if not self.loaders:
            raise UnknownModelError(
                "this server serves no classification model; it generates text "
                "(POST /v1/completions or /v1/chat/completions)"
            )
        if name not in self.loaders:
            raise UnknownModelError(f"unknown model {name!r}; this server has {self.names()}")
        entry = self.loaded.get(name)
        if entry is None:
            lock = self._locks.setdefault(name, asyncio.Lock())
            async with lock:  # two first requests must not load it twice
                entry = self.loaded.get(name)
                failed = self._failed.get(name)
                if entry is None and failed and time.monotonic() - failed[0] < self.retry_load_s:
                    raise failed[1]  # a broken model is retried every retry_load_s, not per request
                if entry is None:
                    try:
                        entry = await self._build(name, self.loaders[name])
                    except ModelLoadError as e:
                        self._failed[name] = (time.monotonic(), e)
                        raise
                    self._failed.pop(name, None)
                    self._make_room(entry)
                    self.loaded[name] = entry
        entry.last_used = time.monotonic()
        return entry

    async def _build(self, name: str, loader: Callable[[], object], verify: bool = False) -> LoadedModel:
        # The model's one thread loads it, warms it up and runs every batch. A second thread that ever ran
        # torch keeps its own OpenMP team, and once the teams hold more threads than the CPU has cores,
        # libgomp stops spinning between parallel regions: on an idle 2-core box a batch of 32 MiniLM texts
        # then took 89-97 ms instead of 68. (Beside another busy process spinning costs more than it saves,
        # and OMP_WAIT_POLICY=PASSIVE is the better choice: server/model_thread.py measures both.)
        model_thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"batcher-{name}-worker", initializer=_worker_init(self.torch_threads)
        )
        t0 = time.perf_counter()
        try:
            predictor = await asyncio.get_running_loop().run_in_executor(model_thread, loader)
        except Exception as e:  # reported as a load error with its cause
            model_thread.shutdown(wait=False)
            raise ModelLoadError(f"loading model {name!r} failed: {type(e).__name__}: {e}") from e
        load_s = time.perf_counter() - t0
        try:
            require_predictor(predictor, f"model {name!r}")
        except TypeError as e:
            model_thread.shutdown(wait=False)
            raise ModelLoadError(str(e)) from None
        kw = dict(self.batcher_kwargs)
        width = kw.pop("length_bucket_tokens", None)
        if width is not None:
            kw["bucket_fn"] = length_bucket(width, predictor.count_tokens)
        try:
            batcher = DynamicBatcher(
                predictor, on_batch=self.on_batch, name=f"batcher-{name}", executor=model_thread, **kw
            )
        except Exception:
            model_thread.shutdown(wait=False)
            raise
        try:
            warm_s = 0.0
            if verify:
                await batcher.run_in_worker(predictor.verify)
            if self.warmup:
                warm_s = await batcher.run_in_worker(predictor.warmup, batcher.max_batch_size)
        except Exception as e:
            await batcher.close(drain=False)
            raise ModelLoadError(f"model {name!r} failed its self-test: {type(e).__name__}: {e}") from e
        if self.freeze_gc:
            # A model is hundreds of thousands of objects that live as long as it does, and the collector's
            # full passes walk them all (~200 ms for MiniLM on a 2-core box, holding the GIL: the p99 at 32
            # clients fell from ~300 to ~120 ms without them). Collect once now, then freeze what is alive.
            gc.collect()
            gc.freeze()
        self._versions[name] = self._versions.get(name, 0) + 1
        entry = LoadedModel(name, predictor, batcher, self._versions[name], load_s, warm_s)
        if self.on_load:
            self.on_load(entry)
        return entry

    def _make_room(self, incoming: LoadedModel) -> None:
        """Evict least-recently-used models until `incoming` fits the count and memory budgets."""

        def over():
            n = len(self.loaded) + 1
            used = sum(e.n_bytes for e in self.loaded.values()) + incoming.n_bytes + self._reserved
            return n > self.max_models or (self.max_bytes is not None and used > self.max_bytes)

        while self.loaded and over():
            victim = min(self.loaded.values(), key=lambda e: e.last_used)
            del self.loaded[victim.name]
            self.evictions += 1
            self._retire(victim)

    def _room_for_swap(self, old: LoadedModel, new_bytes: int) -> None:
        """Make `old` + a `new_bytes` version fit max_bytes together, evicting other models LRU; else refuse."""
        if self.max_bytes is None:
            return
        if old.n_bytes + new_bytes + self._reserved > self.max_bytes:
            raise SwapRefusedError(
                f"model {old.name!r}: old ({old.n_bytes} bytes) and new ({new_bytes} bytes) versions loaded side "
                f"by side would exceed the memory budget of {self.max_bytes} bytes"
            )
        others = lambda: [e for e in self.loaded.values() if e is not old]  # noqa: E731
        while sum(e.n_bytes for e in self.loaded.values()) + new_bytes + self._reserved > self.max_bytes:
            victim = min(others(), key=lambda e: e.last_used)
            del self.loaded[victim.name]
            self.evictions += 1
            self._retire(victim)

    def _retire(self, entry: LoadedModel) -> None:
        task = asyncio.get_running_loop().create_task(entry.batcher.close(drain=True))  # in-flight finish
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def swap(self, name: str, loader: Callable[[], object] | None = None) -> LoadedModel:
        """Hot swap: load `loader` (default: the registered one, reloaded) beside the current version,
        verify and warm it, switch atomically, and let the old version drain. Keeps the old on failure."""
        if name not in self.loaders:
            raise UnknownModelError(f"unknown model {name!r}; this server has {self.names()}")
        loader = loader or self.loaders[name]
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            old = self.loaded.get(name)
            guess = old.n_bytes if old is not None else 0
            if old is not None:
                self._room_for_swap(old, guess)  # before loading: new assumed as big as old
            self._reserved += guess
            try:
                new = await self._build(name, loader, verify=True)  # raises ModelLoadError; old keeps serving
            finally:
                self._reserved -= guess
            old = self.loaded.get(name)  # (an eviction may have taken it meanwhile)
            if old is not None:
                try:
                    self._room_for_swap(old, new.n_bytes)  # the real size, known now
                except SwapRefusedError:
                    await new.batcher.close(drain=False)
                    raise
            else:
                self._make_room(new)
            self.loaded[name] = new  # the atomic switch
            self.loaders[name] = loader
            if old is not None:
                self._retire(old)
        return new

    async def close(self) -> None:
        entries, self.loaded = list(self.loaded.values()), {}
        await asyncio.gather(*(e.batcher.close(drain=True) for e in entries), *list(self._closing))
