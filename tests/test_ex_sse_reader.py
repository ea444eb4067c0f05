"""The SSE-reader exercise's checks pass right readers and reject plausible wrong ones.

read_events(chunks) -> iterator of (event, data)
| question | what the checks try |
|---|---|
| which input varies each field | the event name (absent, "done", reset after dispatch), data (one line, several, empty, with colons, spaces, CR/LF-like characters), comments, unknown fields, each alone |
| boundaries | every split point of a real /v1/completions stream (OpenAI chunks, the usage chunk, [DONE]); one byte per chunk; a blank line with no data; an unfinished last event; an empty chunk |
| a type the notes never show | line ends CR LF and lone CR across a whole stream, split at every byte (a CR ending a chunk); values holding \\x0b \\x0c \\x1c \\x85 U+2028 U+2029 (str.splitlines() splits on them, SSE does not); UTF-8 characters split across chunks |
| order or ties | the events in order; the event name belongs to its own event only |
| errors: type and message | each failure names the event, the split point and the bytes around it, and what to keep between chunks |
| timing | an event comes out before the next chunk is read, also when its blank line is a lone CR |

Each wrong answer is one class of mistake: splitting each chunk on its own, decoding chunks instead of lines,
"\\n" as the only line end, a CRLF split across chunks read as two line ends, "data: " required with its space,
the value stripped of every space, split at every colon, the last data line kept instead of all, the event name
never reset, events with no data dispatched, the unfinished last event kept, the whole stream read before the
first event, None as the default name, comments taken as fields, lines found with str.splitlines(), a CR at a
chunk's end held until the next chunk, and a CR at a chunk's end forgotten.
"""

import re

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_sse_reader as L

LINE_END = re.compile(rb"\r\n|\r|\n")


def reader(
    chunks,
    *,
    split=LINE_END.split,
    decode=lambda b: b.decode("utf-8", errors="replace"),
    crlf_join=True,
    value_of=lambda v: v[1:] if v.startswith(" ") else v,
    field_split=lambda line: line.partition(":")[::2],
    keep_all_data=True,
    reset_name=True,
    need_data=True,
    flush_at_end=False,
    default="message",
    comments=True,
):
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
    for chunk in chunks:  # each chunk framed on its own: lines cut at a chunk's end are lost
        yield from reader([chunk])


def decodes_chunks(chunks):
    yield from reader([c.decode("utf-8", errors="replace").encode() for c in chunks])


def newline_only(chunks):
    yield from reader(chunks, split=lambda b: b.split(b"\n"))


def crlf_split_in_two(chunks):
    yield from reader(chunks, crlf_join=False)


def needs_the_space(chunks):
    yield from reader(
        chunks, field_split=lambda line: line.split(": ", 1) if ": " in line else (line, ""), value_of=lambda v: v
    )


def strips_the_value(chunks):
    yield from reader(chunks, value_of=str.strip)


def splits_every_colon(chunks):
    yield from reader(chunks, field_split=lambda line: (line.split(":")[0], line.split(":")[1] if ":" in line else ""))


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
    yield from reader(
        chunks,
        comments=False,
        field_split=lambda line: line.partition(":")[::2] if not line.startswith(":") else ("data", line[1:]),
    )


# Issue 30's classes, each a reader that passes when the test data hides it.


def splitlines_reader(chunks):
    """Decodes whole lines, but finds them with str.splitlines(), which also splits on \x0b \x0c \x1c-\x1e \x85
    U+2028 U+2029: text inside a JSON value ends the line."""
    pending, name, data = "", "", []
    dec = __import__("codecs").getincrementaldecoder("utf-8")()
    for chunk in chunks:
        text = pending + dec.decode(chunk).replace("\r\n", "\n")
        lines = text.splitlines(keepends=True)
        pending = lines.pop() if lines and not lines[-1].endswith(("\n", "\r")) else ""
        for line in lines:
            line = line.rstrip("\r\n")
            if not line:
                if data:
                    yield (name or "message", "\n".join(data))
                name, data = "", []
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)


def cr_waits_for_the_next_chunk(chunks):
    """Holds a line that ends in \\r until the next chunk says whether \\n follows: right events, but late."""
    held = b""
    for chunk in chunks:
        held += chunk
        if held.endswith(b"\r"):
            continue
        yield from reader([held])
        held = b""
    yield from reader([held])


def cr_at_chunk_end_ignored(chunks):
    """Treats a chunk's last \\r as the start of \\r\\n and drops it when the next chunk does not start with \\n."""
    carry = False
    fixed = []
    for chunk in chunks:
        if carry and not chunk.startswith(b"\n"):
            chunk = chunk  # the \r that ended the last chunk is forgotten: no line end
        carry = chunk.endswith(b"\r")
        fixed.append(chunk[:-1] if carry else chunk)
    yield from reader(fixed)


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
    "splitlines_reader": (splitlines_reader, "check_fields"),
    "cr_waits_for_the_next_chunk": (cr_waits_for_the_next_chunk, "check_streaming"),
    "cr_at_chunk_end_ignored": (cr_at_chunk_end_ignored, "check_line_ends"),
}
CHECKS = ["check_server_stream", "check_line_ends", "check_fields", "check_streaming"]


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
    """server_stream() stands in for POST /v1/completions in the checks: the same bytes, given the same pieces."""
    import json

    import httpx

    from ailab.generation import Decoder
    from ailab.models import tiny_gpt
    from ailab.server import create_app, start_in_thread
    from ailab.server.async_llm import AsyncLLM

    engine = AsyncLLM(Decoder(tiny_gpt("1m")), num_blocks=16, block_size=16, name="ailab-gpt-1m")
    body = {
        "prompt": "abc",
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with start_in_thread(create_app(generation=engine)) as server:
        raw = httpx.post(
            server.url + "/v1/completions", json=body, timeout=30, headers={"X-Request-Id": "req-1"}
        ).content
    events = [e for e in right([raw])]
    chunks = [json.loads(d) for _, d in events[:-2]]
    assert events[-1] == ("message", "[DONE]") and json.loads(events[-2][1])["usage"]["completion_tokens"] == 12
    created = chunks[0]["created"]
    pieces = [c["choices"][0]["text"] for c in chunks]
    assert raw == L.server_stream(pieces, usage=(3, 12)).replace(b"1790000000", str(created).encode())


# --------------------------------------------------------------------------- the differential check


def case_insensitive_fields(chunks):
    """Parsing: matches field names case-insensitively ('Data:' and 'EVENT:' are other fields in SSE)."""
    yield from reader(chunks, field_split=lambda line: (line.partition(":")[0].lower(), line.partition(":")[2]))


def strips_every_trailing_newline(chunks):
    """Parsing: data.rstrip('\\n') instead of dropping the one newline the last data line added."""
    for name, data in reader(chunks):
        yield (name, (data + "\n").rstrip("\n"))


def stops_at_an_empty_chunk(chunks):
    """Boundaries: reads b'' as the end of the stream (as socket.recv does), dropping what comes after it."""

    def until_empty():
        for chunk in chunks:
            if not chunk:
                return
            yield chunk

    yield from reader(until_empty())


def empty_data_is_no_data(chunks):
    """Boundaries: dispatches only when the joined data is non-empty; a lone 'data:' line (data '') is dropped."""
    for name, data in reader(chunks):
        if data:
            yield (name, data)


_LEFTOVER = [b""]


def keeps_leftover_between_calls(chunks):
    """State: the unfinished line is kept in a module-level buffer, so the next stream starts with the last one's
    leftovers."""

    def with_leftover():
        first = True
        for chunk in chunks:
            if first and _LEFTOVER[0]:
                chunk, first = _LEFTOVER[0] + chunk, False
            first = False
            yield chunk

    raw = []

    def remember(src):
        for c in src:
            raw.append(c)
            yield c

    yield from reader(remember(with_leftover()))
    tail = LINE_END.split(b"".join(raw))[-1]
    _LEFTOVER[0] = tail


NEW_WRONG = {
    "case_insensitive_fields": case_insensitive_fields,
    "strips_every_trailing_newline": strips_every_trailing_newline,
    "stops_at_an_empty_chunk": stops_at_an_empty_chunk,
    "empty_data_is_no_data": empty_data_is_no_data,
    "keeps_leftover_between_calls": keeps_leftover_between_calls,
}


@pytest.mark.parametrize("fn", [right, right_by_characters], ids=["right", "right_by_characters"])
def test_right_answers_agree_with_the_reference(fn):
    L.check_same_as_reference(fn)


@pytest.mark.parametrize("name", list(NEW_WRONG))
def test_new_wrong_answers_pass_the_listed_checks_but_not_the_differential_one(name):
    for check in CHECKS:
        getattr(L, check)(NEW_WRONG[name])
    with pytest.raises(LabCheckFailed, match="on the chunks|keeps something from one call to the next"):
        L.check_same_as_reference(NEW_WRONG[name])


@pytest.mark.parametrize("name", list(WRONG))
def test_the_differential_check_catches_every_old_wrong_answer(name):
    with pytest.raises(LabCheckFailed, match="on the chunks"):
        L.check_same_as_reference(WRONG[name][0])


def test_the_differential_check_names_the_chunks_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(case_insensitive_fields)
    assert "on the chunks [" in str(e.value) and ("should be" in str(e.value) or "yields" in str(e.value))


def test_a_stub_fails_the_differential_check():
    def stub(chunks):
        raise NotImplementedError("read_events() is not implemented yet")

    with pytest.raises(LabCheckFailed, match="not implemented"):
        L.check_same_as_reference(stub)
