"""ailab.server.predictor: the one interface of what the server serves, checked on every predictor the package
builds and every wrapper, and no caller probing a predictor for what it might have."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ailab.monitoring import InjectedSlowdown
from ailab.server import tiny_predictor
from ailab.server.predictor import Delegating, Predictor, missing_members, require_predictor
from ailab.suites._peer_model import TracedPredictor
from test_server_helpers import PlainPredictor, SlowPredictor

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny():
    return tiny_predictor()


def every_predictor(tiny, tmp_path):
    return {
        "tiny_predictor": tiny,
        "InjectedSlowdown": InjectedSlowdown(tiny),
        "TracedPredictor": TracedPredictor(tiny, str(tmp_path / "trace")),
        "SlowPredictor (tests)": SlowPredictor(tiny, batch_s=0.0),
        "PlainPredictor (tests)": PlainPredictor(),
    }


def test_every_predictor_passes_the_protocol_check(tiny, tmp_path):
    for what, p in every_predictor(tiny, tmp_path).items():
        assert missing_members(p) == [], what
        assert isinstance(p, Predictor) and require_predictor(p) is p, what
        out = p(["a fine film", "dull"])
        assert len(out) == 2 and all(isinstance(r, dict) and "label" in r for r in out), (what, out)
        assert isinstance(p.count_tokens("a fine film"), int) and p.count_tokens("a fine film") > 0, what
        assert isinstance(p.warmup(2), float), what
        p.verify()


def test_the_course_sentiment_predictor_passes_it_too():
    from ailab.server.predictors import sentiment_predictor

    p = sentiment_predictor("torch_eager")
    assert missing_members(p) == [] and isinstance(p, Predictor)
    assert p.engine == "torch_eager" and p.engine_choice is None and p.n_bytes > 20e6 and len(p.sha256) == 64


def test_a_wrapper_is_its_predictor_but_for_what_it_changes(tiny, tmp_path):
    for what, w in every_predictor(tiny, tmp_path).items():
        if not isinstance(w, Delegating):
            continue
        assert (w.sha256, w.n_bytes, w.engine, w.engine_choice) == (
            tiny.sha256,
            tiny.n_bytes,
            tiny.engine,
            tiny.engine_choice,
        ), what
        seen = []
        w.on_stages = seen.append  # the server's metrics set it on whatever they are given
        assert tiny.on_stages == seen.append and w.on_stages == seen.append, what
        tiny(["reaches the predictor that calls it"])
        assert len(seen) == 1, what
        w.on_stages = tiny.on_stages = None
    slow = InjectedSlowdown(tiny)
    slow.fail = True
    with pytest.raises(RuntimeError, match="injected fault"):
        slow(["x"])
    assert not hasattr(slow, "max_length"), "a wrapper passes on the protocol only, not whatever the predictor has"


@pytest.mark.parametrize(
    "thing, lacks",
    [
        (lambda texts: texts, ["name", "sha256", "n_bytes", "engine", "engine_choice", "on_stages", "count_tokens"]),
        (type("NoVerify", (PlainPredictor,), {"verify": None})(), ["verify"]),
        (type("NoName", (), {"__call__": lambda self, t: t}), None),
    ],
)
def test_what_is_not_a_predictor_is_refused_with_what_it_lacks(thing, lacks):
    missing = missing_members(thing)
    assert missing and (lacks is None or set(lacks) <= set(missing)), missing
    with pytest.raises(TypeError, match="is not a Predictor: it lacks " + missing[0]):
        require_predictor(thing)
    with pytest.raises(TypeError, match="not a Predictor"):
        Delegating(thing)


def test_nothing_probes_a_predictor_for_what_it_might_have():
    """The protocol says what a predictor has: getattr/hasattr on one would hide a predictor that lacks it."""
    found = []
    for path in sorted((ROOT / "ailab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") and node.args:
                if "predictor" in ast.unparse(node.args[0]).lower():
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
