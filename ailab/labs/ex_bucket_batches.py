"""Exercise checks: length bucketing - which requests batch together, and how much padding it saves (topic S2).

The learner writes two functions:
  bucket_batches(lengths, width, max_batch) -> list[list[int]]
      request i (arrival order) has length lengths[i] and bucket ceil(lengths[i] / width). All requests are
      queued at once; the oldest waiting request leads the next batch, which takes, in arrival order, up to
      max_batch waiting requests of the leader's bucket. Every index appears exactly once.
  padding_waste(batches, lengths) -> float
      every batch is padded to its longest member: (padded slots - real tokens) / padded slots over all
      batches together; no batches -> 0.0.

The checks are derived from what each function must guarantee:
  bucket_batches: every index exactly once, as ints; one bucket per batch, with the bucket boundary both ways
      (length == width shares a bucket with 1, width + 1 does not); arrival order inside a batch and the
      leader's bucket first; at most max_batch per batch and only as few batches as needed (1, 2, more than
      queued); width is used (1, 5, one wider than every length); empty input, a single request, a tuple and
      a numpy array of lengths; the lengths are left as they were; random workloads against a reference.
  padding_waste: the value on a small hand example (each batch padded to its own longest, pooled over all
      batches, not a mean of ratios, not relative to real tokens); equal lengths give exactly 0; indices in no
      batch are not counted; a single batch; no batches gives 0.0; a share in [0, 1), not a percentage.
  Together: on alternating short and long texts, buckets cut the padding share to under half.
  Against the reference (reference_batches and _waste), over Hypothesis-drawn inputs: lengths on a bucket's edges,
      0 tokens, past 64; width 1 and wider than all; max_batch 1 to beyond 2**31; list, tuple, numpy array; batches
      in any order leaving requests out, no batches; the inputs left as they were, nothing kept between calls.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ailab.labs.core import LabCheckFailed, check, expect
from ailab.labs.differential import exactly, same_as_reference, short

LAB = "ex_bucket_batches"


def reference_batches(lengths, width, max_batch):
    """What the batcher does when every request is queued at once (the checks' oracle)."""
    waiting = list(range(len(lengths)))
    out = []
    while waiting:
        bucket = math.ceil(lengths[waiting[0]] / width)
        batch = [i for i in waiting if math.ceil(lengths[i] / width) == bucket][:max_batch]
        out.append(batch)
        taken = set(batch)
        waiting = [i for i in waiting if i not in taken]
    return out


def _waste(batches, lengths):
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) / slots if slots else 0.0


def _batches(bucket_batches, lengths, width, max_batch, what):
    given = list(lengths)
    out = _call(bucket_batches, (lengths, width, max_batch), what)
    expect(list(lengths) == given, f"{what}: bucket_batches changed the lengths it was given; leave them as they are")
    expect(
        isinstance(out, list) and all(isinstance(b, list) for b in out),
        f"{what}: bucket_batches should return a list of lists of indices; got {out!r}",
    )
    expect(
        all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for b in out for i in b),
        f"{what}: each batch should hold request indices (ints); got {out!r}",
    )
    expect(all(b for b in out), f"{what}: an empty batch is not a batch; got {out!r}")
    out = [[int(i) for i in b] for b in out]
    flat = sorted(i for b in out for i in b)
    expect(
        flat == list(range(len(given))),
        f"{what}: every request index 0..{len(given) - 1} must appear exactly once; the batches hold {flat}",
    )
    return out


def _call(fn, args, what):
    """Run the learner's function; an error names the input that caused it."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may raise anything
        raise LabCheckFailed(f"{what}: your code raised {type(e).__name__}: {e}") from e


def _show(lengths):
    return list(int(x) for x in lengths)


@check(LAB, "bucket_batches: one bucket per batch, every request once")
def check_buckets(bucket_batches):
    lengths = [16, 17, 1, 30, 32, 33, 8]
    out = _batches(bucket_batches, lengths, 16, 8, f"lengths={lengths}, width=16, max_batch=8")
    buckets = [sorted({math.ceil(lengths[i] / 16) for i in b}) for b in out]
    expect(
        all(len(b) == 1 for b in buckets),
        f"lengths={lengths}, width=16: a batch mixes buckets; got {out} (the lengths "
        f"{[[lengths[i] for i in b] for b in out]}); a batch takes only requests of its leader's bucket, and the "
        "bucket is ceil(length / width): with width 16, lengths 1..16 share one, 17..32 the next",
    )
    expect(
        sorted(map(sorted, out)) == [[0, 2, 6], [1, 3, 4], [5]],
        f"lengths={lengths}, width=16: lengths 1..16 share a bucket, 17..32 the next and 33 the one after "
        f"(the bucket is ceil(length / width), so 16 goes with 1 and 17 does not); got {out}",
    )
    lengths = [3, 3, 3, 3]
    out = _batches(bucket_batches, lengths, 16, 8, "four equal lengths, max_batch=8")
    expect(
        out == [[0, 1, 2, 3]],
        f"lengths={lengths}, width=16, max_batch=8: one bucket and room for all: one batch [[0, 1, 2, 3]]; got {out}",
    )


@check(LAB, "bucket_batches: arrival order, leader first, at most max_batch")
def check_order_and_size(bucket_batches):
    lengths = [40, 5, 45, 6, 7, 44, 8, 41, 9]
    out = _batches(bucket_batches, lengths, 16, 3, f"lengths={lengths}, width=16, max_batch=3")
    expect(all(len(b) <= 3 for b in out), f"max_batch=3 but a batch holds more: {out}")
    expect(all(b == sorted(b) for b in out), f"inside a batch requests keep their arrival order (FIFO); got {out}")
    expected = [[0, 2, 5], [1, 3, 4], [6, 8], [7]]
    expect(
        out == expected,
        f"lengths={lengths}, width=16, max_batch=3: the oldest waiting request leads each batch and its bucket "
        f"fills up to max_batch in arrival order, so the batches are {expected}; got {out}",
    )
    lengths = [5, 40, 6, 41, 7]
    for max_batch, expected in [(1, [[0], [1], [2], [3], [4]]), (2, [[0, 2], [1, 3], [4]]), (10, [[0, 2, 4], [1, 3]])]:
        out = _batches(bucket_batches, lengths, 16, max_batch, f"lengths={lengths}, max_batch={max_batch}")
        expect(
            out == expected,
            f"lengths={lengths}, width=16, max_batch={max_batch}: the batches should be "
            f"{expected}; got {out} - use the max_batch you are given",
        )


@check(LAB, "bucket_batches: uses width, and takes any sequence of lengths")
def check_arguments_and_edges(bucket_batches):
    lengths = [4, 5, 6, 10, 11, 1]
    for width, expected in [
        (5, [[0, 1, 5], [2, 3], [4]]),
        (1, [[0], [1], [2], [3], [4], [5]]),
        (1000, [[0, 1, 2, 3, 4, 5]]),
    ]:
        out = _batches(bucket_batches, lengths, width, 8, f"lengths={lengths}, width={width}")
        expect(
            out == expected,
            f"lengths={lengths}, width={width}, max_batch=8: the batches should be {expected}; "
            f"got {out} - the bucket is ceil(length / width) with the width you are given",
        )
    expect(_batches(bucket_batches, [], 16, 4, "no requests") == [], "no requests give no batches: []")
    expect(_batches(bucket_batches, [37], 16, 4, "one request") == [[0]], "a single request is one batch: [[0]]")
    for kind, lengths in [("a tuple", (20, 3, 21, 4)), ("a numpy int64 array", np.array([20, 3, 21, 4]))]:
        out = _batches(bucket_batches, lengths, 16, 8, f"lengths as {kind}")
        expect(
            out == [[0, 2], [1, 3]],
            f"lengths as {kind} {_show(lengths)}: the batches should be [[0, 2], [1, 3]]; got {out}",
        )
    rng = np.random.default_rng(9)
    for trial in range(40):
        lengths = [int(x) for x in rng.integers(1, 65, size=int(rng.integers(1, 40)))]
        width, max_batch = int(rng.integers(1, 24)), int(rng.integers(1, 9))
        out = _batches(bucket_batches, lengths, width, max_batch, f"random lengths={lengths}")
        expected = reference_batches(lengths, width, max_batch)
        expect(
            out == expected,
            f"lengths={lengths}, width={width}, max_batch={max_batch}: the batches should be {expected}; got {out}",
        )


def _value(padding_waste, batches, lengths, what):
    out = _call(padding_waste, (batches, lengths), what)
    expect(
        isinstance(out, numbers.Real) and not isinstance(out, bool),
        f"{what}: padding_waste should return a number (the padding share); got {out!r}",
    )
    return float(out)


@check(LAB, "padding_waste: padded slots that hold no token, over all batches")
def check_waste(padding_waste):
    lengths, batches = [2, 4, 3], [[0, 1], [2]]
    got = _value(padding_waste, batches, lengths, f"batches={batches}, lengths={lengths}")
    expect(
        0.0 <= got < 1.0,
        f"batches={batches}, lengths={lengths}: the padding share is between 0 and 1 (not a percentage); got {got!r}",
    )
    expect(
        got == _waste(batches, lengths) or math.isclose(got, _waste(batches, lengths), rel_tol=1e-9),
        f"batches={batches}, lengths={lengths}: the first batch pads to 4 (8 slots), the second to 3 (3 slots): "
        f"2 of 11 slots are padding, {2 / 11:.4f}; got {got:.4f} (pad each batch to its own longest; pool the "
        "slots of all batches, don't average per-batch shares; divide by padded slots, not real tokens)",
    )
    lengths, batches = [5, 1, 1, 1, 9, 9], [[0, 1, 2, 3], [4, 5]]
    got = _value(padding_waste, batches, lengths, f"batches={batches}, lengths={lengths}")
    expect(
        math.isclose(got, 12 / 38, rel_tol=1e-9),
        f"batches={batches}, lengths={lengths}: 20 + 18 = 38 padded slots hold 26 tokens, so 12/38 = "
        f"{12 / 38:.4f} is padding; got {got:.4f}",
    )
    got = _value(padding_waste, [[0, 1, 2]], [7, 7, 7], "one batch of equal lengths")
    expect(got == 0.0, f"one batch of three texts of 7 tokens needs no padding: 0.0; got {got!r}")
    got = _value(padding_waste, [[0, 2]], [3, 50, 6], "a batch that leaves out request 1")
    expect(
        math.isclose(got, 3 / 12, rel_tol=1e-9),
        f"batches=[[0, 2]], lengths=[3, 50, 6]: only the batched requests count (12 slots, 9 tokens, 0.25); got "
        f"{got:.4f} - request 1 is in no batch",
    )
    got = _value(padding_waste, [[0]], [12], "a single request")
    expect(got == 0.0, f"a single request in a batch of its own has no padding: 0.0; got {got!r}")
    got = _value(padding_waste, [], [], "no batches")
    expect(got == 0.0, f"no batches compute no slots: the padding share is 0.0; got {got!r}")


@check(LAB, "buckets cut the padding on mixed lengths")
def check_bucketing_pays(bucket_batches, padding_waste):
    rng = np.random.default_rng(3)
    short, long_ = rng.integers(4, 12, size=48), rng.integers(40, 64, size=48)
    lengths = [int(x) for pair in zip(short, long_) for x in pair]  # alternating: the worst case
    one_bucket = _batches(bucket_batches, lengths, 10_000, 16, "alternating lengths, one bucket")
    bucketed = _batches(bucket_batches, lengths, 16, 16, "alternating lengths, width=16")
    plain = _value(padding_waste, one_bucket, lengths, "alternating lengths, one bucket")
    cut = _value(padding_waste, bucketed, lengths, "alternating lengths, width=16")
    expect(
        math.isclose(plain, _waste(one_bucket, lengths), rel_tol=1e-9),
        f"without buckets the padding share should be {_waste(one_bucket, lengths):.3f}; got {plain:.3f}",
    )
    expect(
        cut < 0.5 * plain,
        f"with buckets of 16 tokens the padding share is {cut:.3f}, without {plain:.3f}: buckets "
        "should cut it to under half",
    )
    return {"no buckets": plain, "buckets of 16": cut}


# --------------------------------------------------------------------------- against the reference, over drawn inputs


def _bucket_inputs():
    """Hypothesis: (lengths, width, max_batch) - lengths as a list, a tuple or a numpy int64 array; lengths on a
    bucket's edges (k * width and k * width + 1), 0 tokens, lengths past the model's 64; width 1, one that divides
    the lengths, one wider than all; max_batch 1, small, and more than are queued."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        width = d(st.one_of(st.sampled_from([16, 1, 5]), st.integers(1, 40), st.just(10_000)))
        one = st.one_of(
            st.integers(1, 64),
            st.integers(0, 6).map(lambda k: k * width),  # a bucket's last length (0 tokens when k = 0)
            st.integers(0, 6).map(lambda k: k * width + 1),  # the next bucket's first
            st.integers(65, 600),  # past the 64 tokens the chapter's model keeps: the contract does not truncate
        )
        n = d(st.integers(0, 30))
        lengths = d(st.lists(one, min_size=n, max_size=n))
        max_batch = d(st.one_of(st.integers(1, 4), st.integers(1, max(n, 1)), st.just(n + 1), st.just(2**31 + 1)))
        container = d(st.sampled_from(["list", "tuple", "numpy"]))
        if container == "tuple":
            lengths = tuple(lengths)
        elif container == "numpy":
            lengths = np.array(lengths, dtype=np.int64)
        return lengths, width, max_batch

    return draw()


def _kind(lengths):
    return {list: "", tuple: " (a tuple)", np.ndarray: " (a numpy int64 array)"}.get(type(lengths), "")


def _compare_batches(mine, ref):
    if exactly(mine, ref) is not None:
        return f"the batches should be {short(ref)}; yours are {short(mine)}"
    if not (isinstance(mine, list) and all(isinstance(b, list) for b in mine)):
        return f"the batches should be a list of lists, {short(ref)}; yours are {short(mine)}"
    return None


@check(LAB, "bucket_batches: the same batches as the reference on every queue tried")
def check_batches_same_as_reference(bucket_batches):
    same_as_reference(
        bucket_batches,
        reference_batches,
        _bucket_inputs(),
        describe=lambda lengths, width, max_batch: (
            f"lengths={_show(lengths)}" + _kind(lengths) + f", width={width}, max_batch={max_batch}"
        ),
        compare=_compare_batches,
        edges=[
            ([0, 1, 16, 17, 0], 16, 8),  # 0 tokens is bucket 0, not bucket 1
            ([70, 100, 65, 5], 16, 8),  # lengths past 64 keep their own buckets
        ],
        arg_names=("lengths", "width", "max_batch"),
        examples=250,
    )


def _waste_inputs():
    """Hypothesis: (batches, lengths) - some requests in no batch, batches in any order and of any size, members in
    any order; lengths 1 and up, equal lengths, as a list, a tuple or a numpy int64 array; no batches at all."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        lengths = d(st.lists(st.one_of(st.integers(1, 64), st.sampled_from([1, 16, 17, 500])), max_size=25))
        chosen = d(st.lists(st.sampled_from(range(len(lengths))), unique=True)) if lengths else []
        chosen = d(st.permutations(chosen))
        cuts = sorted(d(st.sets(st.integers(1, max(len(chosen) - 1, 1)), max_size=6))) if len(chosen) > 1 else []
        bounds = [0, *[c for c in cuts if c < len(chosen)], len(chosen)]
        batches = [list(chosen[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]
        container = d(st.sampled_from(["list", "tuple", "numpy"]))
        if container == "tuple":
            lengths = tuple(lengths)
        elif container == "numpy":
            lengths = np.array(lengths, dtype=np.int64)
        return batches, lengths

    return draw()


@check(LAB, "padding_waste: the same share as the reference on every set of batches tried")
def check_waste_same_as_reference(padding_waste):
    same_as_reference(
        padding_waste,
        _waste,
        _waste_inputs(),
        describe=lambda batches, lengths: f"batches={batches}, lengths={_show(lengths)}{_kind(lengths)}",
        edges=[([[0, 1], [2]], [2, 4, 3]), ([[2, 0]], [3, 50, 6]), ([], [])],
        arg_names=("batches", "lengths"),
        examples=250,
    )
