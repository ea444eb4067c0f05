"""Exercise checks: plan the memory of a hot swap - what to evict so old + new fit side by side (topic S7).

The learner writes
  swap_plan(loaded, swapping, new_bytes, budget) -> list[str]
      loaded: [(name, bytes), ...], least recently used first. During a swap the old version of `swapping`
      and its new version (new_bytes) are both in memory. Evict other models, least recently used first and
      only as many as needed, until everything still loaded plus the new version fits in `budget` (total ==
      budget fits). Never evict `swapping`. If old + new exceed the budget alone, raise SwapRefusedError
      (ailab.server.registry; the server answers 409 and the old version keeps serving). A `swapping` that
      is not loaded yet is a first load: only its new version needs room.

The checks are derived from what the function must guarantee:
  nothing evicted when it fits, with the boundary both ways (== budget fits, one byte more does not); both
  versions counted (old and new, a new version bigger or smaller than the old); least recently used first,
  skipping `swapping` wherever it sits, stopping as soon as it fits (not the biggest first, not everything);
  budget and new_bytes are used; a refusal is a SwapRefusedError (not another type, not a return value),
  also when the other models alone would fit and for a first load larger than the whole budget, and its
  message gives the sizes (old, new, budget); old + new == budget is accepted after evicting everything
  else; a first load; the list it was given is left as it was; returns the names, in eviction order.
  Against a reference (_reference_swap_plan, the contract written out), over Hypothesis-drawn swaps: sizes in bytes,
      MiB and GiB (past 2**31), names differing only in case, the swapped model anywhere or not loaded, new_bytes 0,
      budgets on every boundary and one byte either side; nothing kept between calls. (The refusal's words are
      check_refuses's: the reference comparison looks at its type only.)
"""

from __future__ import annotations

import copy

from ailab.labs.core import LabCheckFailed, check, expect, refused
from ailab.labs.differential import exactly, same_as_reference, same_value, short

LAB = "ex_swap_plan"
MB = 2**20


def _refused_error():
    from ailab.server.registry import SwapRefusedError

    return SwapRefusedError


def _plan(swap_plan, loaded, swapping, new_bytes, budget, what):
    given = copy.deepcopy(loaded)
    try:
        out = swap_plan(loaded, swapping, new_bytes, budget)
    except NotImplementedError:
        raise
    except _refused_error() as e:
        raise LabCheckFailed(
            f"{what}: swap_plan refused ({e}), but the swap fits once the right models are "
            "evicted: refuse only when the old and new versions together exceed the budget"
        ) from e
    except Exception as e:  # the learner's code may raise anything
        raise LabCheckFailed(f"{what}: your code raised {type(e).__name__}: {e}") from e
    expect(
        same_value(loaded, given),
        f"{what}: swap_plan changed the `loaded` list it was given (now {loaded}); plan, don't evict",
    )
    expect(
        isinstance(out, list) and all(isinstance(n, str) for n in out),
        f"{what}: swap_plan should return a list of model names; got {out!r}",
    )
    return out


def _case(loaded, swapping, new_bytes, budget):
    return (
        f"loaded={[(n, b // MB) for n, b in loaded]} MiB, swapping {swapping!r} to a {new_bytes // MB} MiB "
        f"version, budget {budget // MB} MiB"
    )


@check(LAB, "evicts nothing when old + new already fit")
def check_fits(swap_plan):
    loaded = [("a", 100 * MB), ("b", 200 * MB), ("c", 300 * MB)]
    for budget in (2000 * MB, 800 * MB):
        what = _case(loaded, "b", 200 * MB, budget)
        out = _plan(swap_plan, loaded, "b", 200 * MB, budget, what)
        expect(
            out == [], f"{what}: 600 MiB loaded + 200 MiB for the new version = 800 MiB fits; evict nothing, got {out}"
        )
    what = _case(loaded, "b", 200 * MB, 800 * MB)
    out = _plan(swap_plan, loaded, "b", 200 * MB, 800 * MB - 1, what + " minus 1 byte")
    expect(
        out == ["a"],
        f"{what} minus 1 byte: 800 MiB does not fit one byte under 800 MiB; evict the least recently "
        f"used other model, ['a']; got {out}",
    )
    loaded = [("a", 100 * MB), ("b", 200 * MB)]
    what = _case(loaded, "b", 200 * MB, 400 * MB)
    out = _plan(swap_plan, loaded, "b", 200 * MB, 400 * MB, what)
    expect(
        out == ["a"],
        f"{what}: 300 MiB loaded + 200 MiB for the new version = 500 MiB is over the budget; evict "
        f"['a'] (both versions of 'b' stay in memory during the swap); got {out}",
    )


@check(LAB, "least recently used first, never the model being swapped, only as many as needed")
def check_lru(swap_plan):
    loaded = [("old", 50 * MB), ("big", 400 * MB), ("mid", 100 * MB), ("x", 300 * MB), ("new", 50 * MB)]
    what = _case(loaded, "x", 300 * MB, 1000 * MB)
    out = _plan(swap_plan, loaded, "x", 300 * MB, 1000 * MB, what)
    expect(
        "x" not in out,
        f"{what}: the plan evicts 'x', the model being swapped: its old version keeps serving "
        f"until the switch; got {out}",
    )
    expect(
        out == ["old", "big"],
        f"{what}: 900 + 300 = 1200 MiB; evicting least recently used first, 'old' (50) is not enough and 'big' "
        f"(400) is, so the plan is ['old', 'big']; got {out} - the list is least recently used first; evict in "
        "that order and stop as soon as it fits",
    )
    loaded = [("x", 300 * MB), ("a", 100 * MB), ("b", 100 * MB), ("c", 100 * MB)]
    what = _case(loaded, "x", 300 * MB, 800 * MB)
    out = _plan(swap_plan, loaded, "x", 300 * MB, 800 * MB, what)
    expect(
        "x" not in out,
        f"{what}: the plan evicts 'x', the model being swapped (least recently used or not): its "
        f"old version keeps serving until the switch; got {out}",
    )
    expect(
        out == ["a"],
        f"{what}: 'x' is the least recently used but is being swapped, so skip it: 600 + 300 = "
        f"900 MiB, evict ['a'] to reach 800; got {out}",
    )
    loaded = [("a", 100 * MB), ("b", 100 * MB), ("x", 300 * MB), ("c", 100 * MB)]
    for new_bytes, budget, want in [
        (500 * MB, 950 * MB, ["a", "b"]),
        (100 * MB, 700 * MB, []),
        (100 * MB, 600 * MB, ["a"]),
        (300 * MB, 850 * MB, ["a"]),
    ]:
        what = _case(loaded, "x", new_bytes, budget)
        out = _plan(swap_plan, loaded, "x", new_bytes, budget, what)
        expect(
            out == want,
            f"{what}: the plan should be {want}; got {out} - count every model still loaded, the old "
            "version of the swapped one included, plus the new version, against the budget you are "
            "given",
        )


def _names(message: str, n_bytes: int) -> bool:
    """Whether `message` gives a size of n_bytes: in bytes, or in MiB or GiB (whole or to one decimal)."""
    spellings = {
        str(n_bytes),
        f"{n_bytes:,}",
        f"{n_bytes / MB:g}",
        f"{n_bytes / MB:.1f}",
        f"{n_bytes / 2**30:.1f}",
        f"{n_bytes / 2**30:g}",
    }
    return any(s in message for s in spellings)


@check(LAB, "refuses with SwapRefusedError when old + new cannot fit, naming the sizes")
def check_refuses(swap_plan):
    for loaded, swapping, new_bytes, budget in [
        ([("a", 100 * MB), ("x", 300 * MB)], "x", 400 * MB, 600 * MB),
        ([("x", 300 * MB)], "x", 300 * MB, 600 * MB - 1),
        ([("a", 100 * MB), ("b", 50 * MB)], "c", 900 * MB, 800 * MB),
    ]:
        what = _case(loaded, swapping, new_bytes, budget)
        old = dict(loaded).get(swapping, 0)
        why = (
            f"old + new = {(old + new_bytes) / MB:g} MiB exceed the budget even with everything else evicted"
            if old
            else f"a first load of {new_bytes // MB} MiB is more than the whole budget"
        )
        e = refused(
            swap_plan,
            list(loaded),
            swapping,
            new_bytes,
            budget,
            error=_refused_error(),
            what=what,
            should=f"{why}: raise ailab.server.registry.SwapRefusedError (the server turns exactly that into "
            "409, and the old version keeps serving)",
        )
        sizes = [("the new version", new_bytes), ("the budget", budget)] + ([("the old version", old)] if old else [])
        unnamed = [name for name, n in sizes if not _names(str(e), n)]
        expect(
            not unnamed,
            f"{what}: SwapRefusedError, good, but its message {str(e)!r} does not give "
            f"{' and '.join(unnamed)}: name the sizes, so whoever reads the 409 knows how far over "
            "the budget the swap is",
        )
    loaded = [("a", 100 * MB), ("x", 300 * MB), ("b", 200 * MB)]
    what = _case(loaded, "x", 300 * MB, 600 * MB)
    out = _plan(swap_plan, loaded, "x", 300 * MB, 600 * MB, what)
    expect(
        out == ["a", "b"],
        f"{what}: old + new = 600 MiB is exactly the budget, which fits once 'a' and 'b' are "
        f"evicted: ['a', 'b']; got {out}",
    )


@check(LAB, "a first load, and other sizes")
def check_first_load_and_sizes(swap_plan):
    loaded = [("a", 300 * MB), ("b", 300 * MB)]
    what = _case(loaded, "c", 400 * MB, 800 * MB)
    out = _plan(swap_plan, loaded, "c", 400 * MB, 800 * MB, what)
    expect(
        out == ["a"],
        f"{what}: 'c' is not loaded yet, so only its new version needs room: 600 + 400 = 1000 MiB, "
        f"evict ['a']; got {out}",
    )
    expect(
        _plan(swap_plan, [], "c", 10 * MB, 20 * MB, "nothing loaded, a first load of 10 MiB in 20 MiB") == [],
        "nothing loaded and a first load that fits: evict nothing, []",
    )
    gb = 2**30
    loaded = [("llm-a", 14 * gb), ("llm-b", 14 * gb), ("enc", gb // 2)]
    what = "loaded=[llm-a 14 GiB, llm-b 14 GiB, enc 0.5 GiB], swapping 'enc' to 0.5 GiB, budget 29 GiB"
    out = _plan(swap_plan, loaded, "enc", gb // 2, 29 * gb, what)
    expect(out == [], f"{what}: 28.5 + 0.5 = 29 GiB fits exactly; got {out}")
    out = _plan(swap_plan, loaded, "enc", gb // 2 + 1, 29 * gb, what + " (new version one byte bigger)")
    expect(out == ["llm-a"], f"{what}, new version one byte over 0.5 GiB: evict ['llm-a']; got {out}")


# --------------------------------------------------------------------------- against a reference, over drawn inputs


def _reference_swap_plan(loaded, swapping, new_bytes, budget):
    """The contract, written out: refuse when old + new exceed the budget; else evict others LRU-first until it fits."""
    sizes = dict(loaded)
    old_bytes = sizes.get(swapping, 0)
    if old_bytes + new_bytes > budget:
        raise _refused_error()(
            f"{swapping!r}: old ({old_bytes} bytes) and new ({new_bytes} bytes) versions side by side exceed the "
            f"budget of {budget} bytes"
        )
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in loaded:
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


# Names: distinct, some differing only in case ("bert" and "BERT" are two models), one empty.
_NAMES = ("a", "b", "c", "x", "A", "bert", "BERT", "llm-a", "llm-A", "enc", "model:v2", "")


def _swap_inputs():
    """Hypothesis: (loaded, swapping, new_bytes, budget) - up to six models in LRU order, sizes in bytes, MiB or GiB
    (past 2**31 bytes), the swapped model anywhere or not loaded (a first load, nothing loaded at all), a new
    version of 0 bytes, as big as the old or one byte more; budgets on every boundary (the total, old + new, the
    total after evicting the first k others, each exactly and one byte either side, 0) and in between."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        unit = d(st.sampled_from([MB, 1, 2**30]))
        names = d(st.lists(st.sampled_from(_NAMES), unique=True, max_size=6))
        loaded = [(n, d(st.integers(1, 800)) * unit + d(st.sampled_from([0, 1]))) for n in names]
        swapping = d(st.sampled_from(names)) if names and d(st.integers(0, 4)) < 4 else d(st.sampled_from(_NAMES))
        old = dict(loaded).get(swapping, 0)
        new_bytes = d(
            st.one_of(
                st.integers(0, 800).map(lambda k: k * unit),
                st.sampled_from([old, old + 1, max(old - 1, 0), 0]),
            )
        )
        total = sum(b for _, b in loaded) + new_bytes
        others = [b for n, b in loaded if n != swapping]
        marks = [total, old + new_bytes, *(total - sum(others[:k]) for k in range(1, len(others) + 1))]
        if d(st.integers(0, 4)) < 4:
            budget = max(0, d(st.sampled_from(marks)) + d(st.sampled_from([0, -1, 1])))
        else:
            budget = d(st.integers(0, total + unit))
        return loaded, swapping, new_bytes, budget

    return draw()


def _describe_swap(loaded, swapping, new_bytes, budget):
    total = sum(b for _, b in loaded) + new_bytes
    return (
        f"loaded={loaded} (bytes, least recently used first), swapping={swapping!r}, new_bytes={new_bytes}, "
        f"budget={budget} (everything loaded + the new version = {total} bytes)"
    )


def _compare_plans(mine, ref):
    if exactly(mine, ref) is not None:
        return f"the plan should be {short(ref)}; yours is {short(mine)}"
    if not (isinstance(mine, list) and all(isinstance(n, str) for n in mine)):
        return f"the plan should be a list of model names, {short(ref)}; yours is {short(mine)}"
    return None


@check(LAB, "agrees with the contract on every swap tried")
def check_same_as_reference(swap_plan):
    same_as_reference(
        swap_plan,
        _reference_swap_plan,
        _swap_inputs(),
        describe=_describe_swap,
        compare=_compare_plans,
        edges=[
            ([("x", 3 * 2**30), ("a", 2**30)], "x", 2**30, 4 * 2**30),  # sizes past 2**31, swapped model at the LRU end
            ([("bert", 100), ("BERT", 100)], "BERT", 100, 200),  # two models whose names differ only in case
        ],
        arg_names=("loaded", "swapping", "new_bytes", "budget"),
        examples=300,
    )
