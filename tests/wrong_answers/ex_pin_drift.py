"""Independent wrong answers for ex_pin_drift, written from labs/0_orientation/ex_pin_drift.ipynb's contract alone."""

import re

from packaging.version import Version


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_drift(installed, pins):
    have = {_norm(name): version for name, version in installed.items()}
    rows = []
    for name, pinned in pins.items():
        version = have.get(_norm(name))
        if version is None:
            rows.append({"package": _norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        elif Version(Version(version).public) != Version(pinned):
            rows.append({"package": _norm(name), "pinned": pinned, "installed": version, "kind": "differs"})
    return sorted(rows, key=lambda row: row["package"])


def each_separator_becomes_dash(installed, pins):
    """Replaces every separator with '-' one by one, so a run like '__' becomes '--' instead of one '-'."""

    # differs on: installed={}, pins={"zope__interface": "1.0"} -> right "zope-interface", wrong "zope--interface"
    def norm(name):
        return re.sub(r"[-_.]", "-", name).lower()

    have = {norm(name): version for name, version in installed.items()}
    rows = []
    for name, pinned in pins.items():
        version = have.get(norm(name))
        if version is None:
            rows.append({"package": norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        elif Version(Version(version).public) != Version(pinned):
            rows.append({"package": norm(name), "pinned": pinned, "installed": version, "kind": "differs"})
    return sorted(rows, key=lambda row: row["package"])


def compares_release_numbers_only(installed, pins):
    """Compares Version(...).release tuples, which drops the local label but also a pre-release like rc1."""
    # differs on: installed={"x": "2.0rc1"}, pins={"x": "2.0"} -> right one "differs" row, wrong []
    have = {_norm(name): version for name, version in installed.items()}
    rows = []
    for name, pinned in pins.items():
        version = have.get(_norm(name))
        if version is None:
            rows.append({"package": _norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        else:
            a, b = Version(version).release, Version(pinned).release
            n = max(len(a), len(b))
            if a + (0,) * (n - len(a)) != b + (0,) * (n - len(b)):
                rows.append({"package": _norm(name), "pinned": pinned, "installed": version, "kind": "differs"})
    return sorted(rows, key=lambda row: row["package"])


def normalises_installed_in_place(installed, pins):
    """Rewrites the caller's `installed` dict with normalised names instead of building a separate lookup."""
    # differs on: installed={"PyYAML": "6.0"}, pins={} -> caller's dict becomes {"pyyaml": "6.0"}
    items = list(installed.items())
    installed.clear()
    for name, version in items:
        installed[_norm(name)] = version
    rows = []
    for name, pinned in pins.items():
        version = installed.get(_norm(name))
        if version is None:
            rows.append({"package": _norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        elif Version(Version(version).public) != Version(pinned):
            rows.append({"package": _norm(name), "pinned": pinned, "installed": version, "kind": "differs"})
    return sorted(rows, key=lambda row: row["package"])


def sorts_by_pin_spelling(installed, pins):
    """Sorts the rows by the pin's name as written in `pins`, not by the normalised package name."""
    # differs on: installed={}, pins={"Zope": "1", "attrs": "1"} -> right [attrs, zope], wrong [zope, attrs]
    have = {_norm(name): version for name, version in installed.items()}
    rows = []
    for name, pinned in sorted(pins.items()):
        version = have.get(_norm(name))
        if version is None:
            rows.append({"package": _norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        elif Version(Version(version).public) != Version(pinned):
            rows.append({"package": _norm(name), "pinned": pinned, "installed": version, "kind": "differs"})
    return rows


def reports_installed_without_local_label(installed, pins):
    """Reports the installed version after dropping '+cpu' (the parsed public version), not the string given."""
    # differs on: installed={"torch": "2.0+cpu"}, pins={"torch": "2.1"} -> right installed "2.0+cpu", wrong "2.0"
    have = {_norm(name): version for name, version in installed.items()}
    rows = []
    for name, pinned in pins.items():
        version = have.get(_norm(name))
        if version is None:
            rows.append({"package": _norm(name), "pinned": pinned, "installed": None, "kind": "missing"})
        else:
            public = Version(version).public
            if Version(public) != Version(pinned):
                rows.append({"package": _norm(name), "pinned": pinned, "installed": public, "kind": "differs"})
    return sorted(rows, key=lambda row: row["package"])


def nothing_installed_means_no_drift(installed, pins):
    """Returns early with no rows when `installed` is empty, as if there were nothing to compare."""
    # differs on: installed={}, pins={"a": "1"} -> right one "missing" row, wrong []
    if not installed:
        return []
    return pin_drift(installed, pins)


RIGHT = {"pin_drift": pin_drift}
WRONG = [
    ("pin_drift", each_separator_becomes_dash, "order/parsing"),
    ("pin_drift", compares_release_numbers_only, "misread prose"),
    ("pin_drift", normalises_installed_in_place, "state"),
    ("pin_drift", sorts_by_pin_spelling, "order/parsing"),
    ("pin_drift", reports_installed_without_local_label, "units/rounding"),
    ("pin_drift", nothing_installed_means_no_drift, "boundaries"),
]
