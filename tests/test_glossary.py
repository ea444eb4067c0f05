"""The glossary: no term used before the notebook that defines it, in reading order, and a page in the book."""

from __future__ import annotations

from pathlib import Path

import nbformat
import yaml

from ailab import book as bk
from ailab import glossary as gl

ROOT = Path(__file__).resolve().parent.parent


def test_no_term_is_used_before_its_definition():
    problems = gl.problems(bk.load_book(ROOT / "book.yml"), ROOT)
    assert not problems, "\n".join(problems)


def test_the_glossary_names_the_terms_a_learner_meets():
    names = " ".join(t.term for t in gl.terms(bk.load_book(ROOT / "book.yml")))
    for term in ("TTFT", "TPOT", "ITL", "goodput", "prefill", "decode", "seat", "block", "open loop", "closed loop"):
        assert term in names


def _course(tmp_path: Path, first: str, second: str, where: str = "b.ipynb") -> tuple[dict, Path]:
    for name, text in (("a.ipynb", first), ("b.ipynb", second)):
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_markdown_cell(text),
            nbformat.v4.new_code_cell("ttft = 1  # TTFT in code is not read"),
        ]
        nbformat.write(nb, str(tmp_path / name))
    book = {
        "parts": [{"id": "p", "chapters": [{"id": "a", "title": "A", "notebook": "a.ipynb"}]}]
        + [{"id": "q", "chapters": [{"id": "b", "title": "B", "notebook": "b.ipynb"}]}],
        "glossary": [{"term": "TTFT", "match": r"\bTTFT\b", "where": where, "says": "Time to first token."}],
    }
    return book, tmp_path


def test_a_term_used_before_its_definition_is_named(tmp_path):
    book, root = _course(tmp_path, "Watch the TTFT.", "**TTFT** (time to first token) is ...")
    assert gl.problems(book, root) == ["'TTFT' is used in a.ipynb (cell 0) before b.ipynb defines it"]


def test_a_first_use_that_is_not_a_definition_is_named(tmp_path):
    book, root = _course(tmp_path, "Nothing here.", "The TTFT grows.")
    (problem,) = gl.problems(book, root)
    assert "does not define it" in problem and "bold" in problem
    book, root = _course(tmp_path, "Nothing here.", "The **TTFT** (time to first token) grows.")
    assert gl.problems(book, root) == []


def test_an_unused_term_and_a_bad_entry_are_named(tmp_path):
    book, root = _course(tmp_path, "Nothing.", "Nothing either.")
    assert "used nowhere" in gl.problems(book, root)[0]
    book["glossary"][0]["match"] = "(unclosed"
    assert "not a regular expression" in gl.problems(book, root)[0]
    del book["glossary"][0]["says"]
    assert "lacks says" in gl.problems(book, root)[0]
    book, root = _course(tmp_path, "x", "y", where="c.ipynb")
    assert "not in book.yml's chapters" in gl.problems(book, root)[0]


def test_the_book_has_a_glossary_page(tmp_path):
    book = bk.check_book(ROOT / "book.yml")
    src = bk.write_jupyter_book(book, ROOT, tmp_path / "src")
    page = (src / "glossary.md").read_text(encoding="utf-8")
    for t in gl.terms(book):
        assert f"**{t.term}**" in page and t.where in page
    toc = yaml.safe_load((src / "_toc.yml").read_text())
    assert toc["parts"][-1] == {"caption": "Glossary", "chapters": [{"file": "glossary"}]}
