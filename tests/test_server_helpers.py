"""Small predictors for server tests: fast, deterministic, and able to misbehave on purpose."""

import threading
import time

from ailab.server import tiny_predictor

_TINY = {}
_LOCK = threading.Lock()


def tiny(seed: int = 0, **kw):
    """One tiny predictor per (seed, options), shared across tests: building it costs ~0.5 s."""
    key = (seed, tuple(sorted(kw.items())))
    with _LOCK:
        if key not in _TINY:
            _TINY[key] = tiny_predictor(seed=seed, **kw)
    return _TINY[key]


class SlowPredictor:
    """Wraps a predictor; each batch takes `batch_s` (a stand-in for a slow model with known capacity)."""

    def __init__(self, inner, batch_s: float = 0.05, poison: str | None = None, name: str | None = None):
        self.inner, self.batch_s, self.poison = inner, batch_s, poison
        self.name, self.sha256, self.engine, self.n_bytes = name or inner.name, inner.sha256, "torch", inner.n_bytes
        self.batch_sizes = []

    def __call__(self, texts):
        self.batch_sizes.append(len(texts))
        if self.poison is not None and any(self.poison in t for t in texts):
            raise RuntimeError("poisoned input crashed the model")
        if self.batch_s:
            time.sleep(self.batch_s)
        return self.inner(texts)

    def warmup(self, n):
        return self.inner.warmup(n)

    def verify(self):
        return self.inner.verify()


class FailingLoader:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        raise OSError("weights file missing")
