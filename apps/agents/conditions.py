"""Argument conditions: a tiny, safe expression language over a tool call's arguments.

A condition escalates an `auto` grant to `approve` when it is true, e.g.
`amount_cents > 5000` or `country not in ["US", "CA"] and amount_cents >= 100`.

Parsed with Python's `ast` and walked by our own evaluator; nothing is ever passed to
`eval`. Allowed: comparisons (`== != < <= > >= in not in`), `and`/`or`/`not`, parentheses,
argument names (top-level arguments, `customer.country` for a key of a nested object),
string/number/boolean/null literals (`true`/`false`/`null` or `True`/`False`/`None`) and
lists of literals.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_LENGTH = 500
MAX_NODES = 100

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_JSON_NAMES = {"true": True, "false": False, "null": None}


class ConditionError(ValueError):
    """The condition cannot be parsed or cannot be evaluated; the message says why, for people."""


@dataclass(frozen=True)
class Condition:
    source: str
    tree: ast.Expression

    @property
    def argument_names(self) -> set[str]:
        """Top-level argument names the condition reads."""
        names: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and node.id not in _JSON_NAMES:
                names.add(node.id)
        return names

    def evaluate(self, arguments: Mapping[str, Any]) -> bool:
        """True when the condition holds for these arguments. Raises ConditionError."""
        return bool(_eval(self.tree.body, arguments))


def parse_condition(source: str) -> Condition:
    """Parses and checks a condition. Raises ConditionError with a message fit for a form."""
    source = (source or "").strip()
    if not source:
        raise ConditionError("The condition is empty.")
    if len(source) > MAX_LENGTH:
        raise ConditionError(f"Keep conditions under {MAX_LENGTH} characters.")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ConditionError(f"Not a valid condition (column {exc.offset or 0}): {exc.msg}.") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ConditionError("This condition is too complex; split the rule or simplify it.")
    for node in nodes:
        _check_node(node)
    if not isinstance(tree.body, ast.Compare | ast.BoolOp | ast.UnaryOp):
        raise ConditionError("A condition must compare something, e.g. amount_cents > 5000.")
    return Condition(source=source, tree=tree)


_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare,
            ast.Name, ast.Load, ast.Constant, ast.List, ast.Tuple, ast.Attribute, *_COMPARE)


def _check_node(node: ast.AST) -> None:
    if not isinstance(node, _ALLOWED):
        what = {ast.Call: "function calls", ast.Subscript: "indexing", ast.BinOp: "arithmetic",
                ast.Lambda: "lambdas"}.get(type(node), type(node).__name__)
        raise ConditionError(f"Conditions may not use {what}; use comparisons joined by and/or.")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not (
            isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, int | float)):
        raise ConditionError("A minus sign is only allowed before a number.")
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        raise ConditionError(f"Argument names cannot start with an underscore ({node.id}).")
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            raise ConditionError(f"Keys cannot start with an underscore ({node.attr}).")
        if not isinstance(node.value, ast.Name | ast.Attribute):
            raise ConditionError("Only argument names may be followed by .key.")
    if isinstance(node, ast.Constant) and not isinstance(node.value, str | int | float | bool | type(None)):
        raise ConditionError("Only text, numbers, true/false and null are allowed as values.")
    if isinstance(node, ast.List | ast.Tuple) and not all(
            isinstance(e, ast.Constant) or (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))
            for e in node.elts):
        raise ConditionError("Lists in conditions may only hold literal values.")


def _eval(node: ast.AST, args: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, args) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, args)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.Compare):
        left = _eval(node.left, args)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, args)
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError:
                raise ConditionError(f"Cannot compare {_kind(left)} with {_kind(right)}.") from None
            left = right
        return True
    if isinstance(node, ast.Name):
        if node.id in _JSON_NAMES:
            return _JSON_NAMES[node.id]
        if node.id not in args:
            raise ConditionError(f"The call has no argument {node.id!r}.")
        return args[node.id]
    if isinstance(node, ast.Attribute):
        parent = _eval(node.value, args)
        if not isinstance(parent, Mapping) or node.attr not in parent:
            raise ConditionError(f"The argument has no key {node.attr!r}.")
        return parent[node.attr]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, args) for e in node.elts]
    raise ConditionError(f"Unsupported expression: {type(node).__name__}.")  # unreachable after parse


def _kind(value: Any) -> str:
    return {str: "text", int: "a number", float: "a number", bool: "true/false", type(None): "null",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
