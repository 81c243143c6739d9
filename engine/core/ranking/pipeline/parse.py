"""Pipeline expressions and files. An expression is parsed by walking Python's syntax tree: calls of the
registered stage constructors with literal arguments (strings, numbers, booleans, None, lists of them, or
stages), joined by `>>`, `%`, `|` and `^`. Nothing is evaluated, so a file can name no other function,
attribute or variable; anything else is refused in one line naming its line and column (in the file, for a
pipeline file), and so is an argument of the wrong type (a list where a stage takes text) or a pipeline
nested deeper than MAX_DEPTH stages."""
from __future__ import annotations

import ast
import collections.abc
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from engine.core.ranking.pipeline.stage import Stage
from engine.errors import EngineError

OPERATORS = {ast.RShift: ">>", ast.Mod: "%", ast.BitOr: "|", ast.BitXor: "^"}
MAX_DEPTH = 100
"""Stages nested in one another (a chain of n `>>` is n deep): a pipeline has a few dozen; every walk of the
tree (its text, the check, the run) recurses once per level, so deeper ones are refused at the parse."""


class PipelineSyntaxError(EngineError):
    pass


@dataclass(frozen=True)
class Origin:
    """Where an expression's text starts: the prefix of messages (a file's name) and the line and column of
    its first character there, so a position is the file's, not the expression's."""
    prefix: str = ""
    line: int = 1
    column: int = 1

    def __str__(self) -> str:
        return self.prefix

    def at(self, lineno: int, column: int) -> str:
        """`line L, column C` of a position in the text (line 1 is the text's first)."""
        col = column + (self.column - 1 if lineno == 1 else 0)
        return f"{self.prefix}line {self.line + lineno - 1}, column {col}"

    def skip(self, lead: str) -> "Origin":
        """The origin of the text after `lead` (blanks the parser strips)."""
        if "\n" in lead:
            return Origin(self.prefix, self.line + lead.count("\n"), 1 + len(lead.rsplit("\n", 1)[1]))
        return Origin(self.prefix, self.line, self.column + len(lead))


def _where(node: ast.AST, origin: Origin) -> str:
    """Where a node starts in the user's text (the parser reads it wrapped in brackets on lines of their own)."""
    return origin.at(max(1, getattr(node, "lineno", 2) - 1), getattr(node, "col_offset", 0) + 1)


def parse_pipeline(text: str, origin: str | Origin = "") -> Stage:
    """The stage an expression describes; `origin` prefixes positions in messages (a file's name), and says
    where the text starts in its file."""
    origin = origin if isinstance(origin, Origin) else Origin(origin)
    if not isinstance(text, str) or not text.strip():
        raise PipelineSyntaxError(f"{origin}the pipeline is empty; write e.g. retrieve(\"docs\", k=100) % 10")
    origin = origin.skip(text[:len(text) - len(text.lstrip())])
    try:
        tree = ast.parse(f"(\n{text.strip()}\n)", mode="eval")  # brackets: an expression may span lines
        value = _build(tree.body, origin)
    except SyntaxError as e:
        raise PipelineSyntaxError(f"{origin.at(max(1, (e.lineno or 2) - 1), e.offset or 1)}: not a "
                                  f"pipeline expression ({e.msg})") from None
    except (RecursionError, MemoryError):  # thousands of operators or calls in one chain: the parsers' stacks
        raise PipelineSyntaxError(f"{origin}the pipeline nests or chains too many stages to parse "
                                  f"({len(text):,} characters); a pipeline has a few dozen") from None
    if not isinstance(value, Stage):
        raise PipelineSyntaxError(f"{_where(tree.body, origin)}: a pipeline is a stage, not {value!r}")
    depth = _depth(value)
    if depth > MAX_DEPTH:
        raise PipelineSyntaxError(f"{origin}the pipeline nests or chains {depth} stages deep, over the limit of "
                                  f"{MAX_DEPTH}; a pipeline has a few dozen")
    return value


def _depth(stage: Stage) -> int:
    """How deep the stage tree is, walked without recursion (the tree may be too deep to recurse)."""
    deepest, todo = 0, [(stage, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((child, d + 1) for child in node.children())
    return deepest


def _literal(node: ast.AST, origin: Origin) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)) \
            and not isinstance(node.operand.value, bool):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, origin) for e in node.elts]
    return _build(node, origin)


def _build(node: ast.AST, origin: Origin) -> Any:
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


def _check_arguments(name: str, cls: type, args: list, kwargs: dict, node: ast.AST, origin: Origin) -> None:
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
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation this Python cannot resolve: the constructor checks its own arguments
        return
    signature = inspect.signature(cls)
    for param, value in signature.bind(*args, **kwargs).arguments.items():
        kind = signature.parameters[param].kind
        values = value if kind is inspect.Parameter.VAR_POSITIONAL else \
            value.values() if kind is inspect.Parameter.VAR_KEYWORD else [value]
        hint = hints.get(param, Any)
        for v in values:
            if not _fits(v, hint):
                raise PipelineSyntaxError(f"{_where(node, origin)}: {name}(): {param} must be {_described(hint)}, "
                                          f"not {_kind_of(v)}")


def _fits(value: Any, hint: Any) -> bool:
    """Whether a literal fits a constructor's annotation (numbers' ranges are the constructor's to check)."""
    origin = typing.get_origin(hint)
    if hint is Any or isinstance(hint, typing.TypeVar):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, Sequence, collections.abc.Sequence):
        inner = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, inner[0] if inner else Any) for v in value)
    if isinstance(hint, type):
        return isinstance(value, hint) or not issubclass(hint, (Stage, str, int, float, list))
    return True


def _described(hint: Any) -> str:
    """An annotation in a pipeline file's words."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_described(h) for h in typing.get_args(hint)))
    names = {type(None): "None", bool: "True or False", int: "a number", float: "a number", str: "text"}
    if hint in names:
        return names[hint]
    if isinstance(hint, type) and issubclass(hint, Stage):
        return "a stage"
    args = typing.get_args(hint)
    return f"a list of {_described(args[0]).removeprefix('a ')}s" if args else "a list"


def _kind_of(value: Any) -> str:
    if isinstance(value, Stage):
        return "a stage"
    if isinstance(value, list):
        return "a list"
    return "None" if value is None else repr(value) if not isinstance(value, str) else "text"


def _call(make, node: ast.AST, origin: Origin) -> Any:
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
    return parse_pipeline(*read_pipeline_source(path))


def read_pipeline_source(path: str | os.PathLike) -> "tuple[str, Origin]":
    """The expression a pipeline file's `pipeline` key holds, unparsed, and where it starts in the file (so a
    refusal names the file's line); one line on an unreadable file."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    from engine.io.tables import check_file
    path = Path(path)
    if path.exists() or path.is_symlink():
        check_file(path, "a pipeline file (TOML)")
    try:
        raw = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors write one) is not part of the TOML
        data = tomllib.loads(raw)
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
    return text, _value_origin(raw, f"{path}: ")


_KEY = re.compile(r"""^[ \t]*(?:pipeline|"pipeline"|'pipeline')[ \t]*=[ \t]*('''|\"\"\"|'|")""", re.MULTILINE)


def _value_origin(raw: str, prefix: str) -> Origin:
    """Where the `pipeline` value's text starts in the file (a multi-line string's first newline is not part
    of it), so a refusal names the file's line; line 1 where the key cannot be found."""
    m = _KEY.search(raw)
    if m is None:
        return Origin(prefix)
    line = raw.count("\n", 0, m.start()) + 1
    rest = raw[m.end():]
    if len(m.group(1)) == 3 and rest.startswith(("\n", "\r\n")):
        return Origin(prefix, line + 1, 1)
    return Origin(prefix, line, m.end() - m.start() + 1)


def pipeline_file_text(stage: Stage | str, description: str = "") -> str:
    """A pipeline as a file `read_pipeline_file` reads back."""
    head = f"# {description}\n" if description else ""
    return f"{head}pipeline = '''\n{stage}\n'''\n"
