"""The OpenAI routes: `POST /v1/completions` and `POST /v1/chat/completions`, whole or streamed (issue 28).

What a client of vLLM, TGI or llama.cpp's server sends works here unchanged: the `openai` package, LangChain,
`vllm bench serve`. A streamed answer is Server-Sent Events: one `data: {json}` event per piece of text as the
scheduler makes it, the finish reason on the last piece, then `data: [DONE]`, the line that tells a client the
stream ended on purpose rather than by a dropped connection. With `stream_options.include_usage` a chunk with
no choices and the token counts comes just before it.

A client that leaves cancels its request: the stream's generator is closed when Starlette sees the disconnect
(streamed), or a watcher on the connection sees it (not streamed), and the KV blocks go back to the free list
at once. Parameters are checked in openai_protocol.py; auth, request ids and error bodies are the serving
edge's (edge.py), which answers these routes' errors in OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

import ailab.server.headers as hdr
from ailab.server.edge import note, request_id
from ailab.server.limits import read_body
from ailab.generation.request import FinishReason
from ailab.server.async_llm import AsyncLLM
from ailab.server.openai_protocol import (
    GenerationParams,
    answer,
    chunk,
    now_s,
    parse_chat,
    parse_completion,
    usage_chunk,
)
from ailab.server.output_processor import RequestOutput, RequestState
from ailab.server.validation import InvalidRequest, parse_json

router = APIRouter()


class GenerationFailed(RuntimeError):
    """The engine could not finish the request (a failed step): a server error, answered 500."""


def _engine(request: Request) -> AsyncLLM:
    engine = request.app.state.ailab.generation
    if engine is None:
        raise InvalidRequest(404, "this server has no generation model; start it with one (ailab serve --generate 1m)")
    return engine


async def _params(request: Request, engine: AsyncLLM, parse) -> GenerationParams:
    config = request.app.state.ailab.config
    hdr.check_content_type(request)
    body = parse_json(await read_body(request, config.max_body_bytes, config.body_timeout_s))
    return parse(body, engine.name, engine.max_model_len, engine.max_request_tokens, engine.vocab_size)


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await _serve(request, parse_completion)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _serve(request, parse_chat)


async def _serve(request: Request, parse) -> Response:
    engine = _engine(request)
    params = await _params(request, engine, parse)
    note(
        request,
        model=params.model,
        prompt_tokens=len(params.prompt_ids),
        max_tokens=params.sampling_params.max_tokens,
        stream=params.stream,
    )
    state = engine.add_request(params.prompt_ids, params.sampling_params, stream=params.stream)
    rid, created = request_id(request), now_s()
    if params.stream:
        return StreamingResponse(
            _events(request, engine, state, params, rid, created),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    return await _whole(request, engine, state, params, rid, created)


def _sse(payload: dict) -> str:
    """One event. Text stays UTF-8 (not \\u escapes), as vLLM and OpenAI send it: a character may then reach the
    client split across two network reads, which its reader must handle (the SSE exercise checks that)."""
    return f"data: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n"


def _finish_reason(reason: FinishReason) -> str:
    """OpenAI's two: "stop" (a stop string) and "length" (max_tokens). This model has no end-of-text token."""
    return "stop" if reason == FinishReason.STOP else "length"


async def _client_left(request: Request) -> None:
    """Returns when the client closes its connection (the body is read by then: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _whole(
    request: Request,
    engine: AsyncLLM,
    state: RequestState,
    params: GenerationParams,
    rid: str,
    created: int,
) -> Response:
    left = asyncio.ensure_future(_client_left(request))
    got = asyncio.ensure_future(state.outputs.get())
    try:
        await asyncio.wait({left, got}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
    if not got.done():  # the client went away first: stop generating for nobody
        got.cancel()
        engine.abort(state)
        note(request, finish_reason=FinishReason.CANCELLED)
        return Response(status_code=499)  # nobody reads it; the log line says what happened
    out: RequestOutput = got.result()  # one output, at the end, with all of the text
    if out.finish_reason == FinishReason.ERROR:
        raise GenerationFailed(out.error)
    reason = _finish_reason(out.finish_reason)
    note(request, completion_tokens=out.completion_tokens, finish_reason=reason)
    body = answer(params, rid, created, out.text, reason, len(params.prompt_ids), out.completion_tokens)
    return Response(json.dumps(body, ensure_ascii=False).encode(), media_type="application/json")


async def _events(
    request: Request,
    engine: AsyncLLM,
    state: RequestState,
    params: GenerationParams,
    rid: str,
    created: int,
):
    n_completion, finished = 0, False
    try:
        if params.chat:
            yield _sse(chunk(params, rid, created, None, first=True))  # the role comes first, as OpenAI sends it
        while True:
            outs = [await state.outputs.get()]
            while not state.outputs.empty():  # whatever else has come: one chunk for all of it
                outs.append(state.outputs.get_nowait())
            piece, n_completion = "".join(o.text for o in outs), outs[-1].completion_tokens
            end = outs[-1].finish_reason  # only a request's last output has one
            if end == FinishReason.ERROR:
                finished = True
                note(request, finish_reason=FinishReason.ERROR, error=outs[-1].error)
                yield _sse({"error": {"message": outs[-1].error, "type": "server_error", "param": None, "code": 500}})
                return
            if end is None:
                if piece:
                    yield _sse(chunk(params, rid, created, piece))
                continue
            reason = _finish_reason(end)
            finished = True
            note(request, completion_tokens=n_completion, finish_reason=reason)
            yield _sse(chunk(params, rid, created, piece, reason))
            if params.include_usage:
                yield _sse(usage_chunk(params, rid, created, len(params.prompt_ids), n_completion))
            yield "data: [DONE]\n\n"
            return
    finally:
        if not finished:  # the client went away: stop generating and free the blocks
            engine.abort(state)
            note(request, finish_reason=FinishReason.CANCELLED, completion_tokens=n_completion)
