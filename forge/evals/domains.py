"""The paper's evaluation domains (§3) and how Forge records an eval of one, the contract between the eval tasks
(tasks/evals.py), the promotion gate's profile section and the reports (forge/evals/report.py).

    from forge.evals.domains import DOMAINS, HEADLINE, ITEMS_ARTIFACT, run_tag
    HEADLINE["math"]          # "math_accuracy": the one number a domain is plotted and compared by

Every eval suite's MLflow run carries the tags ``forge.model`` (``<name>/<version>``) and ``forge.eval_suite`` (the
suite), logs its per-item table as ``eval_items.json`` (columns ``id``, ``source``, ``score`` in [0, 1], then the
suite's own) and stores its summary on the version as ``metric.*`` tags and its run id as the version tag
``eval.<suite>.run_id``, so a version's items can be found from the registry alone.
"""

from __future__ import annotations

# Suite → the paper's domain it measures. HumanEval and the code suite (MBPP + Forge problems) both measure code.
SUITE_DOMAIN: dict[str, str] = {
    "humaneval": "code",
    "code": "code",
    "math": "math",
    "science": "science",
    "alignment": "alignment",
    "tool_use": "tool_use",
    "deep_search": "deep_search",
}
DOMAINS: tuple[str, ...] = ("code", "math", "science", "alignment", "tool_use", "deep_search")
# The headline metric of each domain (a version tag ``metric.<name>``), in [0, 1], higher is better.
HEADLINE: dict[str, str] = {
    "code": "code_pass_at_1",
    "math": "math_accuracy",
    "science": "science_accuracy",
    "alignment": "alignment_win_rate",
    "tool_use": "tool_use_accuracy",
    "deep_search": "deep_search_accuracy",
}
MODEL_TAG = "forge.model"
SUITE_TAG = "forge.eval_suite"
ITEMS_ARTIFACT = "eval_items.json"


def run_tag(suite: str) -> str:
    """The version tag holding the run id of ``suite``'s latest eval of that version."""
    return f"eval.{suite}.run_id"
