"""The package's own code, shown in a notebook at the point where a chapter teaches it.

A chapter runs its mechanism from `ailab` (so that the figures are the package's), and there shows the function
that does it: the learner reads the code that just ran, not a copy that could drift from it. In JupyterLab the
result renders as highlighted Python under the file and line numbers it came from; printed, it is plain text.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Code:
    source: str
    path: str  # relative to the project when it is ailab's own file
    first_line: int
    last_line: int

    @property
    def where(self) -> str:
        return f"{self.path}, lines {self.first_line}-{self.last_line}"

    def _repr_markdown_(self) -> str:
        return f"`{self.where}`\n\n```python\n{self.source}\n```"

    def __str__(self) -> str:
        return f"# {self.where}\n{self.source}"


def _line_index(lines: list[str], marker: str, after: int, what: str, obj_name: str) -> int:
    for i in range(after, len(lines)):
        if marker in lines[i]:
            return i
    raise ValueError(f"{what} {marker!r} is not in the source of {obj_name} (after its line {after + 1})")


def show_code(obj, start: str | None = None, stop: str | None = None) -> Code:
    """The source of `obj` (a function, a method or a class) with where it lives. With `start`, only the lines
    from the first one that contains `start`; with `stop`, up to and including the first line after that which
    contains `stop`. A marker that is not there is a ValueError, so a notebook never shows the wrong lines."""
    target = inspect.unwrap(obj)
    name = getattr(target, "__qualname__", repr(target))
    try:
        lines, first = inspect.getsourcelines(target)
        path = Path(inspect.getsourcefile(target) or "?").resolve()
    except (TypeError, OSError) as e:
        raise ValueError(f"no source to show for {name}: {e}") from e
    lines = [line.rstrip("\n") for line in lines]
    begin = _line_index(lines, start, 0, "start", name) if start is not None else 0
    end = _line_index(lines, stop, begin + 1, "stop", name) + 1 if stop is not None else len(lines)
    shown = lines[begin:end]
    indent = min((len(line) - len(line.lstrip()) for line in shown if line.strip()), default=0)
    try:
        where = str(path.relative_to(_PACKAGE_ROOT))
    except ValueError:
        where = str(path)
    return Code("\n".join(line[indent:] for line in shown), where, first + begin, first + end - 1)
