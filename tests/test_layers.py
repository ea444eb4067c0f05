"""The house's layers, enforced: a lower module never imports a higher one, and no module imports itself
back through others. Read from the source (every `import`, module-level or inside a function), so a lazy
import cannot hide a cycle. The layer map is DESIGN.md's, as ranks: a module may import its own rank or
lower ones."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ailab"

RANK = {
    "device": 0,
    "timing": 0,
    "aio": 0,
    "scratch": 0,  # the hardware, how to time it, async from sync, scratch files
    "viz": 0,  # figures: plotly and the hardware's name, nothing of ours above
    "show": 0,  # the package's own code, shown in a notebook
    "roofline": 1,
    "profiling": 1,
    "memory": 1,  # measurements built on them
    "data": 2,
    "models": 2,
    "minilm_travel": 2,
    "traces": 2,  # the offline zoo and its data, and the request traces made from it
    "engine": 3,
    "quantize": 3,
    "drift": 3,
    "variants": 3,
    "generation": 3,  # running models
    "batching": 4,  # batching: no model, no HTTP
    "server": 5,  # HTTP
    "bench": 6,
    "monitoring": 6,
    "workers": 6,
    "services": 6,
    "retrieval": 6,
    "prometheus": 6,  # the application layer
    "suites": 7,  # `ailab bench <suite>` composes everything below
    "widgets": 8,
    "labs": 8,
    "cli": 8,
    "book": 8,
    "minutes": 8,
    "glossary": 8,
    "doctor": 8,  # what learners touch
}

# Upward imports that still exist, each with its reason. The list may only shrink.
KNOWN_UPWARD: dict = {}  # (lower, higher) layer pairs allowed with a reason; none left

# Third-party packages a layer must not know.
FORBIDDEN = {
    "batching": {"torch", "transformers", "onnxruntime", "fastapi", "starlette", "httpx", "uvicorn"},
    "engine": {"fastapi", "starlette", "httpx", "uvicorn"},
    "quantize": {"fastapi", "starlette", "httpx", "uvicorn"},
    "generation": {"fastapi", "starlette", "httpx", "uvicorn"},
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module `path` imports: ailab modules resolved to the deepest existing name, others by top name."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            if not name.startswith("ailab"):
                out.add(name.split(".")[0])
                continue
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(p, set(mods)) - {m} for m, p in mods.items()}


def layer(mod: str) -> str:
    return mod.split(".")[1] if "." in mod else ""


def test_every_module_has_a_layer():
    missing = sorted({layer(m) for m in modules()} - set(RANK) - {""})
    assert not missing, f"modules with no layer in tests/test_layers.py RANK: {missing}"


def test_no_module_imports_a_higher_layer():
    bad = []
    for mod, deps in graph().items():
        for dep in deps:
            a, b = layer(mod), layer(dep)
            if a and b and a != b and RANK[b] > RANK[a] and (a, b) not in KNOWN_UPWARD:
                bad.append(f"{mod} imports {dep} ({a} is below {b})")
    assert not bad, "a lower layer imports a higher one:\n" + "\n".join(sorted(bad))


def test_known_upward_imports_still_exist():
    """An exception that was fixed is taken off the list, so the list shows what is left to do."""
    seen = {(layer(m), layer(d)) for m, deps in graph().items() for d in deps}
    stale = [pair for pair in KNOWN_UPWARD if pair not in seen]
    assert not stale, f"these upward imports are gone: remove them from KNOWN_UPWARD: {stale}"


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if d not in g:
                continue
            if state.get(d) == 1:
                cycle = stack[stack.index(d) :] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_the_batcher_knows_no_model_and_no_http_and_the_engine_no_http():
    bad = []
    for mod, deps in graph().items():
        for dep in deps & FORBIDDEN.get(layer(mod), set()):
            bad.append(f"{mod} imports {dep}")
        if layer(mod) == "batching":
            bad += [f"{mod} imports {d}" for d in deps if layer(d) in ("engine", "models", "quantize", "server")]
    assert not bad, "\n".join(sorted(bad))
