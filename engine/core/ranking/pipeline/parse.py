"""Pipeline expressions and files. An expression is parsed by walking Python's syntax tree: calls of the
registered stage constructors with literal arguments (strings, numbers, booleans, None, lists of them, or
stages), joined by `>>`, `%`, `|` and `^`. Nothing is evaluated, so a file can name no other function,
attribute or variable; anything else is refused in one line naming its line and column."""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from engine.core.ranking.pipeline.stage import Stage
from engine.errors import EngineError

OPERATORS = {ast.RShift: ">>", ast.Mod: "%", ast.BitOr: "|", ast.BitXor: "^"}


class PipelineSyntaxError(EngineError):
    pass


def _where(node: ast.AST, origin: str) -> str:
    """Where a node starts in the user's text (the parser reads it wrapped in brackets on lines of their own)."""
    return f"{origin}line {max(1, getattr(node, 'lineno', 2) - 1)}, column {getattr(node, 'col_offset', 0) + 1}"


def parse_pipeline(text: str, origin: str = "") -> Stage:
    """The stage an expression describes; `origin` prefixes positions in messages (a file's name)."""
    if not isinstance(text, str) or not text.strip():
        raise PipelineSyntaxError(f"{origin}the pipeline is empty; write e.g. retrieve(\"docs\", k=100) % 10")
    try:
        tree = ast.parse(f"(\n{text.strip()}\n)", mode="eval")  # brackets: an expression may span lines
        value = _build(tree.body, origin)
    except SyntaxError as e:
        raise PipelineSyntaxError(f"{origin}line {max(1, (e.lineno or 2) - 1)}, column {e.offset}: not a "
                                  f"pipeline expression ({e.msg})") from None
    except (RecursionError, MemoryError):  # thousands of operators or calls in one chain: the parsers' stacks
        raise PipelineSyntaxError(f"{origin}the pipeline nests or chains too many stages to parse "
                                  f"({len(text):,} characters); a pipeline has a few dozen") from None
    if not isinstance(value, Stage):
        raise PipelineSyntaxError(f"{_where(tree.body, origin)}: a pipeline is a stage, not {value!r}")
    return value


def _literal(node: ast.AST, origin: str) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)) \
            and not isinstance(node.operand.value, bool):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, origin) for e in node.elts]
    return _build(node, origin)


def _build(node: ast.AST, origin: str) -> Any:
    from engine.core.ranking.pipeline.registry import STAGES, stage_class
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _build(node.left, origin), _literal(node.right, origin)
        op = OPERATORS[type(node.op)]
        if not isinstance(left, Stage):
            raise PipelineSyntaxError(f"{_where(node.left, origin)}: `{op}` needs a stage on its left")
        if op == "%":
            if isinstance(right, bool) or not isinstance(right, int):
                raise PipelineSyntaxError(f"{_where(node.right, origin)}: `%` keeps the top k: a whole number")
            return _call(lambda: left % right, node, origin)
        if not isinstance(right, Stage):
            raise PipelineSyntaxError(f"{_where(node.right, origin)}: `{op}` needs a stage on its right")
        return _call(lambda: {">>": left.__rshift__, "|": left.__or__, "^": left.__xor__}[op](right), node, origin)
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise PipelineSyntaxError(f"{_where(node.func, origin)}: only stage constructors can be called "
                                      f"({', '.join(e.name for e in STAGES)})")
        names = [e.name for e in STAGES]
        if node.func.id not in names:
            raise PipelineSyntaxError(f"{_where(node.func, origin)}: {node.func.id!r} is not a stage; stages are "
                                      f"{', '.join(names)}")
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise PipelineSyntaxError(f"{_where(a, origin)}: write each argument out (no *args)")
        args = [_literal(a, origin) for a in node.args]
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise PipelineSyntaxError(f"{_where(kw.value, origin)}: write each argument out (no **kwargs)")
            kwargs[kw.arg] = _literal(kw.value, origin)
        cls = stage_class(node.func.id)
        _check_arguments(node.func.id, cls, args, kwargs, node, origin)
        return _call(lambda: cls(*args, **kwargs), node, origin)
    if isinstance(node, ast.Name):
        raise PipelineSyntaxError(f"{_where(node, origin)}: {node.id!r} is a name, not a value; quote text "
                                  f"(\"{node.id}\") or call a stage ({node.id}(…))")
    if isinstance(node, ast.Attribute):
        raise PipelineSyntaxError(f"{_where(node, origin)}: attributes are not allowed in a pipeline")
    kind = type(node).__name__
    raise PipelineSyntaxError(f"{_where(node, origin)}: {kind} is not allowed in a pipeline; use stage calls, "
                              "literal arguments and >>, %, |, ^")


def _check_arguments(name: str, cls: type, args: list, kwargs: dict, node: ast.AST, origin: str) -> None:
    """Arguments the stage does not take, named in the file's words (not Python's `__init__()` wording)."""
    import inspect
    params = [p for p in inspect.signature(cls).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes = ", ".join(p.name for p in params)
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as e:
        unknown = [k for k in kwargs if k not in {p.name for p in params}]
        if unknown and not any(p.kind == p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values()):
            problem = f"no argument {unknown[0]!r}"
        elif "multiple values" in str(e):
            problem = f"argument {str(e).rsplit(' ', 1)[-1]} given twice"
        elif "missing" in str(e):
            problem = "missing " + str(e).split("missing ", 1)[1].split(": ", 1)[-1]
        else:
            problem = f"too many arguments ({len(args)} without names)"
        raise PipelineSyntaxError(f"{_where(node, origin)}: {name}(): {problem}; it takes {takes}") from None


def _call(make, node: ast.AST, origin: str) -> Any:
    try:
        return make()
    except PipelineSyntaxError:
        raise
    except EngineError as e:
        raise PipelineSyntaxError(f"{_where(node, origin)}: {e}") from None
    except TypeError as e:
        raise PipelineSyntaxError(f"{_where(node, origin)}: {e}") from None


def read_pipeline_file(path: str | os.PathLike) -> Stage:
    """A TOML file whose `pipeline` key holds an expression (other keys, e.g. `description`, are kept for
    people)."""
    return parse_pipeline(read_pipeline_text(path), f"{path}: ")


def read_pipeline_text(path: str | os.PathLike) -> str:
    """The expression a pipeline file's `pipeline` key holds, unparsed (one line on an unreadable file)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineError(f"{path}: no such pipeline file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise EngineError(f"{path}: cannot read the pipeline file ({e})") from None
    except tomllib.TOMLDecodeError as e:
        raise EngineError(f"{path}: not a TOML file ({e})") from None
    text = data.get("pipeline")
    if not isinstance(text, str):
        raise EngineError(f"{path}: the file needs a key `pipeline` holding an expression, e.g. "
                          "pipeline = 'retrieve(\"docs\", k=100) % 10'")
    return text


def pipeline_file_text(stage: Stage | str, description: str = "") -> str:
    """A pipeline as a file `read_pipeline_file` reads back."""
    head = f"# {description}\n" if description else ""
    return f"{head}pipeline = '''\n{stage}\n'''\n"
