"""Checks for labs/1_hardware/lab_find_the_leak.ipynb: the learner writes a slope-based leak detector.

`leak_slope(samples, warmup_frac=0.2)` must be the least-squares slope of the readings left after
dropping the first int(len(samples) * warmup_frac): every reading counts (a two-reading estimate, or a
fit through two points, is thrown off by one GC dip), the argument is used (not a fixed 20 %), the
cut rounds down, the sign is kept (memory that falls has a negative slope), any sequence of numbers
works (a list of ints, a numpy array, a tuple), and no readings is an error, not a slope.

`is_leaking(samples)` must be True exactly when that slope is above 4 KiB per iteration: just above
is a leak and just below is not (a threshold in KB, MiB or "any positive slope" fails), falling
memory is not a leak, allocator warm-up and one late spike are not a leak, and an empty soak is an
error rather than "clean".

All series are synthetic and seeded (fast, deterministic); the notebook adds a measured planted
leak and the measured fixed loop.

Then both functions against the reference fit on generated soaks: 2 to 120 readings as lists of floats or ints,
tuples, float and int64 arrays; readings beyond 2**31 bytes; warmup_frac 0, fractions whose cut is a whole number
and ones that round down; rising, falling and flat memory with noise and spikes; slopes a hair either side of
4 KiB per iteration (within float rounding of it either answer is accepted); the caller's readings unchanged; no
readings an error.
"""

from __future__ import annotations

import numbers

import numpy as np

from ailab.labs.core import check, expect
from ailab.labs.differential import close, same_as_reference, short

LAB = "lab_find_the_leak"
KiB = 1024
THRESHOLD = 4 * KiB  # bytes per iteration, as in the notebook


def _series(slope: float, n: int = 80, noise: float = 20 * KiB, seed: int = 0, base: float = 300e6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return base + slope * np.arange(n) + rng.normal(0, noise, n)


def _warmup(series: np.ndarray, steps: int = 6, grow: float = 1.5 * 2**20) -> np.ndarray:
    """Allocator warm-up: memory climbs over the first few iterations, then a clean loop is flat."""
    out = series.copy()
    ramp = np.minimum(np.arange(len(out)), steps) / steps * grow
    return out + ramp


def _fit(samples, warmup_frac: float = 0.2) -> float:
    """The reference: least-squares slope of the readings after the first int(len * warmup_frac)."""
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def _slope_of(leak_slope, samples, **kwargs) -> float:
    got = leak_slope(samples, **kwargs)
    expect(
        isinstance(got, (numbers.Real, np.floating, np.integer)) and not isinstance(got, (bool, np.bool_)),
        f"leak_slope should return one number (bytes per iteration), got {type(got).__name__} {got!r}"
        + (": return the slope alone, not the fit's coefficients" if np.ndim(got) else ""),
    )
    return float(got)


def _close(got: float, want: float) -> bool:
    """Within 2 % of the least-squares slope, or 512 bytes per iteration (1/8 of the threshold) near zero."""
    return abs(got - want) <= max(0.02 * abs(want), 512.0)


def _kib(x: float) -> str:
    return f"{x / KiB:+.2f} KiB/iteration"


@check(LAB, "slope_uses_every_sample")
def check_slope(leak_slope) -> None:
    """The slope of noisy leaks whose last reading dips (a GC run) and first one bumps: two points get it wrong."""
    for true, seed in ((50 * KiB, 1), (8 * KiB, 2)):
        s = _warmup(_series(true, seed=seed))  # the allocator warms up over the first readings
        s[-1] -= 0.5 * 2**20  # a late dip (a GC run)
        s[0] += 0.5 * 2**20  # and an early bump
        want, got = _fit(s), _slope_of(leak_slope, list(s))
        expect(
            _close(got, want),
            f"this series of 80 readings grows {true / KiB:.0f} KiB per iteration after a warm-up, with one low "
            f"last reading and one high first reading; the least-squares slope after the warm-up is {_kib(want)}, "
            f"yours {_kib(got)}. Skip the warm-up, then fit a line through all the readings you keep, not two of "
            "them.",
        )


@check(LAB, "slope_arguments_and_edges")
def check_slope_edges(leak_slope) -> None:
    """warmup_frac is used and rounds down; the sign is kept; other input types and short series; empty raises."""
    # a steep warm-up (200 KiB/iteration for 40 readings) and then a 16 KiB/iteration leak
    steep = np.concatenate([300e6 + 200 * KiB * np.arange(40), 300e6 + 200 * KiB * 40 + 16 * KiB * np.arange(40)])
    steep = steep + np.random.default_rng(11).normal(0, 2 * KiB, len(steep))
    for frac in (0.5, 0.0, 0.3):
        want, got = _fit(steep, frac), _slope_of(leak_slope, list(steep), warmup_frac=frac)
        expect(
            _close(got, want),
            f"with warmup_frac={frac}, 80 readings (the first 40 climb 200 KiB/iteration, the rest 16): skip the "
            f"first {int(80 * frac)} and fit the rest; expected {_kib(want)}, yours {_kib(got)}. Use the "
            "warmup_frac argument, not a fixed fraction.",
        )
    # memory that is freed steadily: the slope is negative, not its size
    falling = _series(-16 * KiB, seed=12)
    want, got = _fit(falling), _slope_of(leak_slope, list(falling))
    expect(
        _close(got, want),
        f"memory falling 16 KiB per iteration has a negative slope ({_kib(want)}); yours is "
        f"{_kib(got)}. Keep the sign: later minus earlier, not its size.",
    )
    # 13 readings, warmup_frac 0.2: 13 x 0.2 = 2.6, so 2 are skipped; reading 2 (kept) is high
    odd = [300e6 + 8 * KiB * i for i in range(13)]
    odd[2] += 2**20
    want, got = _fit(odd, 0.2), _slope_of(leak_slope, odd, warmup_frac=0.2)
    expect(
        _close(got, want),
        f"with 13 readings and warmup_frac=0.2, skip the first int(13 x 0.2) = 2 readings (rounded down) and fit "
        f"the other 11; expected {_kib(want)}, yours {_kib(got)}",
    )
    flat = [300e6] * 20
    got = _slope_of(leak_slope, flat)
    expect(abs(got) <= 1.0, f"20 equal readings have a slope of 0; yours is {got:.3g} bytes/iteration")
    # other input types than a list of floats: RSS readings are ints, soaks give arrays; a short soak
    leak = _series(24 * KiB, n=40, seed=13)
    for what, samples in (
        ("a list of ints", [int(x) for x in leak]),
        ("a numpy int64 array", leak.astype(np.int64)),
        ("a tuple", tuple(leak)),
        ("5 readings", list(leak[:5])),
        ("3 readings", list(leak[:3])),
    ):
        want = _fit(samples)
        try:
            got = _slope_of(leak_slope, samples)
        except (NotImplementedError, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - name the input that broke it
            expect(
                False,
                f"given {what} (not a list of floats), your leak_slope raised {type(e).__name__}: {e}. "
                "Convert the readings to a float array before working on them.",
            )
        expect(
            _close(got, want),
            f"given {what}, the least-squares slope after the warm-up is {_kib(want)}; yours is {_kib(got)}",
        )
    try:
        got = leak_slope([])
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - an error is the right answer to no readings
        got = None
    else:
        expect(
            False,
            f"leak_slope([]) returned {got!r}: with no readings there is no slope. Let it raise an error "
            "rather than return a number.",
        )


def _flag(is_leaking, samples) -> bool:
    got = is_leaking(samples)
    expect(
        not isinstance(got, np.bool_),
        f"is_leaking returned {got!r}, a numpy bool, not True or False: a "
        "comparison involving numpy gives one; convert it with bool(...)",
    )
    expect(got is True or got is False, f"is_leaking should return True or False, got {type(got).__name__} {got!r}")
    return got


def _line(slope: float, n: int = 60, base: float = 300e6) -> list[float]:
    """A noiseless series: after the warm-up its fitted slope is exactly `slope` (to rounding)."""
    return [base + slope * i for i in range(n)]


@check(LAB, "finds_leaks")
def check_finds_leaks(is_leaking, planted: list[float] | None = None) -> None:
    """Flag a measured planted leak, synthetic slow leaks hidden in noise, and a leak just above the threshold."""
    if planted is not None:
        expect(_flag(is_leaking, list(planted)) is True, "the planted leak (measured in this notebook) was not flagged")
    for slope, seed in ((8 * KiB, 3), (64 * KiB, 4)):
        s = _warmup(_series(slope, seed=seed))
        s[-1] -= 1 * 2**20  # the last reading happens to be low
        expect(
            _flag(is_leaking, list(s)) is True,
            f"a loop leaking {slope / KiB:.0f} KiB per iteration (last reading low) was not flagged",
        )
    s = _warmup(_series(16 * KiB, seed=14))
    s[[20, 40, 60]] -= 2**20  # three GC runs
    expect(
        _flag(is_leaking, s) is True,
        "a loop leaking 16 KiB per iteration, with three GC dips, given as a numpy array, was not flagged",
    )
    just_above = 1.02 * THRESHOLD
    expect(
        _flag(is_leaking, [int(x) for x in _line(just_above)]) is True,
        f"a steady leak of {just_above:.0f} bytes per iteration (2 % above the 4 KiB = 4096-byte threshold, as "
        "ints) was not flagged: is the threshold 4 KiB per iteration, in bytes?",
    )
    expect(
        _flag(is_leaking, _line(32 * KiB, n=10)) is True,
        "a short soak (10 readings) leaking 32 KiB per iteration was not flagged",
    )


@check(LAB, "clean_loop_not_flagged")
def check_clean_loop(is_leaking, clean: list[float] | None = None) -> None:
    """A clean loop - noise, allocator warm-up, a late spike - must not be flagged; nor falling memory, nor a
    steady growth just below the threshold."""
    if clean is not None:
        expect(
            _flag(is_leaking, list(clean)) is False, "the fixed loop (measured in this notebook) was flagged as leaking"
        )
    for seed in (5, 6, 7):
        s = _warmup(_series(0.0, seed=seed))
        s[-1] += 1 * 2**20  # one late spike
        expect(
            _flag(is_leaking, list(s)) is False,
            "a clean loop (flat after warm-up, one late spike) was flagged. Skip the warm-up iterations "
            "and judge the fitted slope over all the others, against a threshold.",
        )
    expect(
        _flag(is_leaking, _series(-64 * KiB, seed=8)) is False,
        "memory falling 64 KiB per iteration (a cache being freed) was flagged as a leak: a leak grows. Compare "
        "the slope itself with the threshold, not its size.",
    )
    for slope, what in (
        (0.98 * THRESHOLD, "2 % below the 4 KiB = 4096-byte threshold"),
        (4000.0, "4000 bytes: 4 KB, but below 4 KiB"),
    ):
        expect(
            _flag(is_leaking, _line(slope)) is False,
            f"a steady growth of {slope:.0f} bytes per iteration ({what}) was flagged: the threshold is 4 KiB "
            "(4 x 1024 bytes) per iteration, and only a slope above it is a leak",
        )


@check(LAB, "no_readings_is_an_error")
def check_no_readings(is_leaking) -> None:
    """An empty soak (the measurement failed) must raise, not report a clean loop."""
    try:
        got = is_leaking([])
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - an error is the right answer
        return
    expect(
        False,
        f"is_leaking([]) returned {got!r}: with no readings nothing was measured, so 'not leaking' (or "
        "'leaking') is a guess. Let the error reach the caller instead of catching it.",
    )


# --------------------------------------------------------------------------- the differential checks (issue 42)


def _reference_leak_slope(samples, warmup_frac=0.2) -> float:
    if len(samples) == 0:
        raise Exception("no readings, no slope")  # any error will do: the contract asks for one, not which
    return _fit(samples, warmup_frac)


def _soaks(min_len: int = 2, slopes=None):
    """Hypothesis: a soak's readings, in the types a soak gives (list, tuple, float or int64 array)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        n = d(st.one_of(st.integers(min_len, 12), st.integers(min_len, 100)))
        base = d(st.sampled_from([0.0, 300e6, 3.5e9, 2.0**40]))
        slope = d(
            slopes
            if slopes is not None
            else st.one_of(st.sampled_from([0.0, 8 * KiB, -16 * KiB]), st.floats(-(2.0**20), 2.0**20))
        )
        noise = d(st.sampled_from([0.0, 1.0, 2 * KiB, 20 * KiB]))
        rng = np.random.default_rng(d(st.integers(0, 2**16)))
        y = base + slope * np.arange(n) + rng.normal(0.0, noise, n) if noise else base + slope * np.arange(n)
        if d(st.booleans()):  # a GC dip or a spike somewhere
            y[d(st.integers(0, n - 1))] += d(st.sampled_from([-(2.0**20), 2.0**20]))
        kind = d(st.sampled_from(["list", "int list", "tuple", "array", "int64 array"]))
        if kind in ("int list", "int64 array"):
            y = np.rint(y).astype(np.int64)
        return {"list": y.tolist(), "int list": y.tolist(), "tuple": tuple(y.tolist())}.get(kind, y)

    return draw()


def _warmups(n: int):
    from hypothesis import strategies as st

    return st.one_of(
        st.sampled_from([0.0, 0.2, 0.5, 0.1, 0.3, 0.7]),
        st.integers(0, n - 2).map(lambda k: k / n),  # a cut that is a whole number of readings (as a float)
        st.floats(0.0, 0.9),
    ).filter(lambda f: n - int(n * f) >= 2)


def _slope_inputs():
    from hypothesis import strategies as st

    return _soaks().flatmap(lambda s: st.tuples(st.just(s), _warmups(len(s))))


def _say_soak(samples) -> str:
    kind = type(samples).__name__ + (f" of {samples.dtype}" if isinstance(samples, np.ndarray) else "")
    return f"{len(samples)} readings ({kind}) {short(samples)}"


def _same_slope(mine, ref) -> str | None:
    if not isinstance(mine, (numbers.Real, np.floating, np.integer)) or isinstance(mine, (bool, np.bool_)):
        return f"leak_slope should return one number (bytes per iteration) like {ref:.6g}; got {short(mine)}"
    return close(rel=1e-7, abs_=1e-3)(float(mine), ref)


@check(LAB, "leak_slope: the same slope as the least-squares fit on every soak tried")
def check_slope_same_as_reference(leak_slope) -> None:
    same_as_reference(
        lambda samples, warmup_frac: leak_slope(samples, warmup_frac=warmup_frac),
        _reference_leak_slope,
        _slope_inputs(),
        describe=lambda samples, frac: f"leak_slope({_say_soak(samples)}, warmup_frac={frac!r})",
        compare=_same_slope,
        edges=[([], 0.2), ([300e6, 300e6 + 8 * KiB], 0.0), (np.arange(10, dtype=np.int64) * 8 * KiB + 2**32, 0.5)],
        arg_names=("samples", "warmup_frac"),
        examples=150,
    )


EITHER = "True or False (the slope is within float rounding of the threshold)"


def _reference_is_leaking(samples):
    slope = _reference_leak_slope(samples)
    kept = np.asarray(samples, dtype=float)[int(len(samples) * 0.2) :]
    if len(kept) >= 2 and np.all(np.diff(kept) == THRESHOLD):
        return False  # growing by exactly 4 KiB per iteration is at the threshold, not above it
    if abs(slope - THRESHOLD) <= 1e-6 * THRESHOLD:
        return EITHER
    return slope > THRESHOLD


def _same_flag(mine, ref) -> str | None:
    if isinstance(mine, np.bool_):
        return f"is_leaking returned {mine!r}, a numpy bool, not True or False: convert it with bool(...)"
    if mine is not True and mine is not False:
        return f"is_leaking should return True or False; got {type(mine).__name__} {short(mine)}"
    if ref is not EITHER and mine is not ref:
        return f"the fitted slope after the warm-up says {ref}; yours says {mine}"
    return None


def _say_flag(samples) -> str:
    if len(samples) == 0:
        return "is_leaking([]) - no readings at all"
    return (
        f"is_leaking({_say_soak(samples)}) - a fitted slope of {_fit(samples):.6g} bytes/iteration against {THRESHOLD}"
    )


@check(LAB, "is_leaking: the same verdict as the fitted slope on every soak tried")
def check_is_leaking_same_as_reference(is_leaking) -> None:
    from hypothesis import strategies as st

    near = st.one_of(
        st.sampled_from([THRESHOLD * (1 + 1e-3), THRESHOLD * (1 - 1e-3), 4000.0, 4200.0, 0.0, -float(THRESHOLD)]),
        st.floats(-2.0 * THRESHOLD, 4.0 * THRESHOLD),
    )
    same_as_reference(
        is_leaking,
        _reference_is_leaking,
        _soaks(slopes=near).map(lambda s: (s,)),
        describe=_say_flag,
        compare=_same_flag,
        edges=[
            ([],),
            ([300e6 + 4200.0 * i for i in range(10)],),
            ([300e6 + 4000.0 * i for i in range(10)],),
            ([THRESHOLD * i for i in range(12)],),  # exactly at the threshold: not above it
            ([2**31 + THRESHOLD * i for i in range(25)],),
        ],
        arg_names=("samples",),
        examples=200,
    )
