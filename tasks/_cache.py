"""Task caching that survives new runs and crashes, and notices code changes in the library.

Prefect's default cache key includes the flow-run id, so a new run after a crash would recompute everything
(STACK.md). Forge's tasks key on their inputs (minus bookkeeping arguments such as the MLflow parent run id),
the task's own source, and the source of the ``forge`` modules the task calls: a change to the training code
invalidates the training stage, a change to the README does not.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE, CachePolicy

# Arguments that say where to log, not what to compute: never part of a cache key.
BOOKKEEPING_ARGS = ("parent_run_id", "lineage")


@dataclass
class LibrarySource(CachePolicy):
    """Cache key component: the source text of the named modules."""

    modules: tuple[str, ...] = field(default_factory=tuple)

    def compute_key(
        self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        h = hashlib.sha256()
        for name in self.modules:
            h.update(inspect.getsource(importlib.import_module(name)).encode())
        return h.hexdigest()


def cached_task(*, name: str, modules: tuple[str, ...] = (), **options: Any):
    """A Prefect task with persisted results, keyed on inputs + task source + library source."""
    policy = INPUTS + TASK_SOURCE + LibrarySource(modules=tuple(modules))
    for arg in BOOKKEEPING_ARGS:
        policy = policy - arg
    return task(name=name, cache_policy=policy, persist_result=True, **options)
