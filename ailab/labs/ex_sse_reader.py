"""Exercise checks: reading Server-Sent Events from the raw bytes of a stream (topic S2, streaming).

The learner writes
  read_events(chunks) -> iterator of (event, data)
      `chunks` is an iterable of bytes as they come off the socket, split anywhere. Lines end in "\\n", "\\r\\n" or
      "\\r"; "field: value" or "field:value" (only one leading space is dropped); "event" names the event, each
      "data" line adds its value and a "\\n" to the data; a line that starts with ":" is a comment; other fields
      are ignored. A blank line dispatches: (event name or "message", data without its last "\\n"), unless no
      data line came, and the event name is reset. What is left without a blank line at the end is dropped.
      Each event is yielded as soon as its blank line has arrived.

The checks are derived from what a reader must guarantee, the subset of the WHATWG EventSource rules that
ailab's server uses:
  the events of a real /v1/completions stream (OpenAI's chunks, then "[DONE]"), whatever the chunk boundaries
  (every split point, one byte at a time, a UTF-8 character split across chunks), with "\n", "\r\n" and "\r"
  line ends, every split point again (a "\r" at the end of a chunk: a line end of its own, or the first half of
  "\r\n"?); each field rule on its own (no space after the colon, two spaces, a colon inside the value, several
  data lines, comments, unknown fields, CR and CRLF endings, the event name reset after dispatch, a blank line
  with no data, an unfinished last event, characters that str.splitlines() would split on but SSE does not);
  and the timing: an event comes out before the next chunk is read, also when its blank line is a lone "\r".
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

from ailab.labs.core import check, expect
from ailab.labs.differential import same_as_reference

LAB = "ex_sse_reader"


def server_stream(
    pieces: list[str], finish_reason: str = "length", usage: tuple[int, int] | None = None, line_end: str = "\n"
) -> bytes:
    """The bytes ailab's POST /v1/completions sends for a streamed answer of these text pieces (OpenAI's chunks,
    built by the server's own openai_protocol.chunk), the usage chunk when `usage` (prompt, completion) is given,
    then "[DONE]". `line_end` "\r\n" or "\r" gives the same events as another server may frame them."""
    out = [_json(e) for e in _chunks(pieces, finish_reason, usage)] + ["[DONE]"]
    return "".join(f"data: {d}{line_end}{line_end}" for d in out).encode()


def _chunks(pieces: list[str], finish_reason: str, usage: tuple[int, int] | None) -> list[dict]:
    from ailab.generation.sampling_params import SamplingParams
    from ailab.server.openai_protocol import GenerationParams, chunk, usage_chunk

    params = GenerationParams("ailab-gpt-1m", [1], SamplingParams(), include_usage=usage is not None)
    out = [
        chunk(params, "req-1", 1_790_000_000, p, finish_reason if i == len(pieces) - 1 else None)
        for i, p in enumerate(pieces)
    ]
    return out + ([usage_chunk(params, "req-1", 1_790_000_000, *usage)] if usage else [])


def _expected_server_events(
    pieces: list[str], finish_reason: str = "length", usage: tuple[int, int] | None = None
) -> list[tuple[str, str]]:
    return [("message", _json(e)) for e in _chunks(pieces, finish_reason, usage)] + [("message", "[DONE]")]


def _json(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)  # as the server writes it: UTF-8 text


class Chunks:
    """An iterable of chunks that counts how many were taken (to check when events come out)."""

    def __init__(self, chunks: Iterable[bytes]):
        self.chunks, self.taken = list(chunks), 0

    def __iter__(self):
        for c in self.chunks:
            self.taken += 1
            yield c


def _read(read_events, chunks: list[bytes], what: str) -> list[tuple[str, str]]:
    out = read_events(Chunks(chunks))
    expect(
        out is not None and hasattr(out, "__iter__"),
        f"{what}: read_events() should return (or be) an iterator "
        f"of (event, data) pairs; it returned {type(out).__name__}",
    )
    events = list(out)
    for e in events:
        expect(
            isinstance(e, tuple) and len(e) == 2 and all(isinstance(x, str) for x in e),
            f"{what}: each event should be a pair of strings (event, data); got {e!r}",
        )
    return events


def _same(got, want, what: str) -> None:
    if got == want:
        return
    if len(got) != len(want):
        expect(
            False,
            f"{what}: expected {len(want)} event(s), got {len(got)}: {got[:4]}{'...' if len(got) > 4 else ''}"
            f" (expected {want[:4]}{'...' if len(want) > 4 else ''})",
        )
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    expect(False, f"{what}: event {i} should be {want[i]!r}; got {got[i]!r}")


_PIECES = ["Good film. ", "Très", " bien ", "€", "\u2028\x0c\x85 odd spaces"]  # é and € span bytes
_USAGE = (6, 17)


@check(LAB, "a real stream, split anywhere")
def check_server_stream(read_events):
    raw = server_stream(_PIECES, usage=_USAGE)
    want = _expected_server_events(_PIECES, usage=_USAGE)
    _same(_read(read_events, [raw], "the whole stream in one chunk"), want, "the whole stream in one chunk")
    _same(
        _read(read_events, [raw[i : i + 1] for i in range(len(raw))], "one byte per chunk"),
        want,
        "one byte per chunk: lines and events arrive in pieces; keep what is left of a chunk for the next",
    )
    for cut in range(1, len(raw)):
        got = _read(read_events, [raw[:cut], raw[cut:]], f"two chunks split at byte {cut}")
        _same(got, want, f"two chunks split at byte {cut} ({raw[max(0, cut - 8) : cut]!r} | {raw[cut : cut + 8]!r})")
    text = "data: Très bien €\n\n".encode()
    cut = text.index("è".encode()) + 1  # inside the two bytes of è
    _same(
        _read(read_events, [text[:cut], text[cut:]], "è split across two chunks"),
        [("message", "Très bien €")],
        "a character whose UTF-8 bytes are split across two chunks: decode whole lines, not chunks",
    )


@check(LAB, "the same stream with CR LF and with CR line ends, split anywhere")
def check_line_ends(read_events):
    for name, end in (("CR LF", "\r\n"), ("CR", "\r")):
        raw = server_stream(_PIECES[:3], usage=_USAGE, line_end=end)
        want = _expected_server_events(_PIECES[:3], usage=_USAGE)
        for cut in range(1, len(raw)):
            what = (
                f"{name} line ends, two chunks split at byte {cut} ({raw[max(0, cut - 8) : cut]!r} | "
                f"{raw[cut : cut + 8]!r})"
            )
            hint = (
                ": a chunk that ends in \\r may be followed by \\n (one line end, CR LF) or not (the \\r alone "
                "ended the line); remember which, for the next chunk"
                if raw[cut - 1 : cut] == b"\r"
                else ""
            )
            _same(_read(read_events, [raw[:cut], raw[cut:]], what), want, what + hint)


_FIELD_CASES = [
    ("no space after the colon", [b"data:x\n\n"], [("message", "x")]),
    ("only one leading space is dropped", [b"data:  two\n\n"], [("message", " two")]),
    ("a colon inside the value", [b"data: a: b\n\n"], [("message", "a: b")]),
    ("several data lines are one data, joined by newlines", [b"data: one\ndata: two\n\n"], [("message", "one\ntwo")]),
    ("an empty data line", [b"data\ndata: x\n\n"], [("message", "\nx")]),
    ("a comment line is ignored", [b": keep-alive\ndata: x\n\n"], [("message", "x")]),
    ("an unknown field is ignored", [b"id: 7\nretry: 10\ndata: x\n\n"], [("message", "x")]),
    ("the event field names the event", [b"event: done\ndata: {}\n\n"], [("done", "{}")]),
    (
        "the event name is reset after each event",
        [b"event: done\ndata: a\n\ndata: b\n\n"],
        [("done", "a"), ("message", "b")],
    ),
    (
        "a blank line with no data dispatches nothing (and resets the name)",
        [b"event: ping\n\ndata: x\n\n"],
        [("message", "x")],
    ),
    ("CRLF line endings", [b"data: x\r\n\r\ndata: y\r\n\r\n"], [("message", "x"), ("message", "y")]),
    ("CR line endings", [b"data: x\r\rdata: y\r\r"], [("message", "x"), ("message", "y")]),
    ("a CRLF split across two chunks is one line end", [b"data: a\r", b"\ndata: b\r\n\r\n"], [("message", "a\nb")]),
    ("an event without its blank line at the end is dropped", [b"data: x\n\ndata: unfinished\n"], [("message", "x")]),
    (
        "characters that str.splitlines() splits on are text in SSE (\\x0b \\x0c \\x1c \\x85 U+2028 U+2029)",
        ["data: a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g\n\n".encode()],
        [("message", "a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g")],
    ),
    (
        "a CR that ends a chunk, then a blank line in the next",
        [b"data: a\r", b"\rdata: b\r\r"],
        [("message", "a"), ("message", "b")],
    ),
    ("a CR LF then a lone CR", [b"data: a\r\n\r", b"data: b\n\n"], [("message", "a"), ("message", "b")]),
]


@check(LAB, "the field rules, one at a time")
def check_fields(read_events):
    for what, chunks, want in _FIELD_CASES:
        _same(_read(read_events, chunks, what), want, f"{what} ({b''.join(chunks)!r})")


@check(LAB, "the timing: an event comes out as soon as its blank line arrives")
def check_streaming(read_events):
    chunks = Chunks([b"data: first\n", b"\n", b"data: second\n\n", b"data: third\n\n"])
    events = read_events(chunks)
    expect(
        hasattr(events, "__next__"),
        "read_events() should be a generator (or return an iterator): a client shows "
        "each token as it comes, so events must come out one by one, not as a list "
        "at the end of the stream",
    )
    first = next(events, None)
    expect(first == ("message", "first"), f"the first event should be ('message', 'first'); got {first!r}")
    expect(
        chunks.taken == 2,
        f"the first event was complete after 2 chunks, but read_events() had read {chunks.taken} "
        "before it gave it: a stream of tokens would show nothing until the answer ends",
    )
    rest: Iterator = events
    _same(list(rest), [("message", "second"), ("message", "third")], "the events after the first")
    chunks = Chunks([b"data: first\r", b"\r", b"data: second\r\r"])
    first = next(read_events(chunks), None)
    expect(
        first == ("message", "first") and chunks.taken == 2,
        f"with CR line ends the first event is complete once the second \\r has come (2 chunks), but it came out "
        f"as {first!r} after {chunks.taken} chunk(s): a lone \\r ends its line at once; only a \\n right "
        f"after it belongs to it",
    )


# --------------------------------------------------------------------------- the differential check


def _reference_read_events(chunks):
    """From the contract (the WHATWG rules ailab's server uses): lines end at CR LF, CR or LF, whichever chunk they
    fall in; field names are matched exactly; one leading space of a value is dropped; the data loses one "\\n"."""
    import re

    pending, name, data, after_cr = b"", "", [], False
    for chunk in chunks:
        if not chunk:
            continue
        if after_cr and chunk.startswith(b"\n"):  # the \n of a \r\n whose \r ended the previous chunk
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        lines = re.split(rb"\r\n|\r|\n", pending + chunk)
        pending = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
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


_MAX_EVENTS = 10_000


def _events_and_timing(read_events):
    """An adapter: the events read_events yields from `chunks`, each with how many chunks it had read by then."""

    def run(chunks):
        source = Chunks(chunks)
        out = read_events(source)
        if out is None or not hasattr(out, "__iter__"):
            return f"not an iterator ({type(out).__name__})"
        got = []
        for event in out:
            got.append((event, source.taken))
            if len(got) > _MAX_EVENTS:
                break
        return got

    return run


def _compare_streams(mine, ref) -> str | None:
    if isinstance(mine, str):
        return f"read_events() should return (or be) an iterator of (event, data) pairs; it returned {mine[18:-1]}"
    for event, _ in mine:
        if not (isinstance(event, tuple) and len(event) == 2 and all(isinstance(x, str) for x in event)):
            return f"each event should be a pair of strings (event, data); got {event!r}"
    got, want = [e for e, _ in mine], [e for e, _ in ref]
    if got != want:
        i = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        if i < min(len(got), len(want)):
            return f"event {i} should be {want[i]!r}; yours is {got[i]!r} (the reference yields {want})"
        return f"the reference yields {len(want)} event(s), {want}; yours yields {len(got)}, {got}"
    for i, ((event, taken), (_, ready)) in enumerate(zip(mine, ref)):
        if taken != ready:
            return (
                f"event {i}, {event!r}, was complete after {ready} chunk(s), but yours gave it after reading {taken}: "
                "yield each event as soon as its blank line has arrived"
            )
    return None


def _sse_streams():
    """Hypothesis: the chunks of an SSE stream: field lines (the names as given, in other cases, with spaces), values
    holding colons, spaces, non-ASCII and the characters str.splitlines() splits on, comments, blank lines, each
    line with its own end (LF, CR LF, CR), maybe an unfinished tail; cut anywhere, empty chunks included."""
    from hypothesis import strategies as st

    value = st.text(
        st.sampled_from(
            ["a", "b", " ", ":", "é", "€", "😀", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\t", "\x00", "{", "}", '"']
        ),
        max_size=6,
    )
    name = st.sampled_from(
        ["data"] * 5 + ["event"] * 3 + ["id", "retry", "Data", "DATA", "Event", "EVENT", " data", "data ", "", "x"]
    )
    sep = st.sampled_from([":", ": ", ":  ", ""])
    line = st.one_of(
        st.tuples(name, sep, value).map(lambda t: t[0] + (t[1] + t[2] if t[1] else "")),
        value.map(lambda v: ":" + v),  # a comment
        st.just(""),  # a blank line
        st.just("data"),
        st.just("data:"),
    )
    end = st.sampled_from(["\n", "\r\n", "\r"])

    @st.composite
    def draw(d):
        lines = d(st.lists(st.tuples(line, end), max_size=12))
        tail = d(st.sampled_from(["", "", "data: unfinished", "data", "\r"]))
        raw = ("".join(t + e for t, e in lines) + tail).encode()
        how = d(st.sampled_from(["cuts", "cuts", "whole", "bytes"]))
        if how == "whole":
            return ([raw],)
        if how == "bytes":
            return ([raw[i : i + 1] for i in range(len(raw))],)
        cuts = sorted(d(st.lists(st.integers(0, len(raw)), max_size=6)))  # repeated cuts give empty chunks
        bounds = [0, *cuts, len(raw)]
        return ([raw[a:b] for a, b in zip(bounds, bounds[1:])],)

    return draw()


@check(LAB, "agrees with the WHATWG rules on every stream tried, cut anywhere")
def check_same_as_reference(read_events):
    same_as_reference(
        _events_and_timing(read_events),
        _events_and_timing(_reference_read_events),
        _sse_streams(),
        describe=lambda chunks: f"the chunks {chunks!r}",
        compare=_compare_streams,
        edges=[
            ([b"data: a\r", b"\ndata:\n\n"],),
            ([b"data: x\n", b"", b"\ndata: y\n\n"],),
            ([b"Data: x\nDATA: y\nEVENT: e\ndata: z\n\n"],),
            ([b"data: a\ndata\ndata:\n\n"],),
            ([b"event: e\ndata: a: b\n\ndata: c\n\n"],),
        ],
        arg_names=("chunks",),
        examples=300,
    )
