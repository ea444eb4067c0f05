"""The one interface of what the server serves: texts in, one result (or one exception) per text out, plus what
the registry, the metrics and the routes read about it. Written once here and checked when a model loads, so no
caller probes a predictor for what it might have; a wrapper (a fault drill, a tracer) delegates through it.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable


@runtime_checkable
class Predictor(Protocol):
    name: str  # what /healthz, /v1/models and /metrics call it
    sha256: str  # the identity of the weights it serves (the ONNX file's hash where a session runs one)
    n_bytes: int  # its weights in memory: the registry's memory budget counts them
    engine: str  # what runs it: a variant's name (ailab.variants.VARIANTS)
    engine_choice: dict | None  # engine "auto": what start-up measured and picked; None otherwise
    on_stages: Callable | None  # set by the metrics: called with each batch's StageTimings on the worker thread

    def __call__(self, texts: list[str]) -> list:
        """One result per text, in order; a text that cannot be answered gets its exception in its place."""

    def count_tokens(self, text: str) -> int:
        """What this text costs in a batch (word pieces after truncation): length buckets group by it."""

    def warmup(self, max_batch_size: int = 32) -> float:
        """Run the shapes the server will see once; the seconds it took."""

    def verify(self) -> None:
        """A cheap self-test before the model takes traffic; raises with the reason."""


MEMBERS = ("name", "sha256", "n_bytes", "engine", "engine_choice", "on_stages")
METHODS = ("__call__", "count_tokens", "warmup", "verify")


def missing_members(obj) -> list[str]:
    """The members of `Predictor` that `obj` lacks (a method must also be callable)."""
    missing = [m for m in MEMBERS if not hasattr(obj, m)]
    return missing + [m for m in METHODS if not callable(getattr(obj, m, None))]


def require_predictor(obj, what: str = "the model"):
    """`obj`, if it is a Predictor; else a TypeError that names what it lacks."""
    missing = missing_members(obj)
    if missing:
        raise TypeError(
            f"{what} ({type(obj).__name__}) is not a Predictor: it lacks {', '.join(missing)}. A predictor is "
            "called with a list of texts and has the members of ailab.server.predictor.Predictor; a wrapper "
            "subclasses Delegating"
        )
    return obj


class Delegating:
    """A wrapper's base: every member of the protocol is the wrapped predictor's, written out once here. A wrapper
    overrides what it changes (usually __call__). No __getattr__: what the protocol does not name is not passed
    through by accident, and setting on_stages reaches the predictor that calls it."""

    def __init__(self, inner):
        object.__setattr__(self, "inner", require_predictor(inner, "the wrapped predictor"))

    name = property(lambda self: self.inner.name)
    sha256 = property(lambda self: self.inner.sha256)
    n_bytes = property(lambda self: self.inner.n_bytes)
    engine = property(lambda self: self.inner.engine)
    engine_choice = property(lambda self: self.inner.engine_choice)

    @property
    def on_stages(self):
        return self.inner.on_stages

    @on_stages.setter
    def on_stages(self, observer) -> None:
        self.inner.on_stages = observer

    def __call__(self, texts: list[str]) -> list:
        return self.inner(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def warmup(self, max_batch_size: int = 32) -> float:
        return self.inner.warmup(max_batch_size)

    def verify(self) -> None:
        self.inner.verify()
