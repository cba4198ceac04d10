"""forge.atomic (temp + rename) and the calculator tool's safe evaluator."""

from __future__ import annotations

import pytest

from forge.atomic import atomic_dir, atomic_write_text
from forge.data.calc import CalcError, evaluate, format_number


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError):
        from forge.atomic import atomic_open
        with atomic_open(target) as fh:
            fh.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_dir_replaces_whole_dir_or_nothing(tmp_path):
    out = tmp_path / "mix"
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(ValueError), atomic_dir(out) as tmp:
        (tmp / "b").write_text("2")
        raise ValueError("crash")
    assert sorted(p.name for p in out.iterdir()) == ["a"]
    with atomic_dir(out) as tmp:
        (tmp / "c").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["c"]  # replaced, not merged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix"]


@pytest.mark.parametrize("expr, expected", [
    ("48/2", "24"),          # GSM8K's first annotation
    ("12*.5", "6"),          # leading-dot decimal
    ("(3+4)*2-1", "13"),     # precedence and parentheses
    ("2**10", "1024"),       # power
    ("10/4", "2.5"),         # non-integer result
    ("-5+2", "-3"),          # unary minus
])
def test_calculator_values(expr, expected):
    assert format_number(evaluate(expr)) == expected


@pytest.mark.parametrize("expr", ["__import__('os')", "x+1", "1/0", "9**9**9", "", "2 +"])
def test_calculator_refuses_non_arithmetic(expr):
    with pytest.raises(CalcError):
        evaluate(expr)
