"""The OpenAI completions API as this server speaks it: request bodies checked into `GenerationParams` (with the
`SamplingParams` the engine reads), and the answers and stream chunks that OpenAI's clients parse (issue 28). No
HTTP here: the routes are in openai_api.py.

    POST /v1/completions       {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "n": 1,
                                "stream", "stream_options": {"include_usage"}}
    POST /v1/chat/completions  the same with "messages" instead of "prompt" (and "max_completion_tokens")

Text is bytes here (the course's model is byte-level): a prompt is its UTF-8 bytes, one token each. A bad
parameter is a 400 that names it (OpenAI's clients raise `BadRequestError`); a field this server does not know
is refused too, so a misspelt "temprature" is not silently ignored. Fields that clients send with their neutral
value (n=1, logprobs null, penalties 0, vLLM's repetition_penalty 1 and ignore_eos) are accepted as such.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ailab.generation.chat import CHAT_STOP, chat_prompt
from ailab.generation.sampling_params import SamplingParams
from ailab.server.validation import InvalidRequest

MAX_STOPS, MAX_STOP_BYTES = 4, 32
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat defaults to the rest of the context

_COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "user",
    "logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "repetition_penalty",
    "ignore_eos",
    "best_of",
}
_COMPLETION = _COMMON | {"prompt", "echo", "suffix"}
_CHAT = _COMMON | {"messages", "max_completion_tokens", "top_logprobs"}
_UNSUPPORTED = {
    "tools": "tool calls",
    "tool_choice": "tool calls",
    "functions": "function calls",
    "function_call": "function calls",
    "response_format": "structured output",
    "suffix": "insertion (suffix)",
}


@dataclass
class GenerationParams:
    """A checked request: the prompt's token ids and its SamplingParams, which go to the engine as they are, and
    what only the route needs (the model's name, whether to stream, chat or completion)."""

    model: str
    prompt_ids: list[int]
    sampling_params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    chat: bool = False


def _bad(message: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(400, message, param)


def _utf8(text: str, param: str, where: str | None = None) -> bytes:
    """`text` as the UTF-8 bytes the byte-level model reads and writes. JSON can spell half of a UTF-16 pair
    ("\\ud800") that is no character and has no UTF-8 form: a 400 naming the parameter, never a 500 further on.
    The one place every text field (prompt, messages, stop) is encoded, so each is refused in the same words."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(
            f"there is an unpaired surrogate escape (such as \\ud800: half of a UTF-16 pair, not a real character) "
            f"in {where or param}; send real text",
            param,
        ) from None


def _number(body: dict, name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    v = body.get(name)
    if v is None:
        return default
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or v != v
        or not ((low < v if low_open else low <= v) and v <= high)
    ):
        side = "(" if low_open else "["
        raise _bad(f"{name} must be a number in {side}{low:g}, {high:g}], got {v!r}", name)
    return float(v)


def _neutral(body: dict, name: str, allowed: tuple, what: str) -> None:
    if name in body and body[name] not in allowed:
        raise _bad(f"{name}={body[name]!r} is not supported: {what}", name)


def _prompt_ids(prompt, vocab_size: int) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # one prompt in a list, as some clients send it
    if isinstance(prompt, str):
        if not prompt:
            raise _bad("prompt must not be empty: this byte-level model has no start token to begin from", "prompt")
        return list(_utf8(prompt, "prompt"))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not all(0 <= t < vocab_size for t in prompt):
            raise _bad(f"prompt token ids must be in [0, {vocab_size}) for this byte-level model", "prompt")
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
        raise _bad(
            "one prompt per request here (a list of several prompts is a batch; send them as separate "
            "requests: the server batches them itself)",
            "prompt",
        )
    raise _bad("prompt must be a non-empty string, or a list of token ids", "prompt")


def _stops(stop) -> list[bytes]:
    if stop is None:
        return []
    one = isinstance(stop, str)
    stop = [stop] if one else stop
    if not isinstance(stop, list) or len(stop) > MAX_STOPS or not all(isinstance(x, str) and x for x in stop):
        raise _bad(f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them", "stop")
    stops = [_utf8(x, "stop", "stop" if one else f"stop[{i}]") for i, x in enumerate(stop)]
    if any(len(x) > MAX_STOP_BYTES for x in stops):
        raise _bad(f"each stop string may be at most {MAX_STOP_BYTES} bytes", "stop")
    return stops


def _parse(
    body, allowed: set, served_model: str, max_model_len: int, max_request_tokens: int, vocab_size: int, chat: bool
) -> GenerationParams:
    if not isinstance(body, dict):
        raise _bad('the body must be a JSON object, e.g. {"model": "...", "prompt": "This movie"}')
    for name, what in _UNSUPPORTED.items():
        if body.get(name) not in (None, [], {}, "", "none", "auto", {"type": "text"}):
            raise _bad(f"{name} is not supported: this server does not do {what}", name)
    unknown = sorted(set(body) - allowed - set(_UNSUPPORTED))
    if unknown:
        raise _bad(f"unrecognized request argument(s) {unknown}; this server takes {sorted(allowed)}", unknown[0])
    model = body.get("model", served_model)
    if model != served_model:
        raise InvalidRequest(
            404,
            f"the model {model!r} does not exist here; this server generates with "
            f"{served_model!r} (GET /v1/models lists it)",
            "model",
        )
    _neutral(body, "n", (None, 1), "one completion per request (n=1)")
    _neutral(body, "best_of", (None, 1), "best_of=1 only")
    _neutral(body, "logprobs", (None, False, 0), "this server returns no log-probabilities")
    _neutral(body, "top_logprobs", (None, 0), "this server returns no log-probabilities")
    _neutral(body, "echo", (None, False), "echo is not supported; the prompt is yours already")
    _neutral(body, "presence_penalty", (None, 0, 0.0), "no penalties (0 only)")
    _neutral(body, "frequency_penalty", (None, 0, 0.0), "no penalties (0 only)")
    _neutral(body, "repetition_penalty", (None, 1, 1.0), "no penalties (1 only)")
    _neutral(body, "logit_bias", (None, {}), "no logit bias")
    if "user" in body and not isinstance(body["user"], (str, type(None))):
        raise _bad("user must be a string", "user")
    if "ignore_eos" in body and not isinstance(body["ignore_eos"], (bool, type(None))):
        raise _bad(
            "ignore_eos must be true or false (this byte-level model has no end-of-text token: it always "
            "runs to max_tokens or a stop string)",
            "ignore_eos",
        )
    if chat:
        try:
            text = chat_prompt(body.get("messages"))
        except ValueError as e:
            raise _bad(str(e), "messages") from None
        prompt = list(_utf8(text, "messages"))
    else:
        if "prompt" not in body:
            raise _bad('missing field "prompt" (a string)', "prompt")
        prompt = _prompt_ids(body["prompt"], vocab_size)
    room = max_model_len - len(prompt)
    if room < 1:
        raise _bad(
            f"this model's maximum context length is {max_model_len} tokens, and the prompt alone has "
            f"{len(prompt)} (one byte is one token here); shorten it",
            "messages" if chat else "prompt",
        )
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    n = body.get(name)
    if n is None:
        n = room if chat else min(DEFAULT_MAX_TOKENS, room)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise _bad(f"{name} must be a whole number of at least 1, got {n!r}", name)
    if len(prompt) + n > max_model_len:
        raise _bad(
            f"this model's maximum context length is {max_model_len} tokens; you asked for {len(prompt) + n} "
            f"({len(prompt)} in the prompt, {n} for the completion): lower {name} or shorten the prompt",
            name,
        )
    if len(prompt) + n > max_request_tokens:
        raise _bad(
            f"the prompt and {name} need {len(prompt) + n} tokens of KV cache; this server holds "
            f"{max_request_tokens} in all",
            name,
        )
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise _bad(f"seed must be a whole number from 0 to 2**63 - 1, got {seed!r}", "seed")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad(f"stream must be true or false, got {stream!r}", "stream")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise _bad('stream_options is only allowed with "stream": true', "stream_options")
        if (
            not isinstance(options, dict)
            or set(options) - {"include_usage", "continuous_usage_stats"}
            or not all(isinstance(v, bool) for v in options.values())
        ):
            raise _bad('stream_options must be {"include_usage": true|false}', "stream_options")
    stops = _stops(body.get("stop"))
    if chat:
        stops.append(CHAT_STOP.encode())
    sampling = SamplingParams(
        max_tokens=n,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),  # OpenAI's default, where SamplingParams' is 0
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        seed=seed,
        stop=tuple(stops),
    )
    return GenerationParams(model, prompt, sampling, stream, bool((options or {}).get("include_usage")), chat)


def parse_completion(
    body, served_model: str, max_model_len: int, max_request_tokens: int, vocab_size: int = 256
) -> GenerationParams:
    return _parse(body, _COMPLETION, served_model, max_model_len, max_request_tokens, vocab_size, chat=False)


def parse_chat(
    body, served_model: str, max_model_len: int, max_request_tokens: int, vocab_size: int = 256
) -> GenerationParams:
    return _parse(body, _CHAT, served_model, max_model_len, max_request_tokens, vocab_size, chat=True)


# --------------------------------------------------------------------------- what the clients read


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def answer(
    params: GenerationParams, rid: str, created: int, text: str, finish_reason: str, n_prompt: int, n_completion: int
) -> dict:
    """The whole answer of a request that did not stream."""
    if params.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        return {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion",
            "created": created,
            "model": params.model,
            "choices": [choice],
            "usage": usage(n_prompt, n_completion),
        }
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return {
        "id": f"cmpl-{rid}",
        "object": "text_completion",
        "created": created,
        "model": params.model,
        "choices": [choice],
        "usage": usage(n_prompt, n_completion),
    }


def chunk(
    params: GenerationParams,
    rid: str,
    created: int,
    text: str | None,
    finish_reason: str | None = None,
    first: bool = False,
) -> dict:
    """One `data:` event of a stream. Chat's first chunk carries the role; `text` None sends no content."""
    if params.chat:
        delta: dict = {"role": "assistant", "content": ""} if first else {}
        if text:
            delta["content"] = text
        body = {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": params.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
    else:
        body = {
            "id": f"cmpl-{rid}",
            "object": "text_completion",
            "created": created,
            "model": params.model,
            "choices": [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}],
        }
    if params.include_usage:
        body["usage"] = None  # OpenAI: null on every chunk but the last, usage-only one
    return body


def usage_chunk(params: GenerationParams, rid: str, created: int, n_prompt: int, n_completion: int) -> dict:
    """The last chunk when stream_options.include_usage is set: no choices, the request's token counts."""
    return {
        "id": f"{'chatcmpl' if params.chat else 'cmpl'}-{rid}",
        "object": "chat.completion.chunk" if params.chat else "text_completion",
        "created": created,
        "model": params.model,
        "choices": [],
        "usage": usage(n_prompt, n_completion),
    }


def now_s() -> int:
    return int(time.time())
