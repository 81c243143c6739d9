"""Metadata filters (`--where`): a small recursive-descent parser (no `eval`) and a vectorized evaluation
over a collection's columns of item metadata.

Grammar (keywords in lower case):

    expr       := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | "(" expr ")" | comparison
    comparison := FIELD ("==" | "!=" | "<" | "<=" | ">" | ">=") VALUE | FIELD "in" "[" [VALUE ("," VALUE)*] "]"
    FIELD      := letter or "_", then letters, digits, "_", "." ("year", "meta.split")
    VALUE      := "text" | 'text' (backslash escapes) | a number (-3, 2.5, 1e6)

Values compare as numbers when both sides are numbers (a cell holding the text "2020", as CSV cells do,
counts as a number); otherwise both compare as text. A comparison on a field an item does not have is
false (so is `!=`); `not` negates whatever its operand gave.
"""
from __future__ import annotations

import contextlib
import operator
import re
from dataclasses import dataclass
from typing import Iterator, Protocol, Union

import numpy as np

from engine.core.storage.store.columns import _NUMBER, Column, as_number, as_text
from engine.errors import EngineError, opt
from engine.io.limits import limit, over

OPERATORS = ("==", "!=", "<=", ">=", "<", ">")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_KEYWORDS = ("and", "or", "not", "in")


@dataclass(frozen=True)
class Literal:
    """A value in an expression: its text, and its number when it is one."""
    text: str
    number: float | None


@dataclass(frozen=True)
class Compare:
    field: str
    op: str                       # one of OPERATORS, or "in"
    values: tuple[Literal, ...]   # one value, or the list of `in`


@dataclass(frozen=True)
class Not:
    operand: "Expr"


@dataclass(frozen=True)
class BoolOp:
    op: str                       # "and" | "or"
    operands: tuple["Expr", ...]


Expr = Union[Compare, Not, BoolOp]


# ---------------------------------------------------------------------------------------------- parsing
class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.depth = 0

    def fail(self, what: str, pos: int | None = None) -> EngineError:
        p = self.pos if pos is None else pos
        found = repr(self.text[p:p + 12]) if p < len(self.text) else "the end"
        return EngineError(f"{opt('where')} {self.text!r}: at position {p + 1}: expected {what}, found {found}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek_word(self) -> str | None:
        self.skip()
        m = _FIELD.match(self.text, self.pos)
        return m.group(0) if m else None

    def take(self, token: str) -> bool:
        self.skip()
        if not self.text.startswith(token, self.pos):
            return False
        end = self.pos + len(token)
        if token.isalpha() and end < len(self.text) and (self.text[end].isalnum() or self.text[end] in "_."):
            return False  # "order" is a field, not "or" + "der"
        self.pos = end
        return True

    def parse(self) -> Expr:
        if not self.text.strip():
            raise EngineError(f"{opt('where')} is empty; give a condition such as 'year >= 2020'")
        expr = self.or_expr()
        self.skip()
        if self.pos != len(self.text):
            raise self.fail("'and', 'or' or the end")
        return expr

    def or_expr(self) -> Expr:
        parts = [self.and_expr()]
        while self.take("or"):
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else BoolOp("or", tuple(parts))

    def and_expr(self) -> Expr:
        parts = [self.not_expr()]
        while self.take("and"):
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts))

    def not_expr(self) -> Expr:
        if self.take("not"):
            with self.nested():
                return Not(self.not_expr())
        if self.take("("):
            with self.nested():
                expr = self.or_expr()
            if not self.take(")"):
                raise self.fail("')'")
            return expr
        return self.comparison()

    @contextlib.contextmanager
    def nested(self) -> Iterator[None]:
        """One more level of `not` or brackets: past `max_filter_depth` the filter is refused in one line, so
        neither this parser nor the evaluation ever recurses deeper than the limit (never a RecursionError)."""
        self.depth += 1
        if self.depth > limit("max_filter_depth"):
            raise over("max_filter_depth", f"'not' and brackets nested {self.depth:,} levels deep (at position "
                       f"{self.pos})", f"{opt('where')} {self.text[:40]!r}")
        try:
            yield
        finally:
            self.depth -= 1

    def comparison(self) -> Compare:
        word = self.peek_word()
        if word is None or word in _KEYWORDS:
            raise self.fail("a field name, 'not' or '('")
        self.pos += len(word)
        if self.take("in"):
            if not self.take("["):
                raise self.fail("'[' after 'in'")
            values: list[Literal] = []
            if not self.take("]"):
                values.append(self.value())
                while self.take(","):
                    values.append(self.value())
                if not self.take("]"):
                    raise self.fail("',' or ']'")
            return Compare(word, "in", tuple(values))
        for op in OPERATORS:
            if self.take(op):
                return Compare(word, op, (self.value(),))
        raise self.fail("one of ==, !=, <, <=, >, >=, in")

    def value(self) -> Literal:
        self.skip()
        start = self.pos
        if self.pos < len(self.text) and self.text[self.pos] in "\"'":
            quote, out = self.text[self.pos], []
            self.pos += 1
            while self.pos < len(self.text) and self.text[self.pos] != quote:
                if self.text[self.pos] == "\\" and self.pos + 1 < len(self.text):
                    self.pos += 1
                out.append(self.text[self.pos])
                self.pos += 1
            if self.pos >= len(self.text):
                raise self.fail(f"a closing {quote}", start)
            self.pos += 1
            return Literal("".join(out), None)
        m = _NUMBER.match(self.text, self.pos)
        if m and not (m.end() < len(self.text) and (self.text[m.end()].isalnum() or self.text[m.end()] == "_")):
            self.pos = m.end()
            return Literal(m.group(0), as_number(m.group(0)))
        raise self.fail("a quoted text or a number")


def parse_where(text: str) -> Expr:
    """The expression `text` as a tree; a bad one is one line naming the position (1-based) at fault."""
    if not isinstance(text, str):
        raise EngineError(f"{opt('where')} must be text, not {type(text).__name__}")
    parser = _Parser(text)
    try:
        return parser.parse()
    except RecursionError:  # only when max_filter_depth was raised past what the stack holds
        raise over("max_filter_depth", f"'not' and brackets nested {parser.depth:,} levels deep",
                   f"{opt('where')} {text[:40]!r}") from None


def fields_of(expr: Expr) -> set[str]:
    if isinstance(expr, Compare):
        return {expr.field}
    if isinstance(expr, Not):
        return fields_of(expr.operand)
    return set().union(*(fields_of(e) for e in expr.operands))


# ---------------------------------------------------------------------------------------------- evaluation
_PY_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
           ">=": operator.ge}


class Columns(Protocol):
    def __len__(self) -> int: ...
    def column(self, field: str) -> Column | None: ...


def evaluate(expr: Expr, table: Columns) -> np.ndarray:
    """The rows (a boolean mask over the collection) for which `expr` holds."""
    n = len(table)
    if isinstance(expr, Compare):
        col = table.column(expr.field)
        if col is None:
            return np.zeros(n, bool)
        if expr.op == "in":
            out = np.zeros(n, bool)
            for lit in expr.values:
                out |= col.compare("==", lit)
            return out
        return col.compare(expr.op, expr.values[0])
    if isinstance(expr, Not):
        return ~evaluate(expr.operand, table)
    parts = [evaluate(e, table) for e in expr.operands]
    return np.logical_and.reduce(parts) if expr.op == "and" else np.logical_or.reduce(parts)


def matches(expr: Expr, row: dict) -> bool:
    """`expr` on one items row, cell by cell: the reference the vectorized evaluation is tested against."""
    if isinstance(expr, Compare):
        if expr.field not in row or as_text(row[expr.field]) is None:
            return False
        value = row[expr.field]
        lits = expr.values
        op = "==" if expr.op == "in" else expr.op
        for lit in lits:
            a, b = as_number(value), lit.number
            ok = _PY_OPS[op](a, b) if a is not None and b is not None else _PY_OPS[op](as_text(value), lit.text)
            if ok:
                return True
        return False
    if isinstance(expr, Not):
        return not matches(expr.operand, row)
    results = (matches(e, row) for e in expr.operands)
    return all(results) if expr.op == "and" else any(results)
