"""The course's glossary: each term defined where a learner first meets it, and listed on a page of its own.

book.yml's `glossary` gives each term the pattern that finds it in prose, the notebook that defines it, and one
or two sentences that say what it is. The rule a test holds the course to: in reading order (each chapter's
notebook, then its lab, then its exercise, as book.yml lists them), no markdown cell uses a term before the
notebook that defines it, and there the first cell that uses it writes it in bold (the definition). Code cells
are not read: a learner meets a term in the prose first, and the prose is what this can check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

_BOLD = re.compile(r"\*\*(.+?)\*\*", re.S)


@dataclass(frozen=True)
class Term:
    term: str  # as the glossary page shows it
    match: re.Pattern  # finds it in prose (case-sensitive unless the pattern says (?i))
    where: str  # the notebook (or lab) that defines it, as book.yml lists it
    says: str  # what it is, in one or two sentences


@dataclass(frozen=True)
class Use:
    path: str
    cell: int  # index among all the notebook's cells
    text: str  # the cell's markdown


def terms(book: dict) -> list[Term]:
    """The glossary as book.yml gives it. Raises ValueError naming an entry that is incomplete or whose pattern
    does not compile."""
    out = []
    for i, entry in enumerate(book.get("glossary") or []):
        missing = [k for k in ("term", "match", "where", "says") if not str(entry.get(k, "")).strip()]
        if missing:
            raise ValueError(f"glossary entry {i} ({entry.get('term', '?')}) lacks {', '.join(missing)}")
        try:
            pattern = re.compile(entry["match"])
        except re.error as e:
            raise ValueError(f"glossary entry {entry['term']!r}: its match is not a regular expression ({e})") from e
        out.append(Term(entry["term"], pattern, entry["where"], " ".join(entry["says"].split())))
    return out


def _chapters(book: dict):
    """book.yml's chapters in order (as ailab.book reads them; this module sits beside it and does not import it)."""
    for part in book.get("parts") or []:
        yield from part.get("chapters") or []


def reading_order(book: dict) -> list[str]:
    """Every page a learner reads, in order: each chapter's notebook, then its lab, then its exercise."""
    return [ch[key] for ch in _chapters(book) for key in ("notebook", "lab", "exercise") if ch.get(key)]


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def first_use(term: Term, book: dict, root: str | Path = ".", pages: dict | None = None) -> Use | None:
    """Where a learner first reads `term`. `pages` (path -> markdown cells) saves reading every notebook again
    for each term."""
    for rel in reading_order(book):
        cells = pages[rel] if pages is not None else markdown_cells(Path(root) / rel)
        for i, text in cells:
            if term.match.search(text):
                return Use(rel, i, text)
    return None


def defines(term: Term, text: str) -> bool:
    """Does this markdown write the term in bold (`**TTFT** (time to first token)`, `a **seat**`)?"""
    return any(term.match.search(span) for span in _BOLD.findall(text))


def problems(book: dict, root: str | Path = ".") -> list[str]:
    """Every term used before its definition, or defined where it is not first used, as sentences."""
    try:
        entries = terms(book)
    except ValueError as e:
        return [str(e)]
    order, out = reading_order(book), []
    pages = {rel: markdown_cells(Path(root) / rel) for rel in order}
    for t in entries:
        if t.where not in order:
            out.append(f"{t.term!r}: its definition's notebook {t.where} is not in book.yml's chapters")
            continue
        use = first_use(t, book, root, pages)
        if use is None:
            out.append(f"{t.term!r} is used nowhere in the course's prose: drop it from the glossary or fix its match")
        elif use.path != t.where:
            out.append(f"{t.term!r} is used in {use.path} (cell {use.cell}) before {t.where} defines it")
        elif not defines(t, use.text):
            out.append(
                f"{t.term!r}: the first cell of {t.where} that uses it (cell {use.cell}) does not define it "
                "(write it in bold, with what it means, where it first appears)"
            )
    return out


def page(book: dict) -> str:
    """The glossary page of the book: each term, what it is, and the chapter that first explains it."""
    titles = {}
    for ch in _chapters(book):
        for key in ("notebook", "lab", "exercise"):
            if ch.get(key):
                titles[ch[key]] = ch["title"]
    lines = ["# Glossary", "", "Each term as the course uses it, and the chapter where it is first explained.", ""]
    for t in sorted(terms(book), key=lambda t: t.term.lower()):
        lines += [f"**{t.term}**: {t.says} (first in [{titles.get(t.where, t.where)}]({t.where}))", ""]
    return "\n".join(lines)
