"""A safe arithmetic evaluator: the ``calculator`` tool behind GSM8K's ``<<48/2=24>>`` annotations.

Parses with :mod:`ast` and walks only numbers, + - * / // % ** and parentheses (no names, calls or
attributes), so tool responses in the tool-use pool are computed, never copied, and never run ``eval``.

    >>> evaluate("48/2")
    24.0
    >>> format_number(evaluate("48/2"))
    '24'
"""

from __future__ import annotations

import ast
import math
import operator

from forge import pyast

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 100  # 10**10**10 would hang the process; GSM8K never needs more than small powers


class CalcError(ValueError):
    """The expression is not plain arithmetic (or divides by zero, or is too large)."""


def _walk(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _walk(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalcError(f"exponent {right} too large")
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError as err:
            raise CalcError("division by zero") from err
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_walk(node.operand))
    raise CalcError(f"unsupported syntax: {type(node).__name__}")


def evaluate(expression: str) -> float:
    """Value of an arithmetic expression; ``CalcError`` for anything else."""
    text = expression.strip().replace("×", "*").replace("÷", "/")
    if not text:
        raise CalcError("empty expression")
    try:
        tree = pyast.parse(text, mode="eval")
    except SyntaxError as err:
        raise CalcError(f"not an arithmetic expression: {expression!r}") from err
    value = _walk(tree)
    if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
        raise CalcError(f"result is not a finite real number: {value!r}")
    return value


def format_number(value: float) -> str:
    """Integers without a decimal point; other values with up to 6 decimals, trailing zeros dropped."""
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def parse_number(text: str) -> float | None:
    """GSM8K's annotated results: ``1,200`` / ``$5`` / ``24.50`` → float; None when not a number."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None
