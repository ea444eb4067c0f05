"""ailab.show: the package's own code, as a chapter shows it, with the lines it came from."""

import inspect

import pytest

from ailab.show import show_code
from ailab.timing import interleaved


def test_a_function_is_shown_whole_with_its_file_and_lines():
    code = show_code(interleaved)
    lines, first = inspect.getsourcelines(interleaved)
    assert code.source == "".join(lines).rstrip("\n")
    assert code.path == "ailab/timing.py" and (code.first_line, code.last_line) == (first, first + len(lines) - 1)
    md = code._repr_markdown_()
    assert md.startswith(f"`ailab/timing.py, lines {first}-") and "```python\ndef interleaved(" in md
    assert str(code).startswith("# ailab/timing.py, lines")


def test_markers_cut_out_the_lines_a_chapter_teaches_and_dedent_them():
    whole = show_code(show_code)
    part = show_code(show_code, start="lines = [line.rstrip", stop="shown = lines")
    assert part.source.splitlines()[0].startswith("lines = [line.rstrip")  # dedented from the function body
    assert part.source.splitlines()[-1].startswith("shown = lines") and len(part.source.splitlines()) == 4
    assert whole.first_line < part.first_line <= part.last_line < whole.last_line
    assert part.last_line - part.first_line == 3


def test_a_marker_that_is_not_there_is_an_error_not_the_wrong_lines():
    with pytest.raises(ValueError, match="start 'no such line' is not in the source of show_code"):
        show_code(show_code, start="no such line")
    with pytest.raises(ValueError, match="stop 'def show_code' is not in the source"):
        show_code(show_code, start="target = ", stop="def show_code")  # only before start
    with pytest.raises(ValueError, match="no source to show for"):
        show_code(len)
