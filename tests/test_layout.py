"""The tree shows the architecture, and these rules keep it that way: `engine.core` and `engine.eval` (and
`engine.io`, `engine.serve`) never import `engine.tasks`; a task never imports another task; no two modules of
`engine/` import each other, directly or round a loop, and inside the core the layers run one way (store ← index ←
build ← collection). Imports are read from the source (ast), including those inside functions and under
TYPE_CHECKING, so a lazy import cannot hide a dependency."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "engine"
LOWER_LAYERS = ("core", "eval", "io", "serve")


def imported_modules(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative imports resolved against its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def strings_naming_modules(path: Path) -> list[tuple[int, str]]:
    """"module:function" strings (lazy loaders such as registries) count as imports too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.lineno, n.value.split(":")[0]) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("engine.")
            and ":" in n.value and " " not in n.value]


def violations(files, rule) -> list[str]:
    found = []
    for path in files:
        for line, module in imported_modules(path) + strings_naming_modules(path):
            why = rule(path, module)
            if why:
                found.append(f"{path.relative_to(REPO)}:{line}: imports {module} ({why})")
    return found


def test_lower_layers_never_import_tasks():
    files = [p for layer in LOWER_LAYERS for p in (PACKAGE / layer).rglob("*.py")]
    assert files, "the layers are missing"
    bad = violations(files, lambda path, m: "a lower layer imports a task" if m.startswith("engine.tasks") else "")
    assert not bad, "\n".join(bad)


def test_a_task_never_imports_another_task():
    tasks = [p for p in (PACKAGE / "tasks").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert {t.name for t in tasks} >= {"eventa", "dse", "lora", "model_ranking"}

    def rule(path: Path, module: str) -> str:
        own = path.relative_to(PACKAGE / "tasks").parts[0]
        parts = module.split(".")
        if parts[:2] == ["engine", "tasks"] and len(parts) > 2 and parts[2] != own:
            return f"task {own} imports task {parts[2]}"
        return ""

    bad = violations([p for t in tasks for p in t.rglob("*.py")], rule)
    assert not bad, "\n".join(bad)


def test_every_task_has_the_same_shape():
    for task in (PACKAGE / "tasks").iterdir():
        if task.is_dir() and (task / "__init__.py").exists():
            assert (task / "data.py").is_file() and (task / "cli.py").is_file(), task.name
            assert "def register(" in (task / "cli.py").read_text(encoding="utf-8"), task.name


@pytest.mark.parametrize("layer", LOWER_LAYERS)
def test_the_rule_checker_sees_lazy_and_relative_imports(tmp_path, layer):
    """The checker itself: a task imported inside a function, or relatively, is caught."""
    bad = tmp_path / "engine" / layer / "x.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from engine.tasks.eventa import pipeline\n    from ..tasks import dse\n"
                   "    return pipeline, dse\n")
    found = [m for _, m in imported_modules(bad, tmp_path) if m.startswith("engine.tasks")]
    assert found == ["engine.tasks.eventa", "engine.tasks.eventa.pipeline", "engine.tasks", "engine.tasks.dse"]


def test_public_api_stays_importable_from_engine():
    import engine
    from engine import Collection, EngineError, Hit, load_encoder
    assert {"Collection", "Hit", "EngineError", "load_encoder"} <= set(engine.__all__)
    for method in ("open", "build", "search", "search_many", "search_to_run", "from_vectors"):
        assert callable(getattr(Collection, method)), method
    assert issubclass(EngineError, Exception) and Hit("a", 1.0, 1).as_dict() == {"rank": 1, "id": "a", "score": 1.0}
    assert load_encoder.__module__ == "engine.core.encoders.registry"
    with pytest.raises(AttributeError):
        engine.nothing_here  # noqa: B018


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path, root: Path = REPO) -> dict[str, set[str]]:
    """module → the modules of the package it imports (a name imported from a module counts as that module)."""
    files = {module_name(p, root): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found = set()
        for _, module in imported_modules(path, root) + strings_naming_modules(path):
            while module and module not in files:
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycle_inside_engine():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50
    loops = cycles(graph)
    assert not loops, "import cycles (each a set of modules that import one another):\n" + "\n".join(
        " ↔ ".join(c) + "\n    " + "\n    ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in loops)


CORE_LAYERS = ("store", "index", "build")  # lowest first; engine.core.collection is above them all


@pytest.mark.parametrize("lower, upper", [(CORE_LAYERS[i], u) for i in range(len(CORE_LAYERS))
                                          for u in CORE_LAYERS[i + 1:] + ("collection",)])
def test_core_layers_run_one_way(lower, upper):
    """A lower layer of the core never imports a higher one, nor the collection facade."""
    graph = import_graph(PACKAGE)
    prefix = f"engine.core.{upper}"
    bad = [f"{m} imports {d}" for m, deps in graph.items() if m.startswith(f"engine.core.{lower}")
           for d in deps if d == prefix or d.startswith(prefix + ".")]
    assert not bad, "\n".join(bad)


def test_the_cycle_checker_finds_loops_lazy_and_typing_only(tmp_path):
    pkg = tmp_path / "engine"
    (pkg / "core").mkdir(parents=True)
    for f in ("__init__.py", "core/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "core" / "a.py").write_text("from engine.core.b import thing\n")
    (pkg / "core" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                       "    from engine.core.c import C\nthing = 1\n")
    (pkg / "core" / "c.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "core" / "d.py").write_text("LOADER = 'engine.core.e:load'\n")
    (pkg / "core" / "e.py").write_text("import engine.core.d\n")
    graph = import_graph(pkg, tmp_path)
    assert cycles(graph) == [["engine.core.a", "engine.core.b", "engine.core.c"], ["engine.core.d", "engine.core.e"]]
