"""The review store: trajectories, their turns with critic labels, reviewers' verdicts and an audit trail.

    from forge.review import open_store, record_verdict
"""

from forge.review.repository import (
    StaleVerdictError,
    add_trajectory,
    effective_verdicts,
    get_reviewer,
    list_pending,
    open_store,
    record_verdict,
    reviewed_trajectory,
)

__all__ = [
    "StaleVerdictError",
    "add_trajectory",
    "effective_verdicts",
    "get_reviewer",
    "list_pending",
    "open_store",
    "record_verdict",
    "reviewed_trajectory",
]
