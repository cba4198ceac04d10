"""The values that cross the sandbox boundary: plain values round-trip, nothing else leaves.

.venv/bin/pytest tests/code/test_wire.py -q
"""

import json
import math
from collections import Counter, OrderedDict

import pytest

from forge.code.wire import decode, encode


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -(2**80),
        "text",
        1.5,
        [1, [2, "x"]],
        (1, (2,)),
        {1, 2},
        frozenset(),
        {"a": 1, 2: (3,)},
        b"\x00\xff",
        1 + 2j,
    ],
)
def test_plain_values_round_trip_through_json(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is (set if type(value) is frozenset else type(value))


def test_non_finite_floats_round_trip():
    back = decode(json.loads(json.dumps(encode([math.inf, -math.inf, math.nan]))))
    assert back[:2] == [math.inf, -math.inf] and math.isnan(back[2])


@pytest.mark.parametrize(
    "value, expected",
    [
        (Counter("abca"), {"a": 2, "b": 1, "c": 1}),  # a dict subclass crosses as its items, a plain dict
        (OrderedDict([(1, 2)]), {1: 2}),  # same
    ],
)
def test_dict_subclasses_become_plain_dicts(value, expected):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == expected and type(back) is dict


class AlwaysEqual(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "value",
    [
        AlwaysEqual(1),  # an int subclass with a lying __eq__
        [object()],  # any other object, even nested
        range(3),  # not a plain container
        type("S", (str,), {})("x"),  # a str subclass
    ],
)
def test_everything_else_is_refused(value):
    with pytest.raises(TypeError):
        encode(value)


def test_deep_nesting_is_refused():
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(TypeError, match="nested"):
        encode(deep)
