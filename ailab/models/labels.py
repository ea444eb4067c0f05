"""What a text classifier answers for one text: the one result shape of "texts -> labels".

The same shape in process and on the wire: the predictor the server runs returns these, the server's JSON
`outputs` are these, the queue workers store these in Redis, and the tour's `predict_sentiment` prints these.
A plain dict (a TypedDict), so it goes to JSON and back unchanged and every caller reads `r["label"]`.
"""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np


class TextLabel(TypedDict):
    label: str  # the most probable class
    score: float  # that class's probability
    probs: list[float]  # every class's probability, in the classifier's class order
    truncated: bool  # the text had more word pieces than the model takes, and only the first ones were run


def text_labels(probs, classes: Sequence[str], truncated: Sequence[bool] | None = None) -> list[TextLabel]:
    """(N, C) probabilities -> one TextLabel per row. Rounded to 6 decimals: what a client can use, and a JSON
    body that does not carry float noise."""
    p = np.asarray(probs, dtype=np.float64)  # (N, C)
    if p.ndim != 2 or p.shape[1] != len(classes):
        raise ValueError(f"probs must be (texts, {len(classes)} classes); got shape {p.shape}")
    truncated = [False] * len(p) if truncated is None else list(truncated)
    if len(truncated) != len(p):
        raise ValueError(f"{len(truncated)} truncation flags for {len(p)} rows of probabilities")
    out: list[TextLabel] = []
    for row, cut in zip(p, truncated):  # row: (C,)
        k = int(row.argmax())
        out.append(
            {
                "label": classes[k],
                "score": round(float(row[k]), 6),
                "probs": [round(float(x), 6) for x in row],
                "truncated": bool(cut),
            }
        )
    return out


def truncation_flags(tokenizer, enc, texts: Sequence[str], max_length: int) -> list[bool]:
    """Per text, whether `tokenizer(texts, truncation=True, max_length=...)` (its output: `enc`) cut it."""
    if enc.encodings is not None:  # a fast (Rust) tokenizer kept what it cut off
        return [bool(e.overflowing) for e in enc.encodings]
    # A slow (Python) tokenizer does not say: only a row that fills max_length can have been cut.
    full = np.asarray(enc["attention_mask"]).sum(-1) >= max_length  # (B,)
    return [bool(f) and len(tokenizer(t)["input_ids"]) > max_length for f, t in zip(full, texts)]
