"""Benchmark: the transformers backend's sampling at 16 prompts a call against ``generation.batch_size``, and code
RL's n samples per problem in rounds against in groups.

    .venv/bin/python bench/backend_batch.py --checkout DIR [--rounds 3] [--out bench/results/backend_batch.json]

``DIR`` is a checkout where the tiny recipe finished (its ``.forge/models`` and ``data/mixes``): trained checkpoints,
so rows stop where the recipe's rows stop. Two scenarios, the sides alternating per round in one process, every core:

- ``pairs``: the point-wise reward model's weak answers (tasks/rl.py): 240 prompts of the mix, the base model,
  48 new tokens at the profile's temperature and top-p, the backend at 16 prompts a call (its default before
  ``generation.batch_size``) against the profile's ``generation.batch_size``;
- ``code``: a code-RL filter's sampling (forge/code/data.py): the 44 RL drills × 8 from the stage-1 checkpoint,
  96 new tokens at T 1.0, in 8 rounds of the 44 prompts at 16 a call (``_sample`` before) against
  ``forge.code.data._sample`` (each problem's 8 rows side by side, whole groups a call, a repeated prompt prefilled
  once) at ``generation.batch_size``.

Both sides sample the same prompts with the same settings, not the same tokens (the rows are batched differently),
so each side's sampled characters are reported: the work done, which the speed-up must not owe to shorter answers.
Writes the JSON with the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from decode_attention import alternate, write_report

BASELINE_BATCH = 16  # TransformersBackend's default, what local_backend gave every stage before generation.batch_size


def _model(checkout: Path, prefix: str) -> str:
    found = sorted((checkout / ".forge" / "models").glob(f"{prefix}-*"))
    if not found:
        raise SystemExit(f"no {prefix}-* checkpoint under {checkout / '.forge/models'}: run the tiny recipe there")
    return str(found[-1])


def rounds_sample(backend, problems, n: int, max_new_tokens: int, seed: int) -> list[str]:
    """``_sample`` as it was: n calls of every problem's prompt once, each call its own seed."""
    prompts = [[{"role": "user", "content": p.prompt()}] for p in problems]
    out: list[str] = []
    for r in range(n):
        out += backend.generate(prompts, max_new_tokens=max_new_tokens, temperature=1.0, seed=seed * n + r)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench/results/backend_batch.json"))
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from forge.code.data import _sample
    from forge.config import load_profile
    from forge.data.mix import MixRows
    from forge.generation import local_backend
    from forge.training.pairs import build_rl_prompts
    from tasks.code import rl_problems

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = load_profile("tiny")
    gen, batch = cfg.generation, cfg.generation.batch_size
    load_before = os.getloadavg()
    scenarios = {}

    base = _model(args.checkout, "base")
    pw = cfg.pointwise_rl
    prompts = build_rl_prompts(MixRows(args.checkout / "data/mixes" / cfg.mix.name), AutoTokenizer.from_pretrained(base),
                               max_prompts=pw.forge_pairs, max_prompt_tokens=pw.grpo.max_prompt_length,
                               seed=f"{cfg.seed}:rm-pointwise")
    texts = [p["prompt"] for p in prompts]
    chars: dict[str, list[int]] = {}
    with local_backend(gen, base) as backend:
        def pairs(side: str, seed: int) -> float:
            backend.batch_size = BASELINE_BATCH if side == "batch16" else batch
            start = time.perf_counter()
            out = backend.generate(texts, max_new_tokens=pw.forge_pair_max_new_tokens, temperature=gen.temperature,
                                   top_p=gen.top_p, seed=seed)
            chars.setdefault(side, []).append(sum(map(len, out)))
            return time.perf_counter() - start

        scenarios["pairs"] = report(alternate(pairs, ["batch16", f"batch{batch}"], args.rounds), chars,
                                    f"{len(texts)} prompts x {pw.forge_pair_max_new_tokens} new tokens, base model")

    problems = rl_problems(cfg.code_rl)
    n, new = cfg.code_rl.num_rollouts, cfg.code_rl.max_new_tokens
    chars = {}
    with local_backend(gen, _model(args.checkout, "code-rl-stage1")) as backend:
        def code(side: str, seed: int) -> float:
            start = time.perf_counter()
            if side == "rounds16":
                backend.batch_size = BASELINE_BATCH
                out = rounds_sample(backend, problems, n, new, seed)
            else:
                backend.batch_size = batch
                out = [t for texts in _sample(backend, problems, n, 1.0, new, seed).values() for t in texts]
            chars.setdefault(side, []).append(sum(map(len, out)))
            return time.perf_counter() - start

        scenarios["code"] = report(alternate(code, ["rounds16", f"groups{batch}"], args.rounds), chars,
                                   f"{len(problems)} drills x {n} x {new} new tokens, code RL stage-1 checkpoint")
    command = "python bench/backend_batch.py " + " ".join(sys.argv[1:])
    write_report(args.out, "transformers backend: batch size and grouped code sampling", command, load_before,
                 scenarios)
    for name, row in scenarios.items():
        print(name, row["median_s"], "speed-up", row["speedup"])


def report(seconds: dict[str, list[float]], chars: dict[str, list[int]], what: str) -> dict:
    """Per side the seconds (the warm-up round left out), their median, the characters sampled per timed round;
    the first side's median over the second's."""
    first, second = seconds
    median = {side: statistics.median(s) for side, s in seconds.items()}
    return {"what": what, "seconds": {side: [round(x, 3) for x in s] for side, s in seconds.items()},
            "median_s": {side: round(m, 3) for side, m in median.items()},
            "chars_sampled": {side: c[1:] for side, c in chars.items()},
            "speedup": round(median[first] / median[second], 3)}


if __name__ == "__main__":
    main()
