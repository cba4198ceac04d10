"""The review store: trajectories, their turns with critic labels, reviewers (with logins and roles) and their
verdicts on turns and whole trajectories, assignments, an audit trail; agreement between people and the critic.

    from forge.review import open_store, session_scope, authenticate, queue, trajectory_view, record_verdict
"""

from forge.review.agreement import AgreementStat, cohen_kappa, critic_agreement, human_agreement, human_pair_agreement
from forge.review.auth import ROLES, UserError, authenticate, create_user, require_admin, user_for_oidc
from forge.review.repository import (
    DIMENSIONS,
    StaleVerdictError,
    add_trajectory,
    effective_verdicts,
    get_reviewer,
    list_pending,
    migrate,
    open_store,
    record_trajectory_verdict,
    record_verdict,
    review_digest,
    reviewed_trajectory,
    session_scope,
    trajectory_rejected,
)
from forge.review.views import (
    Progress,
    QueueItem,
    ToolCallView,
    TrajectoryVerdictView,
    TrajectoryView,
    TurnVerdictView,
    TurnView,
    assign_overlap,
    progress,
    queue,
    reviewer_names,
    trajectory_view,
)

__all__ = [
    "DIMENSIONS",
    "ROLES",
    "AgreementStat",
    "Progress",
    "QueueItem",
    "StaleVerdictError",
    "ToolCallView",
    "TrajectoryVerdictView",
    "TrajectoryView",
    "TurnVerdictView",
    "TurnView",
    "UserError",
    "add_trajectory",
    "assign_overlap",
    "authenticate",
    "cohen_kappa",
    "create_user",
    "critic_agreement",
    "effective_verdicts",
    "get_reviewer",
    "human_agreement",
    "human_pair_agreement",
    "list_pending",
    "migrate",
    "open_store",
    "progress",
    "queue",
    "record_trajectory_verdict",
    "record_verdict",
    "require_admin",
    "review_digest",
    "reviewed_trajectory",
    "reviewer_names",
    "session_scope",
    "trajectory_rejected",
    "trajectory_view",
    "user_for_oidc",
]
