"""Multiple-choice answers (the science suite): the chosen letter taken from raw model output, compared with the gold.

    from forge.evals.choice import extract_letter, score_choice
    extract_letter("... so the answer is (b).")     # "B"
    score_choice("B", "**B**")                      # Score(correct=True, ...)

Gold letters run A–J (ten options, as in MMLU-Pro and GPQA-style sets). Only the text after ``</think>`` is read
when the output has one. The letter is, in this order: the last "answer is X" / "Answer: X" (any case, with or
without parentheses or bold), else the last bold ``**X**``, else the last ``(X)``, else the last line that starts
with ``X.`` / ``X)``, else a capital letter standing alone at the very end. A lower-case letter counts only after
"answer" or in parentheses, where it cannot be the English article "a".
"""

from __future__ import annotations

import re

from forge.data.schemas import CHOICE_LETTERS
from forge.evals.score import Score

LETTERS = CHOICE_LETTERS  # A–J; the stored questions (ChoiceQuestion) are checked against the same letters

_STATED = re.compile(
    # Case-insensitive words, case-sensitive letters: "the answer is a good one" chooses nothing.
    r"(?i:answer\s*(?:is|:)\s*:?\s*(?:option\s+|choice\s+)?)\**\s*"
    r"(?:\(([A-Ja-j])\)|([A-J])\b|([a-j])(?=\s*[.)*]|\s*$))",
    re.MULTILINE,
)
_BOLD = re.compile(r"\*\*\s*\(?([A-J])\)?[.:]?\s*\*\*")
_PAREN = re.compile(r"\(([A-Ja-j])\)")
_LINE_START = re.compile(r"^\s*([A-J])[.)]", re.MULTILINE)
_TRAILING = re.compile(r"(?:^|[^\w])([A-J])[\s.)*]*$")


def _final_part(text: str) -> str:
    _head, closed, rest = text.rpartition("</think>")
    return rest if closed and rest.strip() else text


def extract_letter(text: str) -> str | None:
    """The chosen option letter (upper case) in raw model output, or None (see the module docstring)."""
    text = _final_part(text)
    stated = _STATED.findall(text)
    if stated:
        return next(g for g in stated[-1] if g).upper()
    for pattern in (_BOLD, _PAREN, _LINE_START):
        found = pattern.findall(text)
        if found:
            return found[-1].upper()
    trailing = _TRAILING.search(text)
    return trailing.group(1) if trailing else None


def score_choice(gold: str, prediction: str) -> Score:
    """Is the letter chosen in ``prediction`` the gold letter? Reasons: "no letter found", "wrong letter: X"."""
    letter = extract_letter(prediction)
    if letter is None:
        return Score.wrong("no letter found")
    if letter != gold.strip().upper():
        return Score.wrong(f"wrong letter: {letter}, expected {gold.strip().upper()}", letter)
    return Score.right(letter)
