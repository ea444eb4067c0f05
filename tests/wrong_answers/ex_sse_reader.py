"""Independent wrong answers for ex_sse_reader, written from labs/5_generation/ex_sse_reader.ipynb's contract alone."""

import re


def read_events(chunks):
    pending, name, data, after_cr = b"", "", [], False
    for chunk in chunks:
        if not chunk:
            continue
        if after_cr and chunk.startswith(b"\n"):  # the \n of a \r\n whose \r ended the previous chunk
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        lines = re.split(rb"\r\n|\r|\n", pending + chunk)
        pending = lines.pop()  # after the last line end: not a line yet
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
            if not line:  # a blank line ends the event
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


def _lines(chunks):
    """The right line splitter, shared by the wrong answers that differ only in what they do with a line."""
    pending, after_cr = b"", False
    for chunk in chunks:
        if not chunk:
            continue
        if after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        lines = re.split(rb"\r\n|\r|\n", pending + chunk)
        pending = lines.pop()
        for raw in lines:
            yield raw.decode("utf-8", errors="replace")


def strips_value(chunks):
    """Strips the whitespace around a value."""
    # differs on [b"data:  two spaces \n\n"]: ("message", "two spaces") instead of ("message", " two spaces ")
    name, data = "", []
    for line in _lines(chunks):
        if not line:
            if data:
                yield (name or "message", "\n".join(data))
            name, data = "", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.strip()
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def splits_on_colon_space(chunks):
    """Splits each line at ': ', the separator the server writes."""
    # differs on [b"data:x\n\n"]: nothing yielded (field "data:x", ignored) instead of ("message", "x")
    name, data = "", []
    for line in _lines(chunks):
        if not line:
            if data:
                yield (name or "message", "\n".join(data))
            name, data = "", []
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def skips_lines_without_colon(chunks):
    """Skips a line that has no colon: it is not a field."""
    # differs on [b"data\ndata: x\n\n"]: ("message", "x") instead of ("message", "\nx")
    name, data = "", []
    for line in _lines(chunks):
        if not line:
            if data:
                yield (name or "message", "\n".join(data))
            name, data = "", []
        elif not line.startswith(":") and ":" in line:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def name_outlives_event(chunks):
    """Clears the data at a blank line, but keeps the event name."""
    # differs on [b"event: a\ndata: 1\n\ndata: 2\n\n"]: [("a", "1"), ("a", "2")] instead of [("a", "1"), ("message", "2")]
    name, data = "", []
    for line in _lines(chunks):
        if not line:
            if data:
                yield (name or "message", "\n".join(data))
            data = []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def yields_without_data(chunks):
    """Yields at every blank line, whatever came before it."""
    # differs on [b"event: ping\n\n"]: [("ping", "")] instead of []
    name, data = "", []
    for line in _lines(chunks):
        if not line:
            yield (name or "message", "\n".join(data))
            name, data = "", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


def flushes_at_end(chunks):
    """Yields the last event at the end of the stream even without its blank line."""
    # differs on [b"data: 1\n\ndata: 2\n"]: [("message", "1"), ("message", "2")] instead of [("message", "1")]
    name, data = "", []
    for line in _lines(chunks):
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
    if data:
        yield (name or "message", "\n".join(data))


def reads_whole_body(chunks):
    """Joins every chunk first, so no line is ever cut, then parses the body."""
    # differs on a generator of chunks [b"data: 1\n\n", b"data: 2\n\n"]: the first event comes out only after the
    # second chunk (the whole stream) has been read, instead of after the first
    body = b"".join(chunks)
    name, data = "", []
    for line in _lines([body]):
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


def newline_only_line_ends(chunks):
    """Splits lines at \\n and drops a trailing \\r, which covers \\n and \\r\\n."""
    # differs on [b"data: 1\r\r"]: [] instead of [("message", "1")] (a lone \r is not a line end here)
    pending, name, data = b"", "", []
    for chunk in chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").removesuffix("\r")
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


RIGHT = {"read_events": read_events}
WRONG = [
    ("read_events", strips_value, "parsing"),
    ("read_events", splits_on_colon_space, "parsing"),
    ("read_events", skips_lines_without_colon, "boundaries"),
    ("read_events", name_outlives_event, "state"),
    ("read_events", yields_without_data, "boundaries: empty input"),
    ("read_events", flushes_at_end, "misread prose"),
    ("read_events", reads_whole_body, "resources: streaming"),
    ("read_events", newline_only_line_ends, "order/parsing: line ends"),
]
