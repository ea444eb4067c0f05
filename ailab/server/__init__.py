"""The inference server: FastAPI over the DynamicBatcher, with a model registry (topics S3-S11).

    from ailab.server import create_app, start_in_thread, serve_main
    handle = start_in_thread(create_app())      # MiniLM sentiment, loopback, a free port
    httpx.post(handle.url + "/v1/predict", json={"inputs": "a fine film"}); handle.stop()

Modules: app (create_app), edge (what every request passes: key, request id, errors, metrics, log), routes (the
endpoints), openai_api and openai_protocol (OpenAI's completions API), async_llm (the generation engine's front end:
core_client, output_processor, detokenizer, llm_metrics), generation_policy (what --generate chooses), state
(what they share), registry (LRU + hot swap), validation, metrics (Prometheus, logs), predictors (what is served),
run (threads and the `ailab serve` command), ray_serve (the whole app as a Ray Serve deployment).
"""

from ailab.server.app import ServerConfig, create_app
from ailab.server.predictors import InputTooLongError, TextClassifierPredictor, sentiment_predictor, tiny_predictor
from ailab.server.registry import ModelLoadError, ModelRegistry, SwapRefusedError, UnknownModelError
from ailab.server.run import ServerHandle, serve_main, start_in_thread

__all__ = [
    "InputTooLongError",
    "ModelLoadError",
    "ModelRegistry",
    "ServerConfig",
    "ServerHandle",
    "SwapRefusedError",
    "TextClassifierPredictor",
    "UnknownModelError",
    "create_app",
    "sentiment_predictor",
    "serve_main",
    "start_in_thread",
    "tiny_predictor",
]
