"""book.yml, the course map: load it, check it against the disk, and turn it into a Jupyter Book.

The Jupyter Book's _toc.yml and _config.yml are generated into build/ from book.yml, never
kept by hand, so the map and the book cannot disagree.
"""

from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import yaml

from ailab import glossary

ROOT_BOOK = Path(__file__).resolve().parent.parent / "book.yml"
CONTENT_DIRS = ("notebooks", "labs", "solutions")
REQUIRED = {"id": str, "title": str, "notebook": str, "goals": list, "minutes": int, "gpu": bool, "topics": list}


class BookError(ValueError):
    """book.yml is malformed or names a file that does not exist."""


def load_book(path: str | Path = "book.yml") -> dict:
    path = Path(path)
    if not path.is_file():
        raise BookError(f"{path} does not exist; run from the course's root folder")
    try:
        book = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise BookError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(book, dict) or not isinstance(book.get("parts"), list):
        raise BookError(f"{path} must be a mapping with a 'parts' list")
    return book


def topics(book: dict) -> dict[str, str]:
    """The course's topics, ID -> one line, as book.yml defines them (its top-level `topics`)."""
    found = book.get("topics")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


@functools.cache
def _course_topics() -> tuple[str, ...]:
    return tuple(topics(load_book(ROOT_BOOK)))


def __getattr__(name: str):
    if name == "TOPICS":  # the topic IDs of the course's own book.yml, read when first asked for
        return list(_course_topics())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_TOPIC_ID = r"[A-Z][0-9]+"
# "topic H3", "(topics H3, S2)", "topics S3-S11", "topics E1 and E2": the IDs a text cites.
CITATION = re.compile(rf"\btopics?:?\s+((?:{_TOPIC_ID})(?:\s*(?:,|-|–|and)\s*{_TOPIC_ID})*)")


def cited_topics(text: str) -> set[str]:
    """Every topic ID that `text` cites after the word "topic(s)", ranges (S3-S11) spelled out."""
    found = set()
    for m in CITATION.finditer(text):
        ids = re.findall(rf"{_TOPIC_ID}|[-–]", m.group(1))
        for i, tok in enumerate(ids):
            if tok in "-–" and 0 < i < len(ids) - 1 and ids[i - 1][0] == ids[i + 1][0]:
                first, last = int(ids[i - 1][1:]), int(ids[i + 1][1:])
                found |= {f"{ids[i - 1][0]}{n}" for n in range(first, last + 1)}
            elif tok not in "-–":
                found.add(tok)
    return found


def chapters(book: dict):
    for part in book["parts"]:
        for chapter in part.get("chapters") or []:
            yield part, chapter


PATH_KEYS = ("notebook", "lab", "solution", "exercise", "exercise_solution")


def listed_paths(book: dict) -> set[str]:
    return {ch[key] for _, ch in chapters(book) for key in PATH_KEYS if ch.get(key)}


def ungraded_chapters(book: dict) -> list[str]:
    """Chapters with neither a lab nor an exercise: every chapter should give the learner a graded task."""
    return [ch.get("id", "?") for _, ch in chapters(book) if not (ch.get("lab") or ch.get("exercise"))]


def validate(book: dict, root: str | Path = ".") -> list[str]:
    """Every problem with the map, as sentences. An empty list means the map and the disk agree."""
    root, problems, seen = Path(root), [], set()
    defined = topics(book)
    if not defined:
        problems.append("book.yml has no 'topics' list (ID: one line each) for the chapters' topics to name")
    for tid, line in defined.items():
        if not re.fullmatch(_TOPIC_ID, tid) or not line.strip() or "\n" in line.strip():
            problems.append(f"topic {tid!r}: an ID is a capital letter and a number, and its description one line")
    for part, ch in chapters(book):
        where = f"chapter {ch.get('id', '?')!r} in part {part.get('id', '?')!r}"
        for key, kind in REQUIRED.items():
            if not isinstance(ch.get(key), kind):
                problems.append(f"{where}: field {key!r} must be a {kind.__name__} (got {ch.get(key)!r})")
        if ch.get("id") in seen:
            problems.append(f"{where}: duplicate chapter id")
        seen.add(ch.get("id"))
        if bool(ch.get("lab")) != bool(ch.get("solution")):
            problems.append(f"{where}: a lab needs its solution and a solution its lab")
        if bool(ch.get("exercise")) != bool(ch.get("exercise_solution")):
            problems.append(f"{where}: an exercise needs its exercise_solution and a solution its exercise")
        if isinstance(ch.get("goals"), list) and not 1 <= len(ch["goals"]) <= 3:
            problems.append(f"{where}: give 1-3 learning goals (got {len(ch['goals'])})")
        for topic in ch.get("topics") or []:
            if topic not in defined:
                problems.append(f"{where}: unknown topic {topic!r}; book.yml's 'topics' defines the IDs")
        for key in PATH_KEYS:
            if ch.get(key) and not (root / ch[key]).is_file():
                problems.append(f"{where}: {key} {ch[key]} does not exist")
    listed = listed_paths(book)
    for folder in CONTENT_DIRS:
        for nb in sorted((root / folder).rglob("*.ipynb")):
            rel = nb.relative_to(root).as_posix()
            if ".ipynb_checkpoints" not in nb.parts and rel not in listed:
                problems.append(f"{rel} is on disk but not listed in book.yml")
    return problems


def check_book(path: str | Path = "book.yml") -> dict:
    book = load_book(path)
    problems = validate(book, Path(path).parent)
    if problems:
        raise BookError("book.yml and the disk disagree:\n  " + "\n  ".join(problems))
    return book


def covered_topics(book: dict) -> set[str]:
    return {t for _, ch in chapters(book) for t in ch.get("topics") or []}


# What the notebooks read from the course root: the map (checked against solutions/ and labs/), the rules
# file, the pins. Staged beside the pages, not listed in the book's table of contents.
SUPPORT_FILES = ("book.yml", "README.md", "pyproject.toml", "environment.yml", "Dockerfile", "monitoring", "solutions")


LAB_PATTERNS = ["labs/*/*"]  # myst-nb matches from the right: labs/<part>/<lab>.ipynb, shown as stubs, never run


def chapter_header(ch: dict, names: dict[str, str] | None = None) -> str:
    """The markdown that opens a chapter's page, generated from its book.yml entry (never typed by hand)."""
    lines = (
        [
            f"**{ch['minutes']} minutes**"
            + (
                f" (reading {t['read']}, running {t['run']}, the task {t['task']})"
                if isinstance(t := ch.get("timed"), dict)
                else ""
            )
            + " · "
            + ("needs a GPU for its main point (runs on CPU too)" if ch["gpu"] else "runs on a CPU"),
            "",
            "**You will**",
            "",
        ]
        + [f"- {g}" for g in ch["goals"]]
        + [""]
    )
    names = names or {}
    # In words: a topic's ID is the maintainers' handle on book.yml's list, and a reader cannot look it up.
    lines.append("**Topics:** " + "; ".join(names.get(t, t) for t in ch["topics"]))
    tasks = [(kind, ch[key]) for kind, key in (("Lab", "lab"), ("Exercise", "exercise")) if ch.get(key)]
    if tasks:
        lines += [""] + [
            f"**{kind}:** [{Path(p).stem}](../../{p}) (checked automatically: `ailab labs check {p}`)"
            for kind, p in tasks
        ]
    return "\n".join(lines)


def _with_header(nb_path: Path, target: Path, header: str) -> None:
    """Copy a notebook, inserting the generated header after its title cell."""
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    cell = nbformat.v4.new_markdown_cell(header)
    cell["id"] = "ailab-book-header"
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, cell)
    nbformat.write(nb, str(target))


def write_jupyter_book(book: dict, root: str | Path, out: str | Path, execute: str = "off") -> Path:
    """Stage the course for Jupyter Book 1: copy the content, write _toc.yml and _config.yml.

    execute="cache" runs every chapter notebook while the book builds (Jupyter Book's cache, so a second
    build re-runs only what changed): each page then shows the numbers and figures measured on the
    machine that built it. Labs and exercises are shown as the learner gets them, not executed.
    """
    root, src = Path(root), Path(out)
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for name in SUPPORT_FILES:  # what the notebooks read from the course root (rules file, pins, the map)
        if (root / name).is_dir():
            shutil.copytree(root / name, src / name)
        elif (root / name).is_file():
            shutil.copy2(root / name, src / name)
    intro = [
        "# " + book["title"],
        "",
        (root / "README.md").read_text(encoding="utf-8") if (root / "README.md").exists() else "",
    ]
    (src / "intro.md").write_text("\n".join(intro), encoding="utf-8")
    toc_parts = []
    for part in book["parts"]:
        entries = []
        for ch in part.get("chapters") or []:
            for key in ("notebook", "lab", "exercise"):
                if ch.get(key):
                    target = src / ch[key]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if key == "notebook":
                        _with_header(root / ch[key], target, chapter_header(ch, topics(book)))
                    else:
                        shutil.copy2(root / ch[key], target)
                    entries.append({"file": str(Path(ch[key]).with_suffix("").as_posix())})
        if entries:
            toc_parts.append({"caption": part["title"], "chapters": entries})
    if book.get("glossary"):
        (src / "glossary.md").write_text(glossary.page(book), encoding="utf-8")
        toc_parts.append({"caption": "Glossary", "chapters": [{"file": "glossary"}]})
    toc = {"format": "jb-book", "root": "intro", "parts": toc_parts}
    config = {
        "title": book["title"],
        "author": book.get("author", "ailab"),
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": execute, "timeout": 900, "exclude_patterns": LAB_PATTERNS},
        # plotly.js once for the whole book, from the installed plotly (offline; figures call Plotly.newPlot)
        "sphinx": {
            "config": {
                "html_show_copyright": False,
                "html_static_path": ["_static"],
                "html_js_files": ["plotly.min.js"],
                "html_css_files": ["ailab.css"],
            }
        },
    }
    static = src / "_static"
    static.mkdir(exist_ok=True)
    (static / "ailab.css").write_text(BOOK_CSS, encoding="utf-8")
    import plotly

    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", static / "plotly.min.js")
    (src / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
    (src / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return src


# The course's code lines run past the book's column, and the theme cuts them: wrap them instead (a wrapped
# line keeps its indent; outputs, tables of figures, wrap the same way).
BOOK_CSS = """div.highlight pre, div.cell_output pre, .output pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}
"""


def main() -> int:
    """`python -m ailab.book SRC_DIR`: check book.yml, then stage the Jupyter Book sources."""
    import os
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "build/book-src"
    try:
        book = check_book("book.yml")
    except BookError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_jupyter_book(book, ".", out, execute=os.environ.get("AILAB_BOOK_EXECUTE", "cache"))
    print(f"staged {len(listed_paths(book))} notebooks in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
