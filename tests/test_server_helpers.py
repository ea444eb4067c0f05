"""Small predictors for server tests: fast, deterministic, and able to misbehave on purpose."""

import threading
import time

from ailab.server import tiny_predictor
from ailab.server.predictor import Delegating

_TINY = {}
_LOCK = threading.Lock()


def tiny(seed: int = 0, **kw):
    """One tiny predictor per (seed, options), shared across tests: building it costs ~0.5 s."""
    key = (seed, tuple(sorted(kw.items())))
    with _LOCK:
        if key not in _TINY:
            _TINY[key] = tiny_predictor(seed=seed, **kw)
    return _TINY[key]


class SlowPredictor(Delegating):
    """Wraps a predictor; each batch takes `batch_s` (a stand-in for a slow model with known capacity)."""

    name = n_bytes = None  # its own, settable (a test may make it look bigger); the predictor's by default

    def __init__(self, inner, batch_s: float = 0.05, poison: str | None = None, name: str | None = None):
        super().__init__(inner)
        self.batch_s, self.poison, self.name, self.n_bytes = batch_s, poison, name or inner.name, inner.n_bytes
        self.batch_sizes = []

    def __call__(self, texts):
        self.batch_sizes.append(len(texts))
        if self.poison is not None and any(self.poison in t for t in texts):
            raise RuntimeError("poisoned input crashed the model")
        if self.batch_s:
            time.sleep(self.batch_s)
        return self.inner(texts)


class PlainPredictor:
    """A predictor with no model behind it, for tests that need none: every member of the protocol, each as
    simple as it can be (subclasses write __call__)."""

    name, sha256, n_bytes, engine, engine_choice, on_stages = "plain", "0" * 64, 0, "none", None, None

    def __call__(self, texts):
        return [{"label": "ok", "score": 1.0, "probs": [1.0], "truncated": False} for _ in texts]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def warmup(self, max_batch_size: int = 32) -> float:
        return 0.0

    def verify(self) -> None:
        pass


class FailingLoader:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        raise OSError("weights file missing")
