"""The plain way to serve a model: the baseline `ailab bench serving` measures its batched server against.

A FastAPI `def` endpoint runs the predictor once per request, in FastAPI's threadpool, with no batcher: what
one writes first. The threads share one predictor, whose fast tokenizer raises "Already borrowed" when two
threads call it at once; so the endpoint gets a shallow copy of the predictor whose tokenize call holds a lock,
and the predictor the batched servers share is left as it was.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel


class NaiveBody(BaseModel):
    inputs: str | list[str]


def naive_app(predictor):
    """The plain way: a FastAPI `def` endpoint runs the model per request in FastAPI's threadpool."""
    from fastapi import FastAPI

    app = FastAPI()
    tokenizer_lock = threading.Lock()  # a fast tokenizer used from several threads at once raises "Already borrowed"
    tokenize = predictor.tokenize

    def locked_tokenize(texts):
        with tokenizer_lock:
            return tokenize(texts)

    predictor_copy = type(predictor).__new__(type(predictor))
    predictor_copy.__dict__.update(predictor.__dict__)
    predictor_copy.tokenize = locked_tokenize

    @app.post("/v1/predict")
    def predict(body: NaiveBody):
        texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        return {"outputs": predictor_copy(texts)}

    @app.get("/readyz")
    def ready():
        return {"ready": True}

    return app
