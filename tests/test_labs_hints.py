"""Hints guide in tiers; they never hold the answer (issues 9 and 46).

Every stubbed function gets three hints, each a step further and none with code:
1. its `# HINT:` lines, in the stub: a question that points at the idea;
2. `<details><summary>Hint 2 · the idea...</summary>`, folded in the lab's markdown: the idea in words;
3. `<details><summary>Hint 3 · the structure...</summary>`, folded after it: the steps, without code.

For every lab in solutions/:
- no line of a solution block (whitespace-normalised, longer than ~15 characters, not a `# HINT:` line nor a
  trivial line such as `except Exception:`) appears in a hint, in a stub's NotImplementedError message, or in
  the lab's markdown cells;
- a hint does not hold a solution line's working part either: the expression after `return` or `=`, or the
  condition of an `if` / `while` / `for` / `with`; nor does it copy a run of 24 or more non-space characters of
  a solution line, unless that run is just an API name;
- nor its formula in other words: "K and V x layers x heads" for `2 * layers * heads`, with x, times, minus,
  divided by or the names spelt with spaces (a run of the line's operands joined by two or more of its
  operators, in its order or not), nor a near-copy (80 % of the line's words and symbols, in its order, within a
  stretch of the hint half as long again as the line);
- the stub's message says the function is not implemented yet and points to the hints without repeating them.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from pathlib import Path

import nbformat
import pytest

from ailab.labs.build import _HINT, BEGIN, END, build_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted(p for p in (ROOT / "solutions").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
MIN_CHARS = 15  # a fragment must be longer than this (whitespace-normalised) to count as a leak
TRIVIAL = {
    "except Exception:",
    "except Exception as e:",
    "else:",
    "try:",
    "finally:",
    "return None",
    "return out",
    "return result",
    "return results",
    "pass",
    "break",
    "continue",
}
_DETAILS = re.compile(r"<details>\s*<summary>\s*(.*?)</summary>(.*?)</details>", re.S)
_TIER = re.compile(r"^Hint ([23]) · the (idea|structure)\b")
_STUB = re.compile(r"^\s*raise NotImplementedError\((.*)\)\s*$")
_API_NAME = re.compile(r"^([\w.]+(\(\))?|\"[\w.]+\")$")  # `time.perf_counter()` names an API a hint may point to
SHARED_CHARS = 24  # a hint may not copy this many consecutive non-space characters of a solution line


def _squash(text: str) -> str:
    """Compare without whitespace, so re-wrapping or re-spacing a line cannot hide it."""
    return re.sub(r"\s+", "", text)


def _one_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def blocks(source: str) -> list[tuple[list[str], list[str]]]:
    """(hints, code lines) of each solution block in a cell's source."""
    out, block = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN:
            block = []
        elif line.strip() == END:
            hints = [m.group(1).strip() for m in map(_HINT.match, block) if m]
            out.append((hints, [ln for ln in block if not _HINT.match(ln)]))
            block = None
        elif block is not None:
            block.append(line)
    return out


def _without_comments(code_lines: list[str]) -> list[str]:
    """The block's lines with comments removed (a comment is not the answer, and `# HINT:` lines go too)."""
    lines = textwrap.dedent("\n".join(code_lines)).splitlines()
    try:
        cuts = {
            tok.start[0]: tok.start[1]
            for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline)
            if tok.type == tokenize.COMMENT
        }
    except (tokenize.TokenError, IndentationError, SyntaxError):
        cuts = {}
    return [line[: cuts[i]] if i in cuts else line for i, line in enumerate(lines, 1)]


def _counts(fragment: str) -> bool:
    return len(fragment) > MIN_CHARS and fragment not in TRIVIAL


def solution_lines(code_lines: list[str]) -> list[str]:
    return [s for s in (_one_space(ln) for ln in _without_comments(code_lines)) if _counts(s)]


def working_parts(line: str) -> list[str]:
    """What a hint must not give away even without the rest of the line: the value returned or assigned,
    the condition tested, the sequence looped over."""
    parts = []
    if line.startswith("return "):
        parts.append(line[len("return ") :])
    m = re.match(r"^[\w.\[\], ()*]+?\s(?:[-+*/]?=)\s(.+)$", line)  # a = ..., a, b = ..., a += ...
    if m:
        parts.append(m.group(1))
    m = re.match(r"^(?:if|elif|while|for|with)\s(.+):$", line)
    if m:
        parts.append(m.group(1))
    return [p.strip() for p in parts if _counts(p.strip()) and not _API_NAME.match(p.strip())]


def shared_code(line: str, text: str, n: int = SHARED_CHARS) -> list[str]:
    """Runs of at least `n` non-space characters that `text` copies from a solution line, other than an API
    name (`onnxruntime.InferenceSession`, `"CPUExecutionProvider"`): a piece such as
    `np.polyfit(np.arange(len(y)), y, 1)` gives the answer away even inside a longer line."""
    a, b, out, i = _squash(line), _squash(text), [], 0
    while i + n <= len(a):
        if a[i : i + n] not in b:
            i += 1
            continue
        j = i + n
        while j < len(a) and a[i : j + 1] in b:
            j += 1
        if not _API_NAME.match(a[i:j]):
            out.append(a[i:j])
        i = j
    return out


# A formula said in words: "x", "×", "times", "divided by"... become the operators they stand for, and a name's
# parts are words ("kv_heads" and "KV heads" alike), so that the same formula reads the same in code and prose.
_OPERATORS = {"+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!="}
_SPOKEN = [
    (r"(?<=\s)[x×·](?=\s)", "*"),
    (r"\btimes\b", "*"),
    (r"\bmultiplied by\b", "*"),
    (r"\bdivided by\b", "/"),
    (r"\bplus\b", "+"),
    (r"\bminus\b", "-"),
    ("÷", "/"),
    ("−", "-"),
    ("≥", ">="),
    ("≤", "<="),
]
_FILLER = {"the", "a", "an", "of", "its", "their", "by"}
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-z]+|//|\*\*|<=|>=|==|!=|[-+*/%<>]")
NEAR_COPY_SHARE = 0.8  # this share of a line's words and symbols (6 or more), in order in a window of a hint


def code_tokens(code: str) -> list[str]:
    return [t for t in _TOKEN.findall(code.lower().replace("_", " ")) if t not in _FILLER]


def prose_tokens(text: str) -> list[str]:
    text = f" {text.lower()} "
    for spoken, op in _SPOKEN:
        text = re.sub(spoken, f" {op} ", text)
    return [t for t in _TOKEN.findall(text.replace("_", " ")) if t not in _FILLER]


def _longest_common_run(a: list[str], b: list[str]) -> list[str]:
    best, prev = (0, 0), [0] * (len(b) + 1)
    for i in range(1, len(a) + 1):
        cur = [0] * (len(b) + 1)
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                cur[j] = prev[j - 1] + 1
                best = max(best, (cur[j], i))
        prev = cur
    n, end = best
    return a[end - n : end]


def _common_subsequence(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _near_copy(code: list[str], prose: list[str]) -> bool:
    """Most of the line's tokens, in its order, within a stretch of the hint not much longer than the line
    (words added between them, or a few left out, do not hide it)."""
    need = -(-len(code) * int(NEAR_COPY_SHARE * 10) // 10)
    if len(code) < 6 or sum(t in set(prose) for t in code) < need:
        return False
    width = len(code) + len(code) // 2
    return any(_common_subsequence(code, prose[i : i + width]) >= need for i in range(max(1, len(prose) - width + 1)))


def _chains(tokens: list[str]) -> list[set[str]]:
    """The words of each run of operands joined by two or more operators ("a b * c / d e": one run)."""
    out, words, ops, run = [], [], 0, set()
    for t in tokens + ["."]:
        if t in _OPERATORS:
            run |= set(words[-3:])
            words, ops = [], ops + 1
            continue
        if t != "." and len(words) < 3:
            words.append(t)
            continue
        if ops:
            run |= set(words[:3])
        if ops >= 2:
            out.append(run)
        words, ops, run = ([t] if t != "." else []), 0, set()
    return out


def formula_leaks(line: str, hint: str) -> list[str]:
    """How `hint` restates the solution line `line` in other words: its formula (two or more of the line's
    operators in a row of its operands, or most of an expression's operands joined by operators in any order),
    or most of its words and symbols in its order."""
    code, prose, out = code_tokens(line), prose_tokens(hint), []
    run = _longest_common_run(code, prose)
    ops = sum(t in _OPERATORS for t in run)
    if ops >= 2 and len(run) - ops >= 3:
        out.append(" ".join(run))
    elif _near_copy(code, prose):
        out.append("most of the line's words and symbols, in its order")
    for part in [line, *working_parts(line)]:
        operands = {t for t in code_tokens(part) if t not in _OPERATORS and not t[0].isdigit()}
        if sum(t in _OPERATORS for t in code_tokens(part)) < 2 or len(operands) < 3:
            continue
        for chain in _chains(prose):
            shared = operands & chain
            if len(shared) >= max(3, -(-3 * len(operands) // 4)):
                out.append("the operands " + ", ".join(sorted(shared)) + " joined by operators")
    return out


def _lab(path: Path):
    return nbformat.read(str(path), as_version=4)


def _solution_blocks(nb) -> list[tuple[int, list[str], list[str]]]:
    return [
        (i, hints, code)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for hints, code in blocks(cell.source)
    ]


def _stub_messages(path: Path) -> list[tuple[int, str]]:
    out = []
    for i, cell in enumerate(build_notebook(path).cells):
        if cell.cell_type == "code":
            for line in cell.source.splitlines():
                m = _STUB.match(line)
                if m:
                    out.append((i, ast.literal_eval(m.group(1))))
    return out


def _details(nb) -> list[tuple[int, str, str]]:
    """(cell, summary, body) of every folded block in the lab's markdown."""
    return [
        (i, summary.strip(), body)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for summary, body in _DETAILS.findall(cell.source)
    ]


def _tier_hints(nb) -> list[tuple[int, str, str]]:
    """(cell, "2" or "3", body) of each folded hint, in reading order."""
    return [(i, m.group(1), body) for i, summary, body in _details(nb) if (m := _TIER.match(summary))]


def _ids(paths):
    return [p.stem for p in paths]


def test_a_formula_in_words_is_found():
    kv = "per_token = 2 * layers * kv_heads * head_dim * dtype_bytes"
    assert formula_leaks(kv, "bytes per token = K and V x layers x KV heads x head_dim x dtype_bytes")
    assert formula_leaks(kv, "dtype_bytes times head_dim times the KV heads times layers, doubled")
    assert not formula_leaks(kv, "What does one token keep in the cache, in bytes, for each layer and KV head?")
    lerp = "return lower + (bound - lower) * (rank - below) / (count - below)"
    assert formula_leaks(
        lerp, "lower plus (bound minus lower) times the share (rank minus below) / (count minus below)"
    )
    assert not formula_leaks(lerp, "Place the rank inside its bucket linearly, from the bucket's lower bound.")
    near = "for bound in sorted(buckets, key=float):"
    assert formula_leaks(near, "loop: for each bound in sorted buckets, key = float")
    assert not formula_leaks(near, "Walk the bounds from the lowest up.")


def test_every_lab_is_covered():
    assert len(SOLUTIONS) >= 8, f"expected the 8 labs in solutions/, found {[p.name for p in SOLUTIONS]}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_no_solution_line_in_hints_stub_messages_or_markdown(path):
    nb = _lab(path)
    places = [(f"cell {i}, # HINT: line", h) for i, hints, _ in _solution_blocks(nb) for h in hints]
    places += [(f"cell {i}, stub message", msg) for i, msg in _stub_messages(path)]
    places += [(f"cell {i}, markdown", cell.source) for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"]
    hints_only = [p for p in places if "markdown" not in p[0]]
    hints_only += [(f"cell {i}, hint {tier}", body) for i, tier, body in _tier_hints(nb)]
    leaks = []
    for i, _, code in _solution_blocks(nb):
        for line in solution_lines(code):
            leaks += [
                f"{where}: holds the solution line {line!r} (from cell {i})"
                for where, text in places
                if _squash(line) in _squash(text)
            ]
            for part in working_parts(line):
                leaks += [
                    f"{where}: holds {part!r}, the working part of the solution line {line!r} (cell {i})"
                    for where, text in hints_only
                    if _squash(part) in _squash(text)
                ]
            for where, text in hints_only:
                leaks += [
                    f"{where}: copies {piece!r} from the solution line {line!r} (cell {i})"
                    for piece in shared_code(line, text)
                ]
                leaks += [
                    f"{where}: restates the solution line {line!r} (cell {i}) in other words: {how!r}"
                    for how in formula_leaks(line, text)
                ]
    assert not leaks, (
        f"{path.relative_to(ROOT)}: a hint names the idea and the API to read, never the statement "
        "that solves it:\n  " + "\n  ".join(dict.fromkeys(leaks))
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_every_stubbed_block_asks_a_question_first(path):
    found = _solution_blocks(_lab(path))
    assert found, f"{path.relative_to(ROOT)} has no solution block"
    bare = [i for i, hints, _ in found if not any(h.strip() for h in hints)]
    assert not bare, f"{path.relative_to(ROOT)}: the solution block(s) in cell(s) {bare} have no '# HINT:' line"
    told = [i for i, hints, _ in found if "?" not in " ".join(hints)]
    assert not told, (
        f"{path.relative_to(ROOT)}: the first hint (the '# HINT:' lines) of the block(s) in cell(s) {told} asks no "
        "question: it points at the idea with one, and leaves the idea itself to Hint 2"
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_every_task_has_the_idea_then_the_structure_folded(path):
    nb = _lab(path)
    folded, tiers = _details(nb), _tier_hints(nb)
    n_blocks = len(_solution_blocks(nb))
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert markdown.count("<details") == markdown.count("</details>") == len(folded) == len(tiers), (
        f"{path.relative_to(ROOT)}: every <details> is a hint, opening with <summary>Hint 2 · the idea...</summary> "
        f"or <summary>Hint 3 · the structure...</summary>, and is closed; found {[s for _, s, _ in folded]}"
    )
    assert "<details open" not in markdown, "hints start folded"
    assert all(body.strip() for _, _, body in tiers), "a hint is empty"
    order = "".join(tier for _, tier, _ in tiers)
    assert order == "23" * (len(order) // 2) and len(order) // 2 >= n_blocks, (
        f"{path.relative_to(ROOT)}: {n_blocks} function(s) to write; each needs Hint 2 (the idea) and then Hint 3 "
        f"(the structure), in that order; the folded hints here are, in order: {' '.join(order) or 'none'}"
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=_ids(SOLUTIONS))
def test_stub_message_points_to_the_hints_without_repeating_them(path):
    hints = [h for _, hs, _ in _solution_blocks(_lab(path)) for h in hs]
    messages = _stub_messages(path)
    assert messages, f"{path.relative_to(ROOT)}: the built lab has no stub"
    for i, msg in messages:
        assert "not implemented yet" in msg and "HINT" in msg and "Hints 2 and 3" in msg, (
            f"cell {i}: the stub should say it is not implemented yet and point to the hints; it says {msg!r}"
        )
        repeated = [h for h in hints if len(_one_space(h)) > MIN_CHARS and _squash(h) in _squash(msg)]
        assert not repeated, f"cell {i}: the stub message repeats the hint {repeated[0]!r}"
