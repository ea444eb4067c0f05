"""The pin-drift exercise's checks pass the right answer and reject plausible wrong ones.

pin_drift(installed, pins) -> list of {"package", "pinned", "installed", "kind"}
| question | what the checks try |
|---|---|
| which input varies each field | a differing version (kind differs, both strings), a missing package (installed None, kind missing), a match (no row), an unpinned install (no row), each alone |
| boundaries | no pins; nothing installed; a single pin; 1.0 against 1.0.0; a release candidate against its release; a local label (+cpu) |
| a spelling the notes never show | names in other cases and separators and runs of them, on either side; versions pip accepts but does not write (v1.0, 2.0.0-RC1, 1.0-1, 1.0.alpha1, 02.01), on either side |
| order or ties | pins given out of order; a written name that sorts differently from its normalised one; pinned versions that sort differently from names |
| errors: type and message | - (nothing to refuse); the inputs left as they were |
| policy: which item | which packages get a row: only pinned ones that drifted |

Each wrong answer is one class of mistake (versions compared as text, names compared as written or only
lower-cased, rows for matches or for unpinned packages, a missing package dropped or reported with a made-up
version, the wrong sort key, a version string rewritten); each is rejected with the message that names it.
"""

import re

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from ailab.labs import LabCheckFailed
from ailab.labs import ex_pin_drift as L


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_drift(installed, pins):
    have = {norm(k): v for k, v in installed.items()}
    rows = []
    for name, pinned in pins.items():
        inst = have.get(norm(name))
        if inst is None:
            rows.append({"package": norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        elif Version(Version(inst).public) != Version(pinned):
            rows.append({"package": norm(name), "pinned": pinned, "installed": inst, "kind": "differs"})
    return sorted(rows, key=lambda r: r["package"])


def pin_drift_alt(installed, pins):
    """Also right: packaging's own helpers and a specifier."""
    from packaging.specifiers import SpecifierSet

    have = {canonicalize_name(k): v for k, v in installed.items()}
    out = []
    for name in sorted(pins, key=canonicalize_name):
        key, inst = canonicalize_name(name), have.get(canonicalize_name(name))
        if inst is None or not SpecifierSet(f"=={pins[name]}").contains(inst, prereleases=True):
            out.append(
                {
                    "package": key,
                    "pinned": pins[name],
                    "installed": inst,
                    "kind": "missing" if inst is None else "differs",
                }
            )
    return out


def _generic(
    installed,
    pins,
    *,
    name=norm,
    same=lambda a, b: Version(Version(a).public) == Version(b),
    missing=None,
    report_missing=True,
    key=lambda r: r["package"],
    report_same=False,
    show=lambda v: v,
):
    have = {name(k): v for k, v in installed.items()}
    rows = []
    for pkg, pinned in pins.items():
        inst = have.get(name(pkg))
        if inst is None:
            if report_missing:
                rows.append({"package": name(pkg), "pinned": pinned, "installed": missing, "kind": "missing"})
        elif report_same or not same(inst, pinned):
            rows.append({"package": name(pkg), "pinned": pinned, "installed": show(inst), "kind": "differs"})
    return sorted(rows, key=key)


def text_compare(installed, pins):
    return _generic(installed, pins, same=lambda a, b: a == b)


def digits_compare(installed, pins):
    """A hand-made parser: the numbers in the public version, padded with zeros (rc1 reads as .1)."""

    def nums(v):
        n = [int(x) for x in re.findall(r"\d+", v.split("+")[0])]
        return n + [0] * (6 - len(n))

    return _generic(installed, pins, same=lambda a, b: nums(a) == nums(b))


def strip_local_only(installed, pins):
    """Drops '+cpu' but still compares text: 1.0 vs 1.0.0 is reported."""
    return _generic(installed, pins, same=lambda a, b: a.split("+")[0] == b)


def names_as_written(installed, pins):
    return _generic(installed, pins, name=lambda s: s)


def names_lowercased(installed, pins):
    return _generic(installed, pins, name=str.lower)


def names_char_by_char(installed, pins):
    """Replaces each separator on its own: a run of them is not one '-'."""
    return _generic(installed, pins, name=lambda s: s.lower().replace("_", "-").replace(".", "-"))


def names_no_dots(installed, pins):
    return _generic(installed, pins, name=lambda s: s.lower().replace("_", "-"))


def package_as_written(installed, pins):
    rows = pin_drift(installed, pins)
    written = {norm(k): k for k in pins}
    return [{**r, "package": written[r["package"]]} for r in rows]


def missing_dropped(installed, pins):
    return _generic(installed, pins, report_missing=False)


def missing_as_text(installed, pins):
    return _generic(installed, pins, missing="not installed")


def missing_is_differs(installed, pins):
    return [{**r, "kind": "differs"} for r in pin_drift(installed, pins)]


def unsorted(installed, pins):
    return _generic(installed, pins, key=lambda r: 0)


def sorted_by_pinned_version(installed, pins):
    return _generic(installed, pins, key=lambda r: r["pinned"])


def sorted_by_written_name(installed, pins):
    written = {norm(k): k for k in pins}
    return _generic(installed, pins, key=lambda r: written[r["package"]])


def every_pin_reported(installed, pins):
    return _generic(installed, pins, report_same=True)


def unpinned_reported(installed, pins):
    rows = pin_drift(installed, pins)
    pinned = {norm(k) for k in pins}
    rows += [
        {"package": norm(k), "pinned": None, "installed": v, "kind": "differs"}
        for k, v in installed.items()
        if norm(k) not in pinned
    ]
    return sorted(rows, key=lambda r: r["package"])


def installed_stripped(installed, pins):
    return _generic(installed, pins, show=lambda v: Version(v).public)


def pops_matches(installed, pins):
    """Removes what it has checked from the caller's dict."""
    rows = pin_drift(installed, pins)
    for k in list(installed):
        if norm(k) in {norm(p) for p in pins}:
            del installed[k]
    return rows


def returns_names(installed, pins):
    return [r["package"] for r in pin_drift(installed, pins)]


def extra_field(installed, pins):
    return [{**r, "ok": False} for r in pin_drift(installed, pins)]


def stub(*a, **k):
    raise NotImplementedError("pin_drift() is not implemented yet")


CHECKS = [L.check_rows, L.check_names, L.check_versions]


@pytest.mark.parametrize("fn", [pin_drift, pin_drift_alt])
def test_right_answers_pass(fn):
    for chk in CHECKS:
        chk(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_versions, text_compare, r"pinned '1\.0', installed '1\.0\.0': the same version"),
        (
            L.check_versions,
            digits_compare,
            r"pinned '2\.0\.1', installed '2\.0rc1': different versions|spelled another",
        ),
        (L.check_versions, strip_local_only, r"pinned '1\.0', installed '1\.0\.0'"),
        (L.check_versions, installed_stripped, r"installed '2\.12\.0\+cpu': report both versions exactly as given"),
        (L.check_names, names_as_written, r"are the same packages to pip"),
        (L.check_names, names_lowercased, r"are the same packages to pip"),
        (L.check_names, names_no_dots, r"are the same packages to pip"),
        (L.check_names, names_char_by_char, r"a run of '-', '_', '\.' counts as one '-'"),
        (L.check_names, package_as_written, r"the package field is the normalised name"),
        (L.check_names, sorted_by_written_name, r"sorted by the \(normalised\) package name"),
        (L.check_rows, missing_dropped, r"rows should be for scipy \(missing\) and torch \(differs\); got \['torch'\]"),
        (L.check_rows, missing_as_text, r"its installed field should be None; got 'not installed'"),
        (L.check_rows, missing_is_differs, r"kind should be 'missing'; got 'differs'"),
        (L.check_rows, unsorted, r"sorted by package \(scipy before torch\)"),
        (L.check_rows, sorted_by_pinned_version, r"every pin is a 'missing' row, sorted by package"),
        (L.check_rows, every_pin_reported, r"numpy and plotly are installed at their pinned versions"),
        (L.check_rows, unpinned_reported, r"requests is installed but not pinned"),
        (L.check_rows, pops_matches, r"changed the dicts it was given"),
        (L.check_rows, returns_names, r"each row should be a dict; got str"),
        (L.check_rows, extra_field, r"exactly the keys"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def reports_pips_spelling(installed, pins):
    """Compares right, but writes both versions back in pip's normal form (2.0.0-RC1 -> 2.0.0rc1)."""
    rows = pin_drift(installed, pins)
    return [
        {
            **r,
            "pinned": str(Version(r["pinned"])),
            "installed": None if r["installed"] is None else str(Version(r["installed"])),
        }
        for r in rows
    ]


def tidies_text(installed, pins):
    """A hand-made comparison: drops '+local', then trailing '.0's, then compares text."""

    def tidy(v):
        v = v.split("+")[0].lower()
        while v.endswith(".0"):
            v = v[:-2]
        return v

    return _generic(installed, pins, same=lambda a, b: tidy(a) == tidy(b))


def parses_after_stripping_v(installed, pins):
    """Strips a leading 'v' by hand and compares the rest as text after dropping trailing zeros."""

    def tidy(v):
        v = v.lstrip("vV").split("+")[0]
        parts = v.split(".")
        while len(parts) > 1 and parts[-1] == "0":
            parts.pop()
        return ".".join(parts)

    return _generic(installed, pins, same=lambda a, b: tidy(a) == tidy(b))


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            L.check_versions,
            reports_pips_spelling,
            r"pinned '2.0', installed '2.0.0-RC1': report both versions exactly as "
            r"given",
        ),
        (
            L.check_versions,
            tidies_text,
            r"pinned '2.0rc1', installed '2.0.0-RC1': the same version to pip, spelled "
            r"another way",
        ),
        (L.check_versions, parses_after_stripping_v, r"installed '2.0.0-RC1': the same version to pip, spelled"),
    ],
)
def test_spellings_pip_accepts_but_does_not_write(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check (issue 42)


def three_components(installed, pins):
    """Units and rounding: each release padded or cut to major.minor.patch, so 1.2.3.4 is taken for 1.2.3.5."""

    def key(v):
        v = Version(v)
        return v.epoch, (*v.release, 0, 0, 0)[:3], v.pre, v.post, v.dev

    return _generic(installed, pins, same=lambda a, b: key(a) == key(b))


def rstrip_zeros(installed, pins):
    """Units and rounding: trailing zeros dropped with rstrip('.0'), which also eats the 0 of 10 (1.10 -> 1.1)."""
    return _generic(
        installed,
        pins,
        same=lambda a, b: Version(a.split("+")[0].rstrip(".0") or "0") == Version(b.rstrip(".0") or "0"),
    )


def only_older_is_drift(installed, pins):
    """Boundaries: reports a package only when it is behind its pin (<), not when it is ahead (!=)."""
    return _generic(installed, pins, same=lambda a, b: not Version(Version(a).public) < Version(b))


def common_prefix_only(installed, pins):
    """Boundaries: compares the release numbers pairwise with zip, so 1.2 equals 1.2.5 (the shorter one ends it)."""

    def same(a, b):
        va, vb = Version(Version(a).public), Version(b)
        return all(x == y for x, y in zip(va.release, vb.release)) and (va.pre, va.post, va.dev) == (
            vb.pre,
            vb.post,
            vb.dev,
        )

    return _generic(installed, pins, same=same)


def normalises_in_place(installed, pins):
    """State: renames the caller's installed keys to their normalised names (the dict it was given changes)."""
    for k in list(installed):
        installed[norm(k)] = installed.pop(k)
    return pin_drift(installed, pins)


_LOOKUP = {}


def caches_the_lookup(installed, pins):
    """State: builds the normalised lookup of installed packages once ("it is slow") and keeps it between calls."""
    if not _LOOKUP:
        _LOOKUP.update({norm(k): v for k, v in installed.items()})
        _LOOKUP["_built"] = True
    return pin_drift({k: v for k, v in _LOOKUP.items() if k != "_built"}, pins)


def grouped_by_kind(installed, pins):
    """Order: the missing rows first, then the differing ones, each sorted by package."""
    return sorted(pin_drift(installed, pins), key=lambda r: (r["kind"] != "missing", r["package"]))


def collapses_pairs_once(installed, pins):
    """Parsing: each separator becomes '-', then '--' is replaced once: a run of three leaves '--'."""
    return _generic(installed, pins, name=lambda s: re.sub(r"[-_.]", "-", s).lower().replace("--", "-"))


NEW_WRONG = [
    three_components,
    rstrip_zeros,
    only_older_is_drift,
    common_prefix_only,
    normalises_in_place,
    caches_the_lookup,
    grouped_by_kind,
    collapses_pairs_once,
]


@pytest.mark.parametrize("fn", [pin_drift, pin_drift_alt])
def test_right_answers_agree_with_the_reference(fn):
    L.check_same_as_reference(fn)


def test_the_reference_passes_every_check():
    for chk in CHECKS:
        chk(L._reference_pin_drift)


OLD_WRONG = [
    text_compare,
    digits_compare,
    strip_local_only,
    names_as_written,
    names_lowercased,
    names_char_by_char,
    names_no_dots,
    package_as_written,
    missing_dropped,
    missing_as_text,
    missing_is_differs,
    unsorted,
    sorted_by_pinned_version,
    sorted_by_written_name,
    every_pin_reported,
    unpinned_reported,
    installed_stripped,
    pops_matches,
    returns_names,
    extra_field,
    reports_pips_spelling,
    tidies_text,
    parses_after_stripping_v,
]


@pytest.mark.parametrize("wrong", OLD_WRONG + NEW_WRONG)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    _LOOKUP.clear()
    with pytest.raises(LabCheckFailed, match="where the two differ|changed its input|on installed="):
        L.check_same_as_reference(wrong)


@pytest.mark.parametrize("wrong", [three_components, grouped_by_kind, collapses_pairs_once])
def test_the_old_checks_miss_what_the_differential_check_catches(wrong):
    """These got past the hand-picked cases: a fourth release number, a shorter release, missing rows first,
    a run of three separators."""
    for chk in CHECKS:
        chk(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(grouped_by_kind)
    assert "installed=" in str(e.value) and "pins=" in str(e.value)
    assert "where the reference's is" in str(e.value)


def test_the_stub_fails_the_differential_check():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)
