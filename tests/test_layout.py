"""The tree shows the architecture, and these checks keep it that way. The import rules are import-linter
contracts in pyproject.toml (layers, tasks independent of each other, no cycles at any depth), run here with
`lint-imports`; what import-linter cannot see, the registries' "module:function" strings that load a module
lazily, is checked against the same layers below."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "engine"


def test_import_contracts_hold():
    """`lint-imports` (import-linter): every contract in pyproject.toml is kept."""
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if command is None:
        pytest.fail("lint-imports is missing: pip install import-linter (the `test` extra)")
    r = subprocess.run([command, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "broken" in r.stdout and " 0 broken" in r.stdout


def layers() -> list[set[str]]:
    """The first layers contract of pyproject.toml, top first: each layer's packages."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers" and "containers" not in c)
    return [{part.strip() for part in layer.split("|")} for layer in contract["layers"]]


def layer_of(module: str, stack: list[set[str]]) -> int | None:
    for n, layer in enumerate(stack):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return n
    return None


def named_modules(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, attribute) of every "engine.x:y" string in a file: a registry's lazy loaders."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(n.lineno, *n.value.split(":", 1)) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("engine.")
            and n.value.count(":") == 1 and " " not in n.value]


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def string_violations(package: Path, root: Path, stack: list[set[str]]) -> list[str]:
    """A "module:function" string that names a missing module or function, a module in a higher layer than
    the file holding it, or another task's module."""
    found = []
    for path in sorted(package.rglob("*.py")):
        here = module_name(path, root)
        for line, module, attribute in named_modules(path):
            where = f"{path.relative_to(root)}:{line}: {module}:{attribute}"
            target = root.joinpath(*module.split("."))
            source = target.with_suffix(".py") if target.with_suffix(".py").exists() else target / "__init__.py"
            if not source.exists():
                found.append(f"{where} (no such module)")
                continue
            defined = {getattr(n, "name", None) for n in ast.parse(source.read_text(encoding="utf-8")).body} | {
                t.id for n in ast.parse(source.read_text(encoding="utf-8")).body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
            if attribute not in defined:
                found.append(f"{where} (the module defines no {attribute})")
            mine, theirs = layer_of(here, stack), layer_of(module, stack)
            if mine is not None and theirs is not None and theirs < mine:
                found.append(f"{where} (a lower layer names a higher one)")
            parts, own = module.split("."), here.split(".")
            if parts[:2] == own[:2] == ["engine", "tasks"] and len(parts) > 2 and len(own) > 2 and parts[2] != own[2]:
                found.append(f"{where} (task {own[2]} names task {parts[2]})")
    return found


def test_registry_strings_name_real_modules_in_allowed_layers():
    stack = layers()
    assert [len(layer) for layer in stack][:4] and layer_of("engine.tasks.dse.cli", stack) is not None
    assert len([m for p in PACKAGE.rglob("*.py") for m in named_modules(p)]) > 20
    bad = string_violations(PACKAGE, REPO, stack)
    assert not bad, "\n".join(bad)


def test_the_string_checker_finds_missing_names_and_upward_strings(tmp_path):
    pkg = tmp_path / "engine"
    for folder in ("core", "tasks/a", "tasks/b"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "reg.py").write_text("LOADERS = {'x': 'engine.tasks.a.m:load', 'y': 'engine.core.gone:f'}\n")
    (pkg / "tasks" / "a" / "m.py").write_text("def load():\n    return 1\nOTHER = 'engine.tasks.b.n:nothing'\n")
    (pkg / "tasks" / "b" / "n.py").write_text("nothing = None\n")
    found = string_violations(pkg, tmp_path, [{"engine.tasks"}, {"engine.core"}])
    assert [f.split(" (")[1] for f in found] == ["a lower layer names a higher one)", "no such module)",
                                                 "task a names task b)"]


def test_every_task_has_the_same_shape():
    for task in (PACKAGE / "tasks").iterdir():
        if task.is_dir() and (task / "__init__.py").exists():
            assert (task / "data.py").is_file() and (task / "cli.py").is_file(), task.name
            assert "def register(" in (task / "cli.py").read_text(encoding="utf-8"), task.name


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


MAX_PARAMETERS = 8
"""The most parameters a function in engine/ takes (self/cls not counted, *args and **kwargs one each); below
the command line, functions take an options object. A command function is exempt: its parameters are the
command's flags, one each, unless an options class declares them."""


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def registered_commands(tree: ast.Module) -> set[str]:
    """Names a module hands to typer as commands: `@app.command(...)` on the function, or
    `app.command(...)(function)` in the module."""
    def is_command(call: ast.AST) -> bool:
        return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "command"
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and any(is_command(d) for d in n.decorator_list)}
    names |= {n.args[0].id for n in ast.walk(tree) if isinstance(n, ast.Call) and is_command(n.func) and n.args
              and isinstance(n.args[0], ast.Name)}
    return names


def long_signatures(package: Path, root: Path, root_commands: dict[str, str]) -> list[str]:
    """`path:line name (n parameters)` of each function with more than MAX_PARAMETERS parameters that is not a
    command: a top-level function of a `cli.py` module that typer registers there or the root group names."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module = module_name(path, root)
        commands = registered_commands(tree) | {target.split(":")[1] for target in root_commands.values()
                                                if target.split(":")[0] == module}
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > MAX_PARAMETERS:
                if path.name == "cli.py" and id(node) in top and node.name in commands:
                    continue
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({parameter_count(node)} parameters)")
    return found


def test_no_function_below_the_command_line_takes_more_than_eight_parameters():
    from engine.cli import COMMANDS
    found = long_signatures(PACKAGE, REPO, COMMANDS)
    assert not found, "\n".join(found)


def test_the_signature_check_exempts_only_registered_commands(tmp_path):
    pkg = tmp_path / "engine"
    (pkg / "t").mkdir(parents=True)
    nine = "a, b, c, d, e, f, g, h, i"
    (pkg / "t" / "cli.py").write_text(
        f"@app.command('x')\ndef x_cmd({nine}):\n    pass\n\n"
        f"def y_cmd({nine}):\n    pass\n\n"
        f"def root_cmd(self, {nine[:-3]}, *rest, **more):\n    pass\n\n"
        f"def helper({nine}):\n    pass\n\n"
        f"def ok(self, a, b, c, d, e, f, g, h):\n    pass\n\n"
        "app.command('y')(y_cmd)\n")
    (pkg / "t" / "work.py").write_text(f"@app.command('z')\ndef z_cmd({nine}):\n    pass\n")
    found = long_signatures(pkg, tmp_path, {"r": "engine.t.cli:root_cmd"})
    assert found == ["engine/t/cli.py:11 helper (9 parameters)", "engine/t/work.py:2 z_cmd (9 parameters)"]
    assert long_signatures(pkg, tmp_path, {}) == ["engine/t/cli.py:8 root_cmd (10 parameters)",
                                                  "engine/t/cli.py:11 helper (9 parameters)",
                                                  "engine/t/work.py:2 z_cmd (9 parameters)"]
