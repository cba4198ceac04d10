"""The multiple-choice (science) scorer: the chosen letter in raw output, compared with the gold letter.

PYTHONPATH=$PWD .venv/bin/pytest tests/evals/test_choice_scorer.py -q
"""

import pytest

from forge.evals.choice import LETTERS, extract_letter, score_choice


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("(B)", "B"),  # parenthesized
        ("B.", "B"),  # letter and period
        ("Answer: B", "B"),  # stated
        ("the answer is (b)", "B"),  # lower case, parenthesized
        ("**B**", "B"),  # bold
        ("Weighing both options, I pick B", "B"),  # a trailing capital
        ("Answer: **D**", "D"),  # stated and bold
        ("The correct answer is option C.", "C"),  # "option"
        ("(A) is tempting, but (C) fits the data.", "C"),  # the last parenthesized letter
        ("<think>maybe (A)</think>The answer is C", "C"),  # the reasoning's letter is not the choice
        ("the answer is j.", "J"),  # the tenth option
        ("I think the answer is a good one", None),  # the article "a" is no choice
        ("A cat sat on the mat.", None),  # nor is a sentence's first word
        ("no idea", None),  # nothing
    ],
)
def test_extract_letter(text, letter):
    assert extract_letter(text) == letter


def _forms(letter: str) -> list[str]:
    return [f"({letter})", f"{letter}.", f"Answer: {letter}", f"the answer is ({letter.lower()})", f"**{letter}**",
            f"After elimination the best option is {letter}"]


def test_every_gold_letter_in_every_form_scores_100_percent_and_a_wrong_letter_0_percent():
    right = [score_choice(g, text) for g in LETTERS for text in _forms(g)]
    assert all(s.correct for s in right), [s for s in right if not s.correct]
    # The next letter round the options, in the same forms.
    wrong = [score_choice(g, text) for g, o in zip(LETTERS, LETTERS[1:] + LETTERS[0]) for text in _forms(o)]
    assert not any(s.correct for s in wrong)
    assert wrong[0].reason == "wrong letter: B, expected A"
    assert score_choice("A", "I cannot tell.").reason == "no letter found"
