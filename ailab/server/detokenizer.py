"""Token ids to text as a stream must send it (vLLM v1's IncrementalDetokenizer, for a byte-level model: a token
is one byte of UTF-8).

A character split across two tokens leaves whole, and bytes that may be the start of a stop string wait until the
next token says whether they are: the client never sees a stop string, not even its first half.
"""

from __future__ import annotations

import codecs


class IncrementalDetokenizer:
    def __init__(self, stops: tuple[bytes, ...] | list[bytes]):
        self.stops = tuple(stops)
        self.out = bytearray()
        self.released = 0  # bytes of `out` handed to the decoder
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, tokens: list[int], finish_reason: str | None = None) -> str:
        """The text that can be sent now; once the request has ended (`finish_reason`), all the rest of it but
        the stop string that ended it."""
        self.out.extend(tokens)
        if finish_reason is None:
            hold = max((k for s in self.stops for k in range(1, len(s) + 1) if self.out.endswith(s[:k])), default=0)
            return self._release(len(self.out) - hold)
        end = len(self.out)
        if finish_reason == "stop":
            end -= next((len(s) for s in self.stops if self.out.endswith(s)), 0)
        return self._release(max(end, self.released)) + self._decoder.decode(b"", final=True)

    def _release(self, upto: int) -> str:
        if upto <= self.released:
            return ""
        piece = bytes(self.out[self.released : upto])
        self.released = upto
        return self._decoder.decode(piece)
