"""The tool-use scorer: predicted calls (Forge's format, written with forge/chat.py) matched to the gold calls
against the tools' JSON schemas, in any order.

PYTHONPATH=$PWD .venv/bin/pytest tests/evals/test_tool_call_scorer.py -q
"""

import pytest

from forge.chat import format_assistant_text
from forge.evals.tool_calls import score_tool_calls

TOOLS = [
    {"type": "function", "function": {
        "name": "search", "description": "Search the offline index.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "k": {"type": "integer", "default": 5},
            "exact": {"type": "boolean", "default": False},
            "fields": {"type": "array", "items": {"type": "string"}},
            "sort": {"type": "string", "enum": ["relevance", "date"]},
        }, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "convert", "description": "Convert an amount between units.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"},
            "unit": {"type": "string"},
            "options": {"type": "object", "properties": {"round": {"type": "integer"}}},
        }, "required": ["amount", "unit"]}}},
]
GOLD = [
    {"name": "search", "arguments": {"query": "Nanbeige tokenizer", "k": 3}},
    {"name": "convert", "arguments": {"amount": 2.5, "unit": "km"}},
]


def said(*calls, reasoning="I need two lookups.") -> str:
    """Raw model output in Forge's format holding ``calls``."""
    return format_assistant_text("", reasoning, list(calls))


def search(**args):
    return {"name": "search", "arguments": {"query": "Nanbeige tokenizer", "k": 3, **args}}


def convert(**args):
    return {"name": "convert", "arguments": {"amount": 2.5, "unit": "km", **args}}


def without(call, key):
    return {"name": call["name"], "arguments": {k: v for k, v in call["arguments"].items() if k != key}}


RIGHT = [
    said(search(), convert()),  # exactly the gold
    said(convert(), search()),  # another order
    said(search(exact=False), convert()),  # an optional parameter at its schema default
    said(search(), convert(amount=2.5)),  # the same value written again
]
WRONG = [
    (said(search()), "1 call, expected 2"),  # a call missing
    (said(search(), convert(), search()), "3 calls, expected 2"),  # a call too many
    (said(search(k="3"), convert()), "call 1: argument 'k' is a string, expected integer"),  # "3" for an int
    (said(search(k=3.0), convert()), "call 1: argument 'k' is a number, expected integer"),  # a float for an int
    (said(search(k=4), convert()), "call 1: argument 'k' is 4, expected 3"),  # a wrong value
    (said(without(search(), "query"), convert()), "call 1: missing required argument 'query'"),  # required gone
    (said(without(search(), "k"), convert()), "call 1: missing argument 'k'"),  # gold's non-default value dropped
    (said(search(limit=3), convert()), "call 1: argument 'limit' is not a parameter of 'search'"),  # unknown
    (said(search(exact=True), convert()), "call 1: argument 'exact' is given, the gold leaves it out"),  # not default
    (said(search(exact=1), convert()), "call 1: argument 'exact' is an integer, expected boolean"),  # 1 for a bool
    (said(search(sort="size"), convert()), "call 1: argument 'sort' is 'size', not one of ['relevance', 'date']"),
    (said(search(fields=["a", 2]), convert()), "call 1: argument 'fields'[1] is an integer, expected string"),
    (said(search(), convert(options={"round": "2"})),
     "call 2: argument 'options'.round is a string, expected integer"),  # nested property typed
    (said(search(), convert(unit="mi")), "call 2: argument 'unit' is 'mi', expected 'km'"),  # string value
    (said(search(), {"name": "translate", "arguments": {}}), "call 2: function 'translate', expected 'convert'"),
    (said(search(query="nanbeige tokenizer"), convert()),
     "call 1: argument 'query' is 'nanbeige tokenizer', expected 'Nanbeige tokenizer'"),  # strings exact
    ("I would search for it.", "0 calls, expected 2"),  # no call at all
    (format_assistant_text("", said(search(), convert(), reasoning=None), []), "0 calls, expected 2"),  # in thought
]


def test_right_calls_score_100_percent():
    scores = [score_tool_calls(TOOLS, GOLD, text) for text in RIGHT]
    assert all(s.correct for s in scores), [s.reason for s in scores]


@pytest.mark.parametrize(("prediction", "reason"), WRONG)
def test_perturbed_calls_are_wrong_and_say_why(prediction, reason):
    score = score_tool_calls(TOOLS, GOLD, prediction)
    assert (score.correct, score.reason) == (False, reason)


def test_an_int_for_a_number_parameter_is_fine():
    gold = [{"name": "convert", "arguments": {"amount": 3.0, "unit": "km"}}]
    assert score_tool_calls(TOOLS, gold, said({"name": "convert", "arguments": {"amount": 3, "unit": "km"}})).correct


def test_the_same_call_twice_must_be_predicted_twice():
    gold = [search(), search(k=4)]
    assert score_tool_calls(TOOLS, gold, said(search(k=4), search())).correct
    score = score_tool_calls(TOOLS, gold, said(search(), search()))
    assert (score.correct, score.reason) == (False, "call 2: argument 'k' is 3, expected 4")


# BFCL's possible answers as alternatives (corpora/bfcl/): an amount of 2.5 or "5/2", a unit that may be left out or
# be "km" or "kilometres", and options that must be left out (an empty list).
ALT_TOOLS = [{"type": "function", "function": {
    "name": "convert", "description": "Convert an amount between units.",
    "parameters": {"type": "object", "properties": {
        "amount": {"description": "A number or a fraction, any type."},
        "unit": {"type": "string"},
        "options": {"type": "object"},
    }, "required": ["amount"]}}}]
ALT_GOLD = [{"name": "convert", "arguments": {"amount": 2.5},
             "alternatives": {"amount": [2.5, "5/2"], "unit": ["km", "kilometres"], "options": []}}]


@pytest.mark.parametrize(("arguments", "reason"), [
    ({"amount": 2.5}, None),  # the gold itself, the optional unit left out
    ({"amount": 2.5, "unit": "km"}, None),  # the optional unit given with its first value
    ({"amount": 2.5, "unit": "kilometres"}, None),  # ... or with another listed value
    ({"amount": "5/2"}, None),  # an alternative of a value the gold gives
    ({"amount": 2.5, "unit": "mi"}, "call 1: argument 'unit' is 'mi', expected one of ['km', 'kilometres']"),
    ({"amount": 3}, "call 1: argument 'amount' is 3, expected one of [2.5, '5/2']"),  # outside the alternatives
    ({"amount": 2.5, "options": {"round": 1}}, "call 1: argument 'options' is given, the gold leaves it out"),
    ({"unit": "km"}, "call 1: missing required argument 'amount'"),  # alternatives make nothing optional
])
def test_alternatives_count_as_right_and_nothing_else(arguments, reason):
    score = score_tool_calls(ALT_TOOLS, ALT_GOLD, said({"name": "convert", "arguments": arguments}))
    assert (score.correct, score.reason) == (reason is None, reason)
