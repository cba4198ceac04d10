"""Measurement: code RL stage 2's held-out check, per drill operation: which answers each checkpoint writes.

    PYTHONPATH=. HF_HUB_OFFLINE=1 .venv/bin/python bench/code_rl_check_ops.py CHECKPOINT [CHECKPOINT ...]

Stage 2's check (tasks/code.py, :class:`forge.code.data.PolicyCheck`) reads three shares over all operations; this
samples and judges each checkpoint's answers as the check does (:func:`forge.code.data.judged_answers`, the profile's
samples per problem, temperature, length and seed, so the answers are the check's own) and counts, per operation,
the optimal, slow and wrong ones, with the commonest answer of each kind. It is how the docs/architecture.md
paragraph on the optimal answers was read (a Zen 4 host, 2026-11-30: `repeat`'s and `running-max`'s quadratic
answers turning into mistakes). Prints a table per checkpoint; writes nothing.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict

from forge.code.data import judged_answers
from forge.config import load_profile
from forge.generation import local_backend
from tasks.code import rl_problems, stage_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="policy folders, e.g. .forge/models/code-rl-stage2-*")
    parser.add_argument("--profile", default="tiny")
    args = parser.parse_args()
    cfg = load_profile(args.profile)
    stage2 = stage_config(cfg.code_rl, 2)
    held_out = rl_problems(stage2, "eval")
    for checkpoint in args.checkpoints:
        with local_backend(cfg.generation, checkpoint) as backend:
            answers = judged_answers(backend, held_out, stage2.check_samples, cfg.generation.temperature,
                                     stage2.max_new_tokens, cfg.seed)
        counts: dict[str, Counter] = defaultdict(Counter)
        commonest: dict[tuple[str, str], Counter] = defaultdict(Counter)
        for c, kind in answers:
            op = c.problem_id.split("/")[1]
            counts[op][kind] += 1
            commonest[op, kind][c.completion.strip().removeprefix("```python").strip("`\n ").splitlines()[-1]] += 1
        print(checkpoint)
        for op in sorted(counts):
            cells = [f"{kind} {counts[op][kind]:2d}" + (f" ({commonest[op, kind].most_common(1)[0][0]})"
                                                         if counts[op][kind] else "")
                     for kind in ("optimal", "slow", "wrong")]
            print(f"  {op:12s} " + " · ".join(cells))
        total = sum(counts.values(), Counter())
        print(f"  {'all':12s} optimal {total['optimal']} · slow {total['slow']} · wrong {total['wrong']} "
              f"of {total.total()}")


if __name__ == "__main__":
    main()
