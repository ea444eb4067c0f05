"""Exercise checks: how many replicas a target load needs (chapter 4.05, outgrowing one machine; topic A7).

The learner writes
  replicas_needed(target_rps, per_replica_rps, headroom=0.3, max_replicas=None) -> int
      the fewest replicas whose usable capacity, per_replica_rps * (1 - headroom) each, covers target_rps;
      at least 1; ValueError (naming the argument) for nonsense inputs; ValueError (saying how many replicas
      the target needs) when that is more than max_replicas.

The checks are derived from what the function must guarantee:
  - an int (not a float, not a bool), from the formula, with each argument used (headroom 0, 0.5 and the
    default 0.3 when omitted; several per-replica rates; large and fractional loads);
  - exact capacity is enough: a target that is exactly n replicas' usable capacity needs n, also where float
    division lands a hair above n (21 / 10 / 0.7 = 3.0000000000000004); a hair more needs n + 1;
  - at least one replica, even for a target of 0;
  - max_replicas: n == max_replicas is allowed, one more is a ValueError whose message holds the number
    needed (a silent clamp to max_replicas, or returning None, fails); None means no limit, and 0 is a limit
    (every target needs at least one replica), not "no limit";
  - nonsense (a negative, NaN or infinite target, a per-replica rate <= 0, NaN or infinite, a headroom outside
    [0, 1) or NaN) is a ValueError that names the argument, not a ZeroDivisionError, an OverflowError, a
    negative count or a silent answer;
  - numbers as numpy gives them (np.float64, np.int64) are numbers: the answer is still a plain int;
  - the direction: more headroom or more load never needs fewer replicas.
"""

from __future__ import annotations

import math

import numpy as np

from ailab.labs.core import LabCheckFailed, check, expect, within_time
from ailab.labs.differential import same_as_reference

LAB = "ex_replicas"


def _call(fn, *args, why="", **kwargs):
    shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    call = f"replicas_needed({shown})"
    try:
        return fn(*args, **kwargs), call
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code may raise anything
        raise LabCheckFailed(f"{call} raised {type(e).__name__}: {e}" + (f" - {why}" if why else "")) from e


def _expect_n(fn, want, *args, why="", **kwargs):
    got, call = _call(fn, *args, why=why, **kwargs)
    expect(
        isinstance(got, int) and not isinstance(got, bool),
        f"{call} should return an int (a number of replicas); got {got!r} ({type(got).__name__})",
    )
    expect(got == want, f"{call} should be {want}; got {got}" + (f" - {why}" if why else ""))
    return got


def _expect_error(fn, must_name, *args, why="", **kwargs):
    shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    call = f"replicas_needed({shown})"
    try:
        got = within_time(
            lambda: fn(*args, **kwargs),
            2.0,
            f"{call} did not return within 2 s: a loop that adds replicas until they cover the target "
            f"never ends there - refuse it with a ValueError naming {must_name!r}" + (f" ({why})" if why else ""),
            name="ailab-ex-replicas",
        )
    except ValueError as e:
        expect(
            must_name in str(e),
            f"{call} raised ValueError({str(e)!r}): good, but the message should name "
            f"{must_name!r} so whoever reads it knows what to fix",
        )
        return
    except Exception as e:  # noqa: BLE001 - the wrong type is the mistake this names
        expect(
            False,
            f"{call} raised {type(e).__name__}: {e}; raise a ValueError that names {must_name!r} "
            "instead" + (f" - {why}" if why else ""),
        )
    expect(
        False,
        f"{call} returned {got!r}; it should raise ValueError naming {must_name!r}" + (f" - {why}" if why else ""),
    )


@check(LAB, "the formula: usable capacity per replica, rounded up")
def check_formula(replicas_needed):
    _expect_n(
        replicas_needed,
        15,
        1000,
        100,
        why="each replica may run at 70 % of 100 req/s (headroom 0.3, the default): 1000 / 70 = 14.3, rounded up",
    )
    _expect_n(replicas_needed, 15, 1000, 100, 0.3)
    _expect_n(replicas_needed, 10, 1000, 100, 0.0, why="headroom 0 uses each replica to its full 100 req/s")
    _expect_n(replicas_needed, 20, 1000, 100, 0.5, why="headroom 0.5 keeps half of each replica free: 50 req/s usable")
    _expect_n(replicas_needed, 2, 150, 100, headroom=0.0, why="use the headroom argument")
    _expect_n(replicas_needed, 7, 1000, 250, 0.4, why="1000 / (250 x 0.6) = 6.67")
    _expect_n(replicas_needed, 1, 12.5, 40, 0.25, why="a fractional load: 12.5 / 30 = 0.42, one replica")
    _expect_n(replicas_needed, 143, 1_000_000, 10_000, 0.3, why="1e6 / 7000 = 142.9")
    _expect_n(replicas_needed, 3, 5.0, 2.5, 0.2, why="per-replica rates need not be whole: 5 / 2 = 2.5")


@check(LAB, "exact capacity is enough; a hair more needs one more")
def check_exact_boundaries(replicas_needed):
    _expect_n(replicas_needed, 3, 210, 100, 0.3, why="3 replicas x 70 req/s usable is exactly 210: do not add a 4th")
    _expect_n(replicas_needed, 10, 700, 100, why="10 x 70 = 700 exactly")
    _expect_n(
        replicas_needed,
        3,
        21,
        10,
        0.3,
        why="3 x 7 = 21 exactly; float division can land a hair above 3 "
        "(21 / 10 / 0.7 = 3.0000000000000004): rounding noise must not "
        "add a replica",
    )
    _expect_n(replicas_needed, 30, 210, 10, 0.3, why="30 x 7 = 210 exactly (watch float rounding)")
    _expect_n(replicas_needed, 4, 100, 25, 0.0, why="4 x 25 = 100 exactly")
    _expect_n(replicas_needed, 4, 210.5, 100, 0.3, why="210.5 req/s is more than 3 replicas' 210: round UP")
    _expect_n(replicas_needed, 2, 70.01, 100, 0.3, why="70.01 is more than one replica's 70")
    _expect_n(replicas_needed, 1, 0, 100, why="no load still needs one replica to answer at all")
    _expect_n(replicas_needed, 1, 0.001, 100, why="a tiny load needs one replica")
    _expect_n(replicas_needed, 1, 70, 100, why="exactly one replica's usable capacity")


@check(LAB, "max_replicas: allowed up to it, a clear error beyond")
def check_max_replicas(replicas_needed):
    _expect_n(replicas_needed, 15, 1000, 100, max_replicas=15, why="needing exactly max_replicas is fine")
    _expect_n(replicas_needed, 15, 1000, 100, max_replicas=40, why="a limit well above the need changes nothing")
    _expect_n(replicas_needed, 1, 0, 100, max_replicas=1)
    _expect_n(replicas_needed, 143, 1_000_000, 10_000, max_replicas=None, why="max_replicas=None means no limit")
    _expect_n(
        replicas_needed,
        15,
        np.float64(1000.0),
        np.int64(100),
        max_replicas=np.int64(15),
        why="rates measured with numpy come as np.float64 and np.int64: they are numbers too",
    )
    for args, kwargs, need in [
        ((1000, 100), {"max_replicas": 14}, 15),
        ((1000, 100, 0.5), {"max_replicas": 19}, 20),
        ((1_000_000, 10_000), {"max_replicas": 8}, 143),
        ((50, 100), {"max_replicas": 0}, 1),
    ]:
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        call = f"replicas_needed({shown})"
        try:
            got = replicas_needed(*args, **kwargs)
        except ValueError as e:
            expect(
                str(need) in str(e),
                f"{call} raised ValueError({str(e)!r}); the message should say how many "
                f"replicas the target needs ({need}), so the operator knows the shortfall",
            )
            continue
        except Exception as e:  # noqa: BLE001
            expect(False, f"{call} raised {type(e).__name__}: {e}; beyond max_replicas raise a ValueError")
        expect(
            False,
            f"{call} returned {got!r}: the target needs {need} replicas, more than max_replicas - raise a "
            "ValueError saying so (a quiet clamp to the limit would leave the service overloaded"
            + (
                "; 0 is a limit, not 'no limit': only None means no limit - test `is None`, not truth)"
                if kwargs.get("max_replicas") == 0
                else ")"
            ),
        )


@check(LAB, "nonsense inputs are a ValueError that names the argument")
def check_nonsense(replicas_needed):
    nan = float("nan")
    _expect_error(replicas_needed, "target_rps", -5, 100, why="a negative load is a mistake upstream")
    _expect_error(replicas_needed, "target_rps", nan, 100, why="NaN compares False with everything: test for it")
    _expect_error(replicas_needed, "target_rps", float("inf"), 100, why="no number of replicas serves an infinite load")
    _expect_error(replicas_needed, "per_replica_rps", 100, 0, why="a replica that serves nothing")
    _expect_error(replicas_needed, "per_replica_rps", 100, -20)
    _expect_error(replicas_needed, "per_replica_rps", 100, nan, why="NaN compares False with everything")
    _expect_error(
        replicas_needed,
        "per_replica_rps",
        100,
        float("inf"),
        why="a replica with infinite capacity is a measurement gone wrong",
    )
    _expect_error(replicas_needed, "headroom", 100, 50, 1.0, why="headroom 1 leaves no usable capacity")
    _expect_error(replicas_needed, "headroom", 100, 50, 1.5)
    _expect_error(
        replicas_needed,
        "headroom",
        100,
        50,
        -0.1,
        why="negative headroom plans to run replicas past their measured capacity",
    )
    _expect_error(
        replicas_needed,
        "headroom",
        100,
        50,
        nan,
        why="NaN compares False with everything: a check written as `headroom < 0 or headroom >= 1` lets it through",
    )


@check(LAB, "more load or more headroom never needs fewer replicas")
def check_direction(replicas_needed):
    prev = 0
    for target in [0, 1, 69, 70, 71, 139.9, 140, 140.1, 500, 999, 1000, 1001, 5000]:
        got, call = _call(replicas_needed, target, 100)
        expect(
            isinstance(got, int) and got >= max(prev, 1),
            f"{call} = {got!r}, but a smaller load already needed {prev}: more load never needs fewer replicas",
        )
        expect(
            got == max(1, math.ceil(round(target / 70, 9))),
            f"{call} should be {max(1, math.ceil(round(target / 70, 9)))}; got {got}",
        )
        prev = got
    prev = 0
    for headroom in [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 0.9]:
        got, call = _call(replicas_needed, 1000, 100, headroom)
        expect(
            isinstance(got, int) and got >= prev,
            f"{call} = {got!r}, but less headroom already needed {prev}: "
            "keeping more of each replica free means more replicas",
        )
        prev = got
    expect(prev == 100, f"replicas_needed(1000, 100, 0.9) should be 100 (10 req/s usable each); got {prev}")


# --------------------------------------------------------------------------- the differential check


class _Refused(ValueError):
    """The reference refuses: `must_name` is what the learner's ValueError message has to contain."""

    def __init__(self, message: str, must_name: str):
        super().__init__(message)
        self.must_name = must_name


def _reference_replicas_needed(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """From the contract: validate, divide by one replica's usable capacity, round up past float noise."""
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise _Refused(f"target_rps must be a finite number >= 0; got {target_rps!r}", "target_rps")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise _Refused(f"per_replica_rps must be a finite number > 0; got {per_replica_rps!r}", "per_replica_rps")
    if not 0 <= headroom < 1:
        raise _Refused(f"headroom must be in [0, 1); got {headroom!r}", "headroom")
    x = float(target_rps) / (float(per_replica_rps) * (1 - float(headroom)))
    k = round(x)
    n = max(1, int(k) if abs(x - k) <= 1e-9 else math.ceil(x))
    if max_replicas is not None and n > max_replicas:
        raise _Refused(f"the target needs {n} replicas, more than max_replicas={max_replicas}", str(n))
    return n


def _outcome(fn, args: tuple, kwargs: dict):
    """What a call did, as data: ("value", v), ("ValueError", message) or ("raised", "Type: message")."""
    try:
        return ("value", fn(*args, **kwargs))
    except NotImplementedError:
        raise
    except ValueError as e:
        return ("ValueError", str(e))
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything; judged by _compare_outcomes
        return ("raised", f"{type(e).__name__}: {e}")


def _reference_outcome(args: tuple, kwargs: dict):
    try:
        return ("value", _reference_replicas_needed(*args, **kwargs))
    except _Refused as e:
        return ("ValueError", e.must_name)


def _compare_outcomes(mine, ref) -> str | None:
    kind, got = mine
    if ref[0] == "value":
        want = ref[1]
        if kind != "value":
            return f"yours raised {got if kind == 'raised' else f'ValueError: {got}'}; the answer is {want} replica(s)"
        if not isinstance(got, int) or isinstance(got, bool):
            return f"yours returned {got!r} ({type(got).__name__}); the answer is the int {want}"
        return None if got == want else f"yours returned {got}; the answer is {want} replica(s)"
    must = ref[1]
    if kind == "value":
        return f"yours returned {got!r}; it should raise a ValueError whose message names {must!r}"
    if kind == "raised":
        return f"yours raised {got}; it should raise a ValueError whose message names {must!r}"
    return None if must in got else f"yours raised ValueError({got!r}): its message should name {must!r}"


_OMIT = "omitted"


def _replica_calls():
    """Hypothesis: (args, kwargs) of a call, valid and nonsense, exact capacities, hairs above and below them."""
    from hypothesis import assume
    from hypothesis import strategies as st

    nan, inf = float("nan"), float("inf")

    @st.composite
    def draw(d):
        per = d(
            st.one_of(
                st.sampled_from([1, 2.5, 7, 10, 100, 250, 10_000, 0.1, 3.3, 1e5]),
                st.floats(1e-2, 1e5),
                st.integers(1, 50_000),
                st.sampled_from([0, -20, -0.5, nan, inf, -inf, 0.0]),  # nonsense
            )
        )
        headroom = d(
            st.one_of(
                st.sampled_from([_OMIT, 0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 0.9, 0.99, 0]),
                st.floats(0.0, 0.999),
                st.sampled_from([1.0, 1, 1.5, -0.1, nan, inf]),  # nonsense
            )
        )
        h = 0.3 if headroom is _OMIT else headroom
        ok_inputs = isinstance(per, (int, float)) and math.isfinite(per) and per > 0 and 0 <= h < 1
        usable = per * (1 - h) if ok_inputs else 1.0
        k = d(st.one_of(st.integers(0, 40), st.integers(0, 100_000)))
        target = d(
            st.one_of(
                st.just(k * usable),  # exact capacity of k replicas (float noise and all)
                st.floats(1e-6, 1e-2).map(lambda e: k * usable * (1 + e) if k else e * usable),  # a hair above
                st.floats(1e-6, 1e-2).map(lambda e: k * usable * (1 - e)),  # a hair below
                st.floats(0, 2e5).map(lambda x: x * usable),
                st.sampled_from([0, 0.0, 0.001, 2**31 + 1, 1e-300]),
                st.sampled_from([-5, -1e-9, nan, inf, -inf]),  # nonsense
            )
        )
        if ok_inputs and isinstance(target, float) and math.isfinite(target) and target >= 0:
            x = target / usable
            near = round(x)
            exact = abs(x - near) <= min(1e-13 * max(1, near), 1e-10)
            clear = abs(x - near) >= max(1e-6, 1e-10 * near)
            assume(x <= 2e5 and (exact or clear))  # between float noise and a hair the contract says nothing
        if ok_inputs and isinstance(target, int):
            assume(target / usable <= 2e5)
        need = max(1, round(target / usable)) if ok_inputs and math.isfinite(target) and target >= 0 else 1
        limit = d(
            st.sampled_from(
                [_OMIT, None, 0, need - 1, need, need + 1, 2**31, 2**31 + 7, 2**63 - 1, np.int64(need), 10 * need]
            )
        )
        as_numpy = d(st.sampled_from(["no", "target", "per", "both"]))
        if as_numpy in ("target", "both"):
            target = np.float64(target)
        if as_numpy in ("per", "both"):
            per = np.int64(per) if isinstance(per, int) else np.float64(per)
        args, kwargs = [target, per], {}
        by_keyword = d(st.booleans())
        if headroom is not _OMIT:
            if by_keyword or limit is not _OMIT and d(st.booleans()):
                kwargs["headroom"] = headroom
            else:
                args.append(headroom)
        if limit is not _OMIT:
            if "headroom" in kwargs or headroom is _OMIT or by_keyword:
                kwargs["max_replicas"] = limit
            else:
                args.append(limit)
        return tuple(args), kwargs

    return draw()


def _describe_call(args: tuple, kwargs: dict) -> str:
    return "replicas_needed(" + ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]) + ")"


@check(LAB, "agrees with the rule on every load, rate, headroom and limit tried")
def check_same_as_reference(replicas_needed):
    same_as_reference(
        lambda args, kwargs: _outcome(replicas_needed, args, kwargs),
        _reference_outcome,
        _replica_calls(),
        describe=_describe_call,
        compare=_compare_outcomes,
        edges=[
            ((21, 10, 0.3), {}),
            ((0, 100), {}),
            ((1000, 100), {"max_replicas": 0}),
            ((2**31 + 1, 10_000_000), {"max_replicas": np.int64(2**31)}),
            ((100, 50, float("nan")), {}),
        ],
        arg_names=("the arguments", "the keyword arguments"),
        examples=400,
    )
