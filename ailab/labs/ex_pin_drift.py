"""Exercise checks: pin drift - which pinned packages are not installed at their pinned version (topic A6).

The learner writes
  pin_drift(installed, pins) -> list[dict]
      `installed` maps distribution names to versions (what importlib.metadata reports), `pins` maps names to
      exact pinned versions. One row {"package", "pinned", "installed", "kind"} per pinned package whose installed
      version differs ("differs") or that is not installed at all ("missing", installed None); sorted by package.

The checks are derived from what the function must guarantee:
  each field on its own (package is the normalised name, pinned and installed are the strings as given, installed
  is None for a missing package, kind is one of the two words); only drift is reported (a match gives no row,
  an installed package nobody pinned gives no row); rows sorted by package whatever order the pins come in; empty
  pins, empty installed, a single pin; names compared the way pip normalises them (case, '-', '_', '.', runs of
  them) on both sides; versions compared as versions (1.0 == 1.0.0, 2.13.0+cpu satisfies the 2.13.0 pin, 1.10 is
  not 1.1, a release candidate is not the release), also when either side is spelled as pip accepts but does not
  write (v1.0, 2.0.0-RC1, 1.0-1, 1.0.alpha1, 02.01), with both strings reported as given (not pip's normal
  spelling); the inputs are not modified.
  Against a reference (packaging's canonicalize_name and Version, the contract written out) on generated
  environments: names spelled in any case and with any run of separators on either side, versions in every
  spelling pip accepts (leading zeros, v, epochs, pre/post/dev words, trailing zeros, local labels on the
  installed side), the same or one field apart (a fourth release number, 1.10 against 1.1, release numbers past
  2**31), unpinned extras, and the installed dict in another order; the rows must be exactly the reference's.
"""

from __future__ import annotations

import copy

from ailab.labs.core import check, expect
from ailab.labs.differential import exactly, same_as_reference

LAB = "ex_pin_drift"
FIELDS = ("package", "pinned", "installed", "kind")


def _rows(pin_drift, installed: dict, pins: dict, what: str) -> list[dict]:
    before = copy.deepcopy(installed), copy.deepcopy(pins)
    out = pin_drift(installed, pins)
    expect((installed, pins) == before, f"{what}: pin_drift() changed the dicts it was given; it should only read them")
    expect(
        isinstance(out, list),
        f"{what}: pin_drift() should return a list of rows (dicts); got {type(out).__name__} {out!r}",
    )
    for row in out:
        expect(isinstance(row, dict), f"{what}: each row should be a dict; got {type(row).__name__} {row!r}")
        expect(
            set(row) == set(FIELDS),
            f"{what}: each row should have exactly the keys {list(FIELDS)}; a row has {sorted(row)}",
        )
    return out


def _packages(rows):
    return [r.get("package") for r in rows]


@check(LAB, "one row per drifted pin, each field right, sorted")
def check_rows(pin_drift):
    installed = {"numpy": "2.4.6", "torch": "2.12.0", "plotly": "7.1.0", "requests": "2.32.3"}
    pins = {"torch": "2.13.0", "scipy": "1.17.1", "numpy": "2.4.6", "plotly": "7.1.0"}
    rows = _rows(pin_drift, installed, pins, "torch at 2.12.0 (pinned 2.13.0), scipy not installed")
    pkgs = _packages(rows)
    expect(
        "numpy" not in pkgs and "plotly" not in pkgs,
        f"numpy and plotly are installed at their pinned versions, so they have no row; got rows for {pkgs}",
    )
    expect(
        "requests" not in pkgs,
        f"requests is installed but not pinned: only pinned packages are checked; got rows for {pkgs}",
    )
    expect(sorted(pkgs) == ["scipy", "torch"], f"rows should be for scipy (missing) and torch (differs); got {pkgs}")
    expect(
        pkgs == ["scipy", "torch"],
        f"rows should be sorted by package (scipy before torch), whatever order the pins come in; got {pkgs}",
    )
    scipy, torch = rows
    expect(
        torch["kind"] == "differs",
        f"torch is installed at another version: kind should be 'differs'; got {torch['kind']!r}",
    )
    expect(
        torch["pinned"] == "2.13.0" and torch["installed"] == "2.12.0",
        f"torch's row: pinned should be '2.13.0' and installed '2.12.0' (the version strings as given); got "
        f"pinned {torch['pinned']!r}, installed {torch['installed']!r}",
    )
    expect(
        scipy["kind"] == "missing", f"scipy is not installed at all: kind should be 'missing'; got {scipy['kind']!r}"
    )
    expect(
        scipy["installed"] is None,
        f"scipy is not installed: its installed field should be None; got {scipy['installed']!r}",
    )
    expect(scipy["pinned"] == "1.17.1", f"scipy's pinned field should be '1.17.1'; got {scipy['pinned']!r}")

    rows = _rows(pin_drift, {"zeta": "1.0"}, {"zeta": "1.0"}, "a single pin that matches")
    expect(rows == [], f"a single pin that matches gives no row; got {rows!r}")
    rows = _rows(pin_drift, {"zeta": "1.0"}, {}, "no pins")
    expect(rows == [], f"no pins, no rows; got {rows!r}")
    pins = {"zz": "3", "mm": "2", "aa": "1", "kk": "4"}
    rows = _rows(pin_drift, {}, pins, "nothing installed")
    expect(
        _packages(rows) == ["aa", "kk", "mm", "zz"] and all(r["kind"] == "missing" for r in rows),
        f"with nothing installed, every pin is a 'missing' row, sorted by package: expected packages "
        f"['aa', 'kk', 'mm', 'zz'], all missing; got {[(r['package'], r['kind']) for r in rows]}",
    )
    expect(
        all(r["installed"] is None for r in rows),
        f"a missing package's installed field is None; got {[r['installed'] for r in rows]}",
    )
    rows = _rows(pin_drift, {"aa": "1", "kk": "5", "mm": "2.1", "zz": "3"}, pins, "kk at 5, mm at 2.1")
    expect(
        [(r["package"], r["kind"], r["pinned"], r["installed"]) for r in rows]
        == [("kk", "differs", "4", "5"), ("mm", "differs", "2", "2.1")],
        f"kk pinned 4 installed 5 and mm pinned 2 installed 2.1 should give two 'differs' rows, sorted; got "
        f"{[(r['package'], r['kind'], r['pinned'], r['installed']) for r in rows]}",
    )


@check(LAB, "names are compared the way pip normalises them")
def check_names(pin_drift):
    installed = {
        "PyYAML": "6.0.4",
        "scikit-learn": "1.9.1",
        "ruamel.yaml": "0.18.6",
        "Typing_Extensions": "4.12.2",
        "zope-interface": "7.0",
    }
    pins = {
        "pyyaml": "6.0.4",
        "scikit_learn": "1.9.1",
        "ruamel-yaml": "0.18.6",
        "typing-extensions": "4.12.2",
        "Zope.Interface": "7.0",
    }
    rows = _rows(pin_drift, installed, pins, "the same packages spelled differently")
    expect(
        rows == [],
        "PyYAML/pyyaml, scikit-learn/scikit_learn, ruamel.yaml/ruamel-yaml, "
        "Typing_Extensions/typing-extensions and zope-interface/Zope.Interface are the same packages to "
        "pip (case, '-', '_' and '.' do not matter), all at their pinned versions: no row expected; got "
        f"rows for {_packages(rows)}",
    )
    rows = _rows(pin_drift, {"jupyter-book": "1.0.4"}, {"jupyter_-book": "1.0.4"}, "a run of separators")
    expect(
        rows == [],
        "'jupyter_-book' and 'jupyter-book' are the same name to pip (a run of '-', '_', '.' counts as "
        f"one '-'): no row expected; got rows for {_packages(rows)}",
    )
    rows = _rows(
        pin_drift,
        {"PyYAML": "6.0.1", "numpy": "2.4.5"},
        {"PyYAML": "6.0.4", "numpy": "2.4.6", "Memory_Profiler": "0.61.0"},
        "PyYAML at 6.0.1, numpy at 2.4.5, Memory_Profiler missing",
    )
    pkgs = _packages(rows)
    expect(
        sorted(pkgs) == ["memory-profiler", "numpy", "pyyaml"],
        "the package field is the normalised name (lower case, each run of '-', '_', '.' as one '-'): expected "
        f"rows for 'memory-profiler', 'numpy' and 'pyyaml'; got {pkgs}",
    )
    expect(
        pkgs == ["memory-profiler", "numpy", "pyyaml"], f"rows are sorted by the (normalised) package name; got {pkgs}"
    )
    expect(
        [r["kind"] for r in rows] == ["missing", "differs", "differs"],
        f"memory-profiler is missing, numpy and pyyaml differ; got kinds {[r['kind'] for r in rows]}",
    )


@check(LAB, "versions are compared as versions, not as text")
def check_versions(pin_drift):
    same = [("1.0", "1.0.0"), ("2.13", "2.13.0"), ("2.13.0", "2.13.0+cpu"), ("1.26.4", "1.26.4+local.build1")]
    for pinned, inst in same:
        rows = _rows(pin_drift, {"pkg": inst}, {"pkg": pinned}, f"pinned {pinned}, installed {inst}")
        expect(
            rows == [],
            f"pinned {pinned!r}, installed {inst!r}: the same version to pip (trailing zeros do not "
            "count, and a local label after '+' such as a CPU build tag still satisfies the pin): no "
            f"row expected; got {rows!r}",
        )
    # the same versions in spellings pip accepts but does not write: a leading v, a separator before a pre- or
    # post-release, upper case, a long form, leading zeros; on either side
    same = [
        ("2.0rc1", "2.0.0-RC1"),
        ("1.0", "v1.0"),
        ("1.0.post1", "1.0-1"),
        ("1.0a1", "1.0.alpha1"),
        ("2.1", "02.01"),
        ("1.0.dev3", "1.0-dev3"),
        ("v3.2", "3.2.0"),
        ("1.4.0-RC2", "1.4rc2+cu121"),
    ]
    for pinned, inst in same:
        rows = _rows(pin_drift, {"pkg": inst}, {"pkg": pinned}, f"pinned {pinned}, installed {inst}")
        expect(
            rows == [],
            f"pinned {pinned!r}, installed {inst!r}: the same version to pip, spelled another way "
            "(pip reads a leading 'v', '-RC1' as 'rc1', '-1' as '.post1', 'alpha' as 'a', '02' as '2'): "
            f"no row expected; got {rows!r}. Parse both with packaging.version.Version rather than "
            "tidying the text yourself",
        )
    differ = [
        ("1.1", "1.10"),
        ("2.0", "2.0rc1"),
        ("2.0.1", "2.0rc1"),
        ("0.61.0", "0.61.1"),
        ("2.13.0", "2.12.0+cpu"),
        ("1.0", "1.0.post1"),
        ("2.0", "2.0.0-RC1"),
        ("V1.2", "1.2-post3"),
        ("1.0", "1.0.dev3"),
    ]
    for pinned, inst in differ:
        rows = _rows(pin_drift, {"pkg": inst}, {"pkg": pinned}, f"pinned {pinned}, installed {inst}")
        expect(
            len(rows) == 1 and rows[0]["kind"] == "differs",
            f"pinned {pinned!r}, installed {inst!r}: different versions, so one 'differs' row expected; got {rows!r}",
        )
        expect(
            rows[0]["installed"] == inst and rows[0]["pinned"] == pinned,
            f"pinned {pinned!r}, installed {inst!r}: report both versions exactly as given (nothing stripped); "
            f"got pinned {rows[0]['pinned']!r}, installed {rows[0]['installed']!r}",
        )


# --------------------------------------------------------------------------- the differential check (issue 42)


def _reference_pin_drift(installed: dict, pins: dict) -> list[dict]:
    """The contract, written with packaging (what pip uses): canonical names, versions compared as versions."""
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    have = {canonicalize_name(name): version for name, version in installed.items()}
    rows = []
    for name, pinned in pins.items():
        package, version = canonicalize_name(name), have.get(canonicalize_name(name))
        if version is None:
            rows.append({"package": package, "pinned": pinned, "installed": None, "kind": "missing"})
        elif Version(Version(version).public) != Version(pinned):
            rows.append({"package": package, "pinned": pinned, "installed": version, "kind": "differs"})
    return sorted(rows, key=lambda row: row["package"])


# distinct to pip once normalised; several sort differently as written than normalised
_NAMES = (
    "numpy",
    "scikit-learn",
    "ruamel.yaml",
    "typing_extensions",
    "PyYAML",
    "zope.interface",
    "jupyter-book",
    "a",
    "z9",
    "Memory_Profiler",
    "torch",
    "nvidia-cuda-runtime-cu12",
)


_RUNS = ("-", "_", ".", "--", "_-", "-.", "._", "-_.", "___")  # any run of separators is one '-' to pip
_LOCALS = (None, "cpu", "cu121", "local.build1", "1")
_MOVES = ("last", "more", "ten", "pre", "post", "dev", "epoch")


def _pick(options, style):
    return options[style % len(options)], style // len(options)


def _spell_name(name: str, style: int) -> str:
    """One way to write `name` that pip reads as the same: letters in either case, any run of separators."""
    mask, style = _pick((0, -1, 0b1010101, style), style)
    out = []
    for i, ch in enumerate(name):
        if ch in "-_.":
            run, style = _pick(_RUNS, style)
            out.append(run)
        else:
            out.append(ch.upper() if mask >> i & 1 else ch.lower())
    return "".join(out)


def _spell_version(rel, pre, post, dev, epoch, local, style: int) -> str:
    """One spelling of a version: leading zeros, a 'v', other separators and words, trailing zeros (1.0 == 1.0.0).
    `style` picks them all; 0, where a failing input shrinks to, is the plain spelling."""
    padded, style = _pick([None, *range(len(rel))], style)
    zeros, style = _pick((0, 1, 2), style)
    parts = [("0" if i == padded else "") + str(n) for i, n in enumerate(rel)] + ["0"] * zeros
    prefix, style = _pick(("", "v", "V"), style)
    text = prefix + (f"{epoch}!" if epoch else "") + ".".join(parts)
    if pre:
        words = {"a": ("a", "alpha", "A"), "b": ("b", "beta", "B"), "rc": ("rc", "RC", "c", "pre", "preview")}
        sep, style = _pick(("", ".", "-", "_"), style)
        word, style = _pick(words[pre[0]], style)
        text += sep + word + str(pre[1])
    if post is not None:
        spelled, style = _pick((f".post{post}", f"post{post}", f"-{post}", f"-post{post}", f".r{post}"), style)
        text += spelled
    if dev is not None:
        spelled, style = _pick((f".dev{dev}", f"dev{dev}", f"-dev{dev}"), style)
        text += spelled
    return text + ("+" + local if local else "")


def _package(drawn) -> tuple[str, str, str, str | None]:
    """(name as pinned, name as installed, pinned version, installed version or None) from one drawn tuple."""
    i, rel, pre, post, dev, epoch, how, move, styles, local = drawn
    name = _NAMES[i]
    pinned = _spell_version(rel, pre, post, dev, epoch, None, styles[0])
    if how == 0:
        installed = None
    elif how in (1, 2):  # the same version, spelled another way; with a local label (+cpu) or not
        installed = _spell_version(rel, pre, post, dev, epoch, _LOCALS[local] if how == 2 else None, styles[1])
    else:  # another version near the pinned one: one field moved
        move = _MOVES[move]
        if move == "last":
            rel = [*rel[:-1], rel[-1] + 1 if rel[-1] == 0 or styles[2] % 2 else rel[-1] - 1]
        elif move == "more":
            rel = [*rel, *([0] * (3 - len(rel))), 1 + styles[2] % 3]  # 1.2.3.4 is not 1.2.3
        elif move == "ten":
            rel = [*rel[:-1], rel[-1] * 10 or 10]  # 1.10 is not 1.1
        elif move == "pre":
            pre = None if pre else ("rc", 1)
        elif move == "post":
            post = None if post is not None else 1
        elif move == "dev":
            dev = None if dev is not None else 0
        else:
            epoch = 1 - epoch
        installed = _spell_version(rel, pre, post, dev, epoch, _LOCALS[local], styles[1])
    return _spell_name(name, styles[3]), _spell_name(name, styles[4]), pinned, installed


def _environments():
    """Hypothesis: (installed, pins) - names spelled any way pip reads as the same, versions spelled any way pip
    accepts, the same or near each other, release numbers past 2**31, epochs, local labels, unpinned extras, and
    the installed dict in another order than the pins. Every draw is a fixed-shape tuple, built once (fast)."""
    from hypothesis import strategies as st

    number = st.one_of(st.integers(0, 12), st.sampled_from([2024, 2**31 - 1, 2**31, 2**31 + 1, 2**32]))
    package = st.tuples(
        st.integers(0, len(_NAMES) - 1),
        st.lists(number, min_size=1, max_size=4),
        st.one_of(st.none(), st.tuples(st.sampled_from(["a", "b", "rc"]), st.integers(0, 3))),
        st.one_of(st.none(), st.integers(0, 3)),
        st.one_of(st.none(), st.integers(0, 3)),
        st.sampled_from([0, 0, 0, 1]),
        st.integers(0, 4),  # 0 missing, 1 same, 2 same + local label, 3-4 another version
        st.integers(0, len(_MOVES) - 1),
        st.tuples(*[st.integers(0, 2**40)] * 5),
        st.integers(0, len(_LOCALS) - 1),
    )

    @st.composite
    def draw(d):
        drawn = d(st.lists(package, max_size=5, unique_by=lambda t: t[0]))
        extras = d(st.lists(st.integers(0, len(_NAMES) - 1), max_size=2, unique=True))
        order = d(st.integers(0, 3))
        pins, installed = {}, {}
        for t in drawn:
            as_pinned, as_installed, pinned, version = _package(t)
            pins[as_pinned] = pinned
            if version is not None:
                installed[as_installed] = version
        for i in extras:
            if i not in {t[0] for t in drawn}:
                installed[_spell_name(_NAMES[i], i)] = "1.0"  # installed, never pinned: no row
        keys = list(installed)
        keys = [keys, keys[::-1], sorted(keys), keys[1:] + keys[:1]][order]
        return {k: installed[k] for k in keys}, pins

    return draw()


@check(LAB, "agrees with pip's rules on every environment tried")
def check_same_as_reference(pin_drift):
    same_as_reference(
        pin_drift,
        _reference_pin_drift,
        _environments(),
        describe=lambda installed, pins: f"installed={installed!r}, pins={pins!r}",
        compare=exactly,
        edges=[
            ({}, {}),
            ({"Pkg": "1.0"}, {}),
            ({}, {"Zed_Pkg": "2.0"}),
            ({"pkg": "2024.1.2147483648"}, {"PKG": "2024.1.2147483649"}),
            ({"pkg": "1.2.3.4"}, {"pkg": "1.2.3.5"}),
            ({"a": "2.0"}, {"a": "1.0", "b": "1.0"}),  # a differs, b missing: rows by package, not by kind
        ],
        arg_names=("installed", "pins"),
        examples=200,
    )
