"""book.yml is the course map: it and the disk must agree, and it must be usable by Jupyter Book."""

import json
import os
import re
from pathlib import Path, PurePosixPath

import pytest
import yaml

from ailab import book as bk

ROOT = Path(__file__).resolve().parent.parent


def test_book_matches_disk():
    assert bk.validate(bk.load_book(ROOT / "book.yml"), ROOT) == []


def test_every_chapter_declares_goals_minutes_gpu_topics():
    b = bk.load_book(ROOT / "book.yml")
    assert [p["id"] for p in b["parts"]] == [
        "orientation",
        "hardware",
        "engine",
        "serving",
        "application",
        "generation",
    ]
    for _, ch in bk.chapters(b):
        assert 1 <= len(ch["goals"]) <= 3 and ch["minutes"] > 0 and isinstance(ch["gpu"], bool)
        assert ch["topics"] and set(ch["topics"]) <= set(bk.TOPICS)


def test_the_topics_are_defined_one_line_each():
    defined = bk.topics(bk.load_book(ROOT / "book.yml"))
    assert len(defined) == 32 and list(defined) == bk.TOPICS
    assert all(line.strip() and "\n" not in line and len(line) < 120 for line in defined.values())


def _texts():
    """Every file of the course whose words a reader sees: modules, notebooks, labs' sources, docs, the map."""
    for pattern in (
        "ailab/**/*.py",
        "notebooks/**/*.ipynb",
        "solutions/**/*.ipynb",
        "tests/*.py",
        "scripts/*",
        "*.md",
        "book.yml",
        "monitoring/*",
    ):
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and path.name != "test_book.py":
                yield path, path.read_text(encoding="utf-8", errors="replace")


def test_every_topic_cited_is_defined():
    defined, cited = set(bk.TOPICS), {}
    for path, text in _texts():
        for tid in bk.cited_topics(text):
            cited.setdefault(tid, []).append(path.relative_to(ROOT).as_posix())
    undefined = {tid: where for tid, where in cited.items() if tid not in defined}
    assert not undefined, f"topic IDs cited but not defined in book.yml's 'topics': {undefined}"
    assert len(cited) >= 25, (
        f"the citations were not found (only {sorted(cited)}): has the way they are written changed?"
    )


# One of the course's topic IDs as a learner would meet it in prose: "(topic S1)", "(E7)", "topics S3, S5".
LEARNER_TOPIC_ID = re.compile(
    r"(?<![\w/.-])(?:topics?\s+)?(?:" + "|".join(sorted(bk.TOPICS, key=len, reverse=True)) + r")(?![\w.])"
)


def test_no_topic_id_in_what_a_learner_reads():
    """Topic IDs are the maintainers' map (book.yml, the code, the docs); a learner cannot look one up, so the
    notebooks, solutions and labs say what they mean in words."""
    found = []
    for pattern in ("notebooks/**/*.ipynb", "solutions/**/*.ipynb", "labs/**/*.ipynb"):
        for path in sorted(ROOT.glob(pattern)):
            for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                if cell["cell_type"] != "markdown":
                    continue
                for m in LEARNER_TOPIC_ID.finditer("".join(cell["source"])):
                    found.append(f"{path.relative_to(ROOT)} cell {i}: {m.group(0)!r}")
    assert not found, "topic IDs in learner-facing text (say it in words):\n" + "\n".join(found)


def test_citations_are_read_with_their_ranges():
    assert bk.cited_topics("(topics S3-S11)") == {f"S{i}" for i in range(3, 12)}
    assert bk.cited_topics("a module (topic H1: where the bytes go), another (topics E1, E2 and A7)") == {
        "H1",
        "E1",
        "E2",
        "A7",
    }
    assert bk.cited_topics("topics: [H3, S2]") == set() and bk.cited_topics("topic Z9") == {"Z9"}


def _copy_course(tmp_path, book_text):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "a.ipynb").write_text("{}")
    (tmp_path / "book.yml").write_text(book_text)
    return tmp_path


CHAPTER = """title: t
parts:
  - id: p
    title: P
    chapters:
      - {id: a, title: A, notebook: NB, goals: [g], minutes: 5, gpu: false, topics: [H1]}
"""


def test_missing_file_is_named(tmp_path):
    root = _copy_course(tmp_path, CHAPTER.replace("NB", "notebooks/missing.ipynb"))
    with pytest.raises(bk.BookError) as e:
        bk.check_book(root / "book.yml")
    assert "notebooks/missing.ipynb does not exist" in str(e.value)
    assert "notebooks/a.ipynb is on disk but not listed" in str(e.value)


def test_bad_fields_and_topics_are_named(tmp_path):
    text = CHAPTER.replace("NB", "notebooks/a.ipynb").replace("minutes: 5", "minutes: soon").replace("[H1]", "[Z9]")
    problems = bk.validate(bk.load_book(_copy_course(tmp_path, text) / "book.yml"), tmp_path)
    assert any("'minutes' must be a int" in p for p in problems)
    assert any("unknown topic 'Z9'" in p for p in problems)
    assert any("no 'topics' list" in p for p in problems)
    text = CHAPTER.replace("NB", "notebooks/a.ipynb") + "topics: {H1: 'where memory goes', h2: ''}\n"
    (tmp_path / "b").mkdir()
    problems = bk.validate(bk.load_book(_copy_course(tmp_path / "b", text) / "book.yml"), tmp_path / "b")
    assert not any("unknown topic" in p for p in problems) and any("topic 'h2'" in p for p in problems)


def test_unreadable_book_is_a_clear_error(tmp_path):
    with pytest.raises(bk.BookError, match="does not exist"):
        bk.load_book(tmp_path / "book.yml")
    (tmp_path / "book.yml").write_text("parts: [unclosed")
    with pytest.raises(bk.BookError, match="not valid YAML"):
        bk.load_book(tmp_path / "book.yml")


def test_jupyter_book_toc_is_generated_from_the_map(tmp_path):
    b = bk.check_book(ROOT / "book.yml")
    src = bk.write_jupyter_book(b, ROOT, tmp_path / "src")
    toc = yaml.safe_load((src / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    listed = [p for _, ch in bk.chapters(b) for p in (ch["notebook"], ch.get("lab"), ch.get("exercise")) if p]
    assert files == [str(Path(p).with_suffix("")) for p in listed] + ["glossary"]
    assert all((src / p).is_file() for p in listed)
    assert yaml.safe_load((src / "_config.yml").read_text())["execute"]["execute_notebooks"] == "off"


def test_the_book_serves_plotly_itself_and_figures_render_as_html_for_it(tmp_path):
    """Offline: plotly.js is copied into the book once, and a static run renders figures as a <div> plus
    Plotly.newPlot with no CDN (the JSON mimetype a notebook stores cannot be drawn by a static page)."""
    import subprocess
    import sys

    src = bk.write_jupyter_book(bk.check_book(ROOT / "book.yml"), ROOT, tmp_path / "src")
    sphinx = yaml.safe_load((src / "_config.yml").read_text())["sphinx"]["config"]
    assert sphinx["html_js_files"] == ["plotly.min.js"] and (src / "_static" / "plotly.min.js").stat().st_size > 1e6
    # code lines longer than the book's column wrap rather than being cut
    assert sphinx["html_css_files"] == ["ailab.css"] and "pre-wrap" in (src / "_static" / "ailab.css").read_text()
    code = (
        "import ailab, plotly.io as pio, plotly.graph_objects as go; "
        "b = pio.renderers[pio.renderers.default].to_mimebundle(go.Figure(go.Bar(y=[1, 2])).to_dict()); "
        "print(sorted(b), 'Plotly.newPlot' in b['text/html'], 'http' in b['text/html'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "AILAB_STATIC": "1"},
    ).stdout.strip()
    assert out == "['text/html'] True False", out


def test_an_exercise_needs_its_solution_and_both_must_exist(tmp_path):
    b = bk.load_book(ROOT / "book.yml")
    ch = next(c for _, c in bk.chapters(b) if not c.get("lab"))
    ch["exercise"] = "labs/0_orientation/ex_nope.ipynb"
    ch.pop("exercise_solution", None)
    problems = bk.validate(b, ROOT)
    assert any("needs its exercise_solution" in p for p in problems)
    assert any("ex_nope.ipynb does not exist" in p for p in problems)
    assert ch["id"] not in bk.ungraded_chapters(b)


def test_every_chapter_page_opens_with_a_header_from_the_map(tmp_path):
    import nbformat

    b = bk.check_book(ROOT / "book.yml")
    src = bk.write_jupyter_book(b, ROOT, tmp_path / "src", execute="cache")
    for _, ch in bk.chapters(b):
        nb = nbformat.read(str(src / ch["notebook"]), as_version=4)
        header = next(c for c in nb.cells if c.get("id") == "ailab-book-header")
        assert f"**{ch['minutes']} minutes**" in header.source and all(g in header.source for g in ch["goals"])
        names = bk.topics(b)
        assert all(names[t] in header.source for t in ch["topics"])
        assert not bk.cited_topics(header.source) and not LEARNER_TOPIC_ID.search(header.source)
        for key in ("lab", "exercise"):
            if ch.get(key):
                assert f"ailab labs check {ch[key]}" in header.source
    config = yaml.safe_load((src / "_config.yml").read_text())["execute"]
    assert config["execute_notebooks"] == "cache"
    for _, ch in bk.chapters(b):  # myst-nb matches each pattern against the absolute path, from the right
        for key, excluded in (("notebook", False), ("lab", True), ("exercise", True)):
            if ch.get(key):
                path = PurePosixPath((src / ch[key]).as_posix())
                assert any(path.match(p) for p in config["exclude_patterns"]) == excluded, path
    assert (src / "monitoring" / "alerts.yml").is_file() and (src / "book.yml").is_file()  # what notebooks read
    assert bk.validate(bk.load_book(src / "book.yml"), src) == []  # the tour checks the map where it runs


def test_every_chapter_has_a_lab_or_an_exercise():
    assert bk.ungraded_chapters(bk.check_book(ROOT / "book.yml")) == []
