"""``forge run --remote``: the recipe as a run of the ``recipe-nightly`` deployment on a Prefect server (a team's,
or ``forge stack up``'s), picked up by a worker of its work pool, followed from the terminal.

    state = run_remote("ci", None, echo=print)   # submit, print the run's page and its log lines, wait for the end

The terminal shows what the run's page shows: state changes and Forge's log lines (stage starts and ends,
training steps), as the worker sends them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flows.links import flow_run_url

DEPLOYMENT = "recipe/recipe-nightly"
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def run_remote(profile: str, overrides: dict[str, Any] | None, *, echo: Callable[[str], None] = print,
               poll_s: float = 2.0, timeout_s: float | None = None) -> str:
    """Create a run of :data:`DEPLOYMENT` with ``profile`` and ``overrides``, echo its page, its state changes and
    its log lines until it ends; returns the final state's type (``COMPLETED``…)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.deployments import run_deployment

    parameters: dict[str, Any] = {"profile": profile}
    if overrides:
        parameters["overrides"] = overrides
    run = run_deployment(DEPLOYMENT, parameters=parameters, timeout=0)
    echo(f"submitted: {flow_run_url(str(run.id))}")  # named recipe·<profile>·<id> once it starts
    seen, shown, ended = None, 0, None
    started = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(run.id)
            state = run.state.type.value if run.state else "PENDING"
            if state != seen:
                echo(f"state: {run.state.name if run.state else state}")
                seen = state
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])),
                                    offset=shown, sort=LogSort.TIMESTAMP_ASC)
            for line in logs:
                echo(line.message)
            shown += len(logs)
            if ended is not None and not logs:  # a poll after the end brought nothing more
                return ended
            if state in FINAL:
                ended = state
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{run.name} still {state} after {timeout_s:.0f} s: {flow_run_url(str(run.id))}")
            time.sleep(poll_s)
