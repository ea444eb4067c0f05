"""The SSE-reader exercise's checks pass right readers and reject plausible wrong ones.

Each wrong answer is one class of mistake: splitting each chunk on its own, decoding chunks instead of lines,
"\\n" as the only line end, a CRLF split across chunks read as two line ends, "data: " required with its space,
the value stripped of every space, split at every colon, the last data line kept instead of all, the event name
never reset, events with no data dispatched, the unfinished last event kept, the whole stream read before the
first event, None as the default name, comments taken as fields.
"""
import re

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_sse_reader as L

LINE_END = re.compile(rb"\r\n|\r|\n")


def reader(chunks, *, split=LINE_END.split, decode=lambda b: b.decode("utf-8", errors="replace"), crlf_join=True,
           value_of=lambda v: v[1:] if v.startswith(" ") else v, field_split=lambda l: l.partition(":")[::2],
           keep_all_data=True, reset_name=True, need_data=True, flush_at_end=False, default="message",
           comments=True):
    """The right reader with each rule a parameter, so a wrong answer changes exactly one of them."""
    pending, name, data, after_cr = b"", "", [], False
    for chunk in chunks:
        if not chunk:
            continue
        if crlf_join and after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        lines = split(pending + chunk)
        pending = lines.pop()
        for raw in lines:
            line = decode(raw)
            if not line:
                if data or not need_data:
                    yield (name or default, "\n".join(data))
                data = []
                if reset_name:
                    name = ""
            elif not (comments and line.startswith(":")):
                field, value = field_split(line)
                value = value_of(value)
                if field == "event":
                    name = value
                elif field == "data":
                    data = data + [value] if keep_all_data else [value]
    if flush_at_end and data:
        yield (name or default, "\n".join(data))


def right(chunks):
    yield from reader(chunks)


def right_by_characters(chunks):
    """Also right: an incremental UTF-8 decoder on the chunks, then the lines split as text."""
    import codecs

    dec, text, name, data, after_cr = codecs.getincrementaldecoder("utf-8")(), "", "", [], False
    for chunk in chunks:
        piece = dec.decode(chunk)
        if not piece:
            continue
        if after_cr and piece.startswith("\n"):
            piece = piece[1:]
        after_cr = piece.endswith("\r")
        parts = re.split(r"\r\n|\r|\n", text + piece)
        text = parts.pop()
        for line in parts:
            if line == "":
                if data:
                    yield (name or "message", "\n".join(data))
                name, data = "", []
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)


def per_chunk(chunks):
    for chunk in chunks:                 # each chunk framed on its own: lines cut at a chunk's end are lost
        yield from reader([chunk])


def decodes_chunks(chunks):
    yield from reader([c.decode("utf-8", errors="replace").encode() for c in chunks])


def newline_only(chunks):
    yield from reader(chunks, split=lambda b: b.split(b"\n"))


def crlf_split_in_two(chunks):
    yield from reader(chunks, crlf_join=False)


def needs_the_space(chunks):
    yield from reader(chunks, field_split=lambda l: l.split(": ", 1) if ": " in l else (l, ""), value_of=lambda v: v)


def strips_the_value(chunks):
    yield from reader(chunks, value_of=str.strip)


def splits_every_colon(chunks):
    yield from reader(chunks, field_split=lambda l: (l.split(":")[0], l.split(":")[1] if ":" in l else ""))


def last_data_line_only(chunks):
    yield from reader(chunks, keep_all_data=False)


def name_never_reset(chunks):
    yield from reader(chunks, reset_name=False)


def dispatches_empty_events(chunks):
    yield from reader(chunks, need_data=False)


def keeps_the_unfinished_event(chunks):
    yield from reader(chunks, flush_at_end=True)


def reads_everything_first(chunks):
    return iter(list(reader(list(chunks))))


def returns_a_list(chunks):
    return list(reader(chunks))


def none_as_default_name(chunks):
    for name, data in reader(chunks, default=""):
        yield (name or None, data)


def comments_are_fields(chunks):
    yield from reader(chunks, comments=False, field_split=lambda l: l.partition(":")[::2] if not l.startswith(":")
                      else ("data", l[1:]))


WRONG = {
    "per_chunk": (per_chunk, "check_server_stream"),
    "decodes_chunks": (decodes_chunks, "check_server_stream"),
    "newline_only": (newline_only, "check_fields"),
    "crlf_split_in_two": (crlf_split_in_two, "check_fields"),
    "needs_the_space": (needs_the_space, "check_fields"),
    "strips_the_value": (strips_the_value, "check_fields"),
    "splits_every_colon": (splits_every_colon, "check_fields"),
    "last_data_line_only": (last_data_line_only, "check_fields"),
    "name_never_reset": (name_never_reset, "check_fields"),
    "dispatches_empty_events": (dispatches_empty_events, "check_fields"),
    "keeps_the_unfinished_event": (keeps_the_unfinished_event, "check_fields"),
    "reads_everything_first": (reads_everything_first, "check_streaming"),
    "returns_a_list": (returns_a_list, "check_streaming"),
    "none_as_default_name": (none_as_default_name, "check_server_stream"),
    "comments_are_fields": (comments_are_fields, "check_fields"),
}
CHECKS = ["check_server_stream", "check_fields", "check_streaming"]


@pytest.mark.parametrize("fn", [right, right_by_characters], ids=["right", "right_by_characters"])
@pytest.mark.parametrize("check", CHECKS)
def test_right_answers_pass(fn, check):
    getattr(L, check)(fn)


@pytest.mark.parametrize("name", list(WRONG))
def test_each_wrong_answer_fails_the_check_meant_for_it(name):
    fn, meant = WRONG[name]
    with pytest.raises(LabCheckFailed):
        getattr(L, meant)(fn)


def test_every_wrong_answer_fails_some_check():
    for name, (fn, _) in WRONG.items():
        failed = []
        for check in CHECKS:
            try:
                getattr(L, check)(fn)
            except LabCheckFailed:
                failed.append(check)
        assert failed, f"{name} passed every check"


def test_a_stub_fails_with_its_hint():
    def stub(chunks):
        raise NotImplementedError("read_events() is not implemented yet")

    for check in CHECKS:
        with pytest.raises(LabCheckFailed, match="not implemented"):
            getattr(L, check)(stub)


def test_the_server_stream_helper_writes_what_the_route_sends():
    """server_stream() stands in for /v1/generate in the checks: its token events are the route's, byte for byte."""
    import httpx

    from ailab.generation import Decoder
    from ailab.models import tiny_gpt
    from ailab.server import create_app, start_in_thread
    from ailab.server.generate import GenerationEngine
    from ailab.server.predictors import tiny_predictor

    engine = GenerationEngine(Decoder(tiny_gpt("1m")), num_blocks=16, block_size=16)
    with start_in_thread(create_app({"tiny": tiny_predictor}, "tiny", generation=engine)) as server:
        raw = httpx.post(server.url + "/v1/generate", json={"prompt": "abc", "max_new_tokens": 12, "stream": True},
                         timeout=30).content
    tokens = [int(t) for t in re.findall(rb'"token": (\d+)', raw)]
    head = raw.partition(b"event: done\n")[0]
    assert len(tokens) == 12 and head == L.server_stream(tokens, {}).partition(b"event: done\n")[0]
    assert [e for e, _ in right([raw])] == ["message"] * 12 + ["done"]
