"""A gate's `when`: a predicate over a call's arguments, written in the gateway's config file.

Guarantees: the text is never given to Python's `eval`. It is parsed once, at start, into a syntax tree that may
hold only what a predicate over JSON arguments needs (literals, the arguments by name, `args["odd-name"]`,
comparisons, `and`/`or`/`not`, arithmetic, indexing, a conditional, and the functions in `FUNCTIONS`); anything
else (attributes, methods, lambdas, comprehensions, f-strings, `**`, other calls) is refused then, with the
column. That tree is evaluated by `simpleeval`, which bounds what is left (string and number sizes). A predicate
reads only the arguments: no clock, no environment, no state.

Does not guarantee: that it is true or false for every call. One whose evaluation fails (a comparison of a
number with a missing argument, an index out of range) or that yields anything but a boolean raises
`PredicateError`, and the gate that holds it then applies (fails closed).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from simpleeval import DEFAULT_OPERATORS, EvalWithCompoundTypes, InvalidExpression

ARGUMENTS = "args"
"""The name of all the call's arguments, for one whose name is not an identifier: `args["max-price"]`."""


def _lower(text: str) -> str:
    return text.lower()


def _upper(text: str) -> str:
    return text.upper()


def _startswith(text: str, prefix: str) -> bool:
    return text.startswith(prefix)


def _endswith(text: str, suffix: str) -> bool:
    return text.endswith(suffix)


FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "len": len,
    "lower": _lower,
    "upper": _upper,
    "startswith": _startswith,
    "endswith": _endswith,
    "min": min,
    "max": max,
    "abs": abs,
}

_NODES: tuple[type[ast.AST], ...] = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Is,
    ast.IsNot,
    ast.IfExp,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Subscript,
    ast.List,
    ast.Tuple,
    ast.Call,
)


def _numeric(operation: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`%` and `//` of numbers only: `"%0999999999d" % 1` would build a gigabyte of text (simpleeval bounds `*` and
    `+` of strings, not formatting)."""

    def checked(left: Any, right: Any) -> Any:
        if not (isinstance(left, int | float) and isinstance(right, int | float)):
            raise TypeError(f"{operation.__name__} takes numbers, not {type(left).__name__} and {type(right).__name__}")
        return operation(left, right)

    return checked


_OPERATORS = {**DEFAULT_OPERATORS, ast.Mod: _numeric(operator.mod), ast.FloorDiv: _numeric(operator.floordiv)}


class PredicateError(ValueError):
    """A `when` that cannot be read (said at start), or that could not decide a call (the gate then applies)."""


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled expression over a call's arguments: `expression(arguments)` is its value (a grant's scope)."""

    source: str
    names: frozenset[str]
    """The arguments it reads, by name (`amount`, or `args["max-price"]`)."""
    _tree: ast.AST

    @classmethod
    def compile(cls, source: str) -> Self:
        text = source.strip()
        if not text:
            raise PredicateError("the predicate is empty")
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as error:
            where = f" at column {error.offset}" if error.offset else ""
            raise PredicateError(f"{text!r} is not an expression{where}: {error.msg}") from None
        except (RecursionError, MemoryError):
            raise PredicateError(f"the predicate nests too deeply ({len(text)} characters)") from None
        names: set[str] = set()
        for node in ast.walk(tree):
            _check(node, text, names)
        return cls(text, frozenset(names), tree.body)

    def unknown(self, known: Iterable[str]) -> list[str]:
        """The names it reads that are not among `known` (a tool's input schema's properties), sorted."""
        return sorted(self.names - set(known))

    def __call__(self, arguments: Mapping[str, Any]) -> Any:
        names = {name: arguments.get(name) for name in self.names}
        names[ARGUMENTS] = _Arguments(arguments)
        evaluator = EvalWithCompoundTypes(operators=dict(_OPERATORS), functions=dict(FUNCTIONS), names=names)
        evaluator.functions = dict(FUNCTIONS)  # without the list/dict/set constructors it adds
        try:
            return evaluator.eval(self.source, previously_parsed=self._tree)
        except (InvalidExpression, ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as error:
            raise PredicateError(f"{self.source!r} could not be decided: {type(error).__name__}: {error}") from None


class Predicate(Expression):
    """A compiled `when`: `predicate(arguments)` says whether the gate applies to a call with these arguments."""

    __slots__ = ()

    def __call__(self, arguments: Mapping[str, Any]) -> bool:
        result = super().__call__(arguments)
        if not isinstance(result, bool):
            raise PredicateError(f"{self.source!r} gave {type(result).__name__} {result!r}, not true or false")
        return result


class _Arguments(dict[str, Any]):
    """`args`: every argument by its name; one the call does not have is `None`, as a missing plain name is."""

    def __missing__(self, key: str) -> None:
        return None


def _check(node: ast.AST, text: str, names: set[str]) -> None:
    column = getattr(node, "col_offset", None)
    where = f" (column {column + 1})" if column is not None else ""
    if not isinstance(node, _NODES):
        raise PredicateError(f"{text!r}: {_refused(node)}{where}")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            raise PredicateError(f"{text!r}: {_refused(node.func)}{where}")
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            offered = ", ".join(FUNCTIONS)
            raise PredicateError(f"{text!r}: only these functions can be called: {offered}{where}")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise PredicateError(f"{text!r}: {node.func.id}() takes its arguments by position only{where}")
    elif isinstance(node, ast.Name):
        if node.id != ARGUMENTS and node.id not in FUNCTIONS:
            names.add(node.id)
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == ARGUMENTS:
        if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            raise PredicateError(f"{text!r}: {ARGUMENTS}[...] takes an argument's name, in quotes{where}")
        names.add(node.slice.value)
    elif isinstance(node, ast.Constant) and not isinstance(node.value, str | int | float | bool | type(None)):
        raise PredicateError(f"{text!r}: {type(node.value).__name__} literals are not available{where}")


def _refused(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"attributes and methods are not available (.{node.attr}); use a function such as lower(x)"
    if isinstance(node, ast.Pow):
        return "** is not available"
    if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
        return "lambdas and comprehensions are not available"
    if isinstance(node, ast.NamedExpr):
        return "assignments are not available"
    if isinstance(node, ast.JoinedStr | ast.FormattedValue):
        return "f-strings are not available"
    return f"{type(node).__name__} is not available in a predicate"
