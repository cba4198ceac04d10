"""Tool-use answers: the calls in raw model output matched against the gold calls, BFCL-style (an AST match on the
parsed calls, checked against the tools' JSON schemas, never by running them).

    from forge.evals.tool_calls import score_tool_calls
    tools = [{"type": "function", "function": {"name": "top_k", "parameters": {
        "type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]}}}]
    score_tool_calls(tools, [{"name": "top_k", "arguments": {"k": 3}}], prediction)

The calls are read with forge/chat.py (the one home of the ``<tool_call>`` format; calls written inside the
reasoning are not made, so only those after ``</think>`` count). A prediction is correct when its calls are the gold
calls in any order (the same multiset) and each call

- names the gold call's function, a tool in ``tools``;
- gives every required parameter and no parameter the schema does not declare;
- gives values of the schema's type: ``integer`` takes ints (not bools, not "3"), ``number`` ints or floats,
  ``string``, ``boolean``, ``array`` (items checked), ``object`` (declared properties checked); BFCL's Python type
  names (``float``, ``dict``, ``tuple``, ``any``) are read too, and an ``enum`` is enforced;
- gives the gold values (strings compared exactly, numbers by value: ``3`` equals ``3.0``);
- leaves out an optional parameter only when the gold leaves it out or gives its schema default, and gives one the
  gold leaves out only with its schema default.

A gold call may also carry ``alternatives``, ``{argument: [values]}``: every value that counts as right for that
argument (BFCL's possible answers, corpora/PROVENANCE.md). An argument listed there may be given with any of its values
and with no other, the schema default included; it may still be left out only where the gold leaves it out (or gives
its default), so ``{"arguments": {}, "alternatives": {"unit": ["km"]}}`` reads "``unit`` may be left out or be
``"km"``", and an empty list "must be left out".

The reason names the first mismatch, e.g. ``call 1: argument 'k' is a string, expected integer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forge.chat import parse_assistant_text
from forge.evals.score import Score

_TYPE_NAMES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
               "str": "string", "bool": "boolean"}
_MISSING = object()


def _spec(tool: Mapping) -> Mapping:
    """The function spec of an OpenAI tool (``{"type": "function", "function": {...}}``) or of a bare function."""
    return tool.get("function", tool)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else type(value).__name__


def type_error(value: Any, schema: Mapping, where: str) -> str | None:
    """Why ``value`` does not fit the JSON schema ``schema`` (``where`` names it in the message), or None."""
    expected = schema.get("type")
    if isinstance(expected, list):  # ["string", "null"]: any of them
        errors = [type_error(value, {**schema, "type": t}, where) for t in expected]
        return None if any(e is None for e in errors) else errors[0]
    expected = _TYPE_NAMES.get(expected, expected)
    kind = _kind(value)
    if expected in (None, "any"):
        pass
    elif expected == "number":
        if kind not in ("integer", "number"):
            return f"{where} is {_article(kind)}, expected number"
    elif kind != expected:
        return f"{where} is {_article(kind)}, expected {expected}"
    if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
        return f"{where} is {value!r}, not one of {schema['enum']!r}"
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            if err := type_error(item, schema["items"], f"{where}[{i}]"):
                return err
    if kind == "object":
        properties = schema.get("properties") or {}
        for key, item in value.items():
            if key in properties and (err := type_error(item, properties[key], f"{where}.{key}")):
                return err
    return None


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _equal(a: Any, b: Any) -> bool:
    """JSON equality that keeps booleans apart from numbers (Python's ``True == 1`` does not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def call_mismatch(call: Mapping, gold: Mapping, tools: Mapping[str, Mapping]) -> str | None:
    """Why the predicted ``call`` (``{"name", "arguments"}``) is not the ``gold`` call (``{"name", "arguments"}``
    and optionally ``"alternatives"``, see the module docstring), or None when it is."""
    name, gold_name = call["name"], gold["name"]
    if name != gold_name:
        return f"function {name!r}, expected {gold_name!r}"
    if name not in tools:
        return f"function {name!r} is not one of the tools"
    parameters = _spec(tools[name]).get("parameters") or {}
    properties: Mapping = parameters.get("properties") or {}
    args: Mapping = call.get("arguments") or {}
    gold_args: Mapping = gold.get("arguments") or {}
    alternatives: Mapping[str, Sequence] = gold.get("alternatives") or {}
    for key in args:
        if key not in properties:
            return f"argument {key!r} is not a parameter of {name!r}"
    for key in parameters.get("required") or []:
        if key not in args:
            return f"missing required argument {key!r}"
    for key, schema in properties.items():
        value, gold_value = args.get(key, _MISSING), gold_args.get(key, _MISSING)
        if value is not _MISSING and (err := type_error(value, schema, f"argument {key!r}")):
            return err
        default = schema.get("default", _MISSING)
        if value is not _MISSING and key in alternatives:
            accepted = [*alternatives[key], *([] if gold_value is _MISSING else [gold_value])]
            if not any(_equal(value, option) for option in accepted):
                if not accepted:
                    return f"argument {key!r} is given, the gold leaves it out"
                return f"argument {key!r} is {value!r}, expected one of {alternatives[key]!r}"
        elif value is _MISSING:
            if gold_value is not _MISSING and not (default is not _MISSING and _equal(gold_value, default)):
                return f"missing argument {key!r}"
        elif gold_value is _MISSING:
            if default is _MISSING or not _equal(value, default):
                return f"argument {key!r} is given, the gold leaves it out"
        elif not _equal(value, gold_value):
            return f"argument {key!r} is {value!r}, expected {gold_value!r}"
    return None


def _matching(ok: list[list[bool]]) -> dict[int, int]:
    """A maximum pairing of predicted calls (rows) with distinct gold calls (columns) they match, as
    ``{gold: predicted}`` (Kuhn's augmenting paths; a handful of calls per row)."""
    owner: dict[int, int] = {}

    def place(row: int, seen: set[int]) -> bool:
        for col, fits in enumerate(ok[row]):
            if fits and col not in seen:
                seen.add(col)
                if col not in owner or place(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    for row in range(len(ok)):
        place(row, set())
    return owner


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def score_tool_calls(tools: Sequence[Mapping], gold_calls: Sequence[Mapping], prediction: str) -> Score:
    """Are the calls in ``prediction`` (raw model output) the ``gold_calls``, in any order? (module docstring)"""
    calls = [c.model_dump() for c in parse_assistant_text(prediction).tool_calls]
    by_name = {_spec(t)["name"]: t for t in tools}
    if len(calls) != len(gold_calls):
        return Score.wrong(f"{_calls(len(calls))}, expected {len(gold_calls)}", calls)
    reasons = [[call_mismatch(call, gold, by_name) for gold in gold_calls] for call in calls]
    owner = _matching([[r is None for r in row] for row in reasons])
    if len(owner) == len(calls):
        return Score.right(calls)
    # The first call left without a gold call, against the first gold call left without a predicted one.
    call = min(set(range(len(calls))) - set(owner.values()))
    gold = min(set(range(len(gold_calls))) - set(owner))
    return Score.wrong(f"call {call + 1}: {reasons[call][gold]}", calls)
