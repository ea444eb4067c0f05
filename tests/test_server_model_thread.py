"""Where the server runs its model: one thread for everything torch does, and a garbage collector kept off the
model's objects. Both were measured costs of a served MiniLM on 2 cores (see ModelRegistry._build)."""

import asyncio
import gc
import threading

import httpx
import pytest

from ailab.server import create_app, start_in_thread
from ailab.server.registry import ModelLoadError, ModelRegistry
from ailab.server.predictor import Delegating
from test_server_helpers import tiny

TEXTS = ["a wonderful, moving film", "dull and far too long"]


class ThreadRecorder(Delegating):
    """A predictor that notes which thread loaded it, warmed it up and ran each batch."""

    def __init__(self):
        super().__init__(tiny(0))
        self.threads = {"load": {threading.get_ident()}, "warmup": set(), "verify": set(), "batch": set()}

    def __call__(self, texts):
        self.threads["batch"].add(threading.get_ident())
        return self.inner(texts)

    def warmup(self, n):
        self.threads["warmup"].add(threading.get_ident())
        return self.inner.warmup(n)

    def verify(self):
        self.threads["verify"].add(threading.get_ident())
        return self.inner.verify()


def test_one_thread_loads_warms_and_runs_the_model():
    made = []
    app = create_app({"rec": lambda: made.append(ThreadRecorder()) or made[-1]}, "rec", max_wait_ms=1)
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        for _ in range(3):
            assert c.post(h.url + "/v1/predict", json={"inputs": TEXTS}).status_code == 200
        assert c.post(h.url + "/admin/models/rec/swap").status_code == 200  # the new version: its own thread
        assert c.post(h.url + "/v1/predict", json={"inputs": TEXTS}).status_code == 200
    assert len(made) == 2
    for rec in made:
        used = set().union(*rec.threads.values())
        assert len(used) == 1 and used != {threading.get_ident()}, rec.threads
    assert rec.threads["batch"] and rec.threads["warmup"]
    assert made[0].threads["load"] != made[1].threads["load"]


@pytest.mark.parametrize("freeze", [True, False])
def test_a_loaded_model_is_kept_out_of_the_collectors_passes(freeze):
    gc.unfreeze()
    try:
        app = create_app({"tiny": lambda: tiny(0)}, "tiny", max_wait_ms=1, freeze_gc=freeze)
        with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
            assert c.post(h.url + "/v1/predict", json={"inputs": TEXTS}).status_code == 200
            frozen = gc.get_freeze_count()
        assert (frozen > 10_000) if freeze else frozen == 0, frozen
    finally:
        gc.unfreeze()


def test_a_loader_that_fails_leaves_no_model_thread_behind():
    def broken():
        raise OSError("weights file missing")

    before = {t.name for t in threading.enumerate()}
    registry = ModelRegistry({"broken": broken}, "broken")
    with pytest.raises(ModelLoadError, match="weights file missing"):
        asyncio.run(registry.get("broken"))
    for t in threading.enumerate():
        if t.name.startswith("batcher-broken-worker") and t.name not in before:
            t.join(timeout=5)
            assert not t.is_alive(), t.name
