"""Task caching that survives new runs and crashes, and notices code changes in the library.

Prefect's default cache key includes the flow-run id, so a new run after a crash would recompute everything
(docs/stack.md). Forge's tasks key on their inputs (minus the ``ctx`` argument: where to log, not what to compute),
the task's own source, and the source of the ``forge`` modules the task calls: a change to the training code
invalidates the training stage, a change to the README does not. Inputs are the typed stage results of
``forge/stages.py`` and the pydantic configs, which Prefect hashes by value.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE, CachePolicy

# Arguments that say where to log, not what to compute: never part of a cache key (registry.tracking.StageContext).
BOOKKEEPING_ARGS = ("ctx",)


LIBRARY_PACKAGES = ("forge", "registry")
# Keyed by value, not by source: a stage's configs are among its inputs, so an edit to forge/config.py (a new
# section, a description) must not invalidate every stage that imports it, while a changed default still does.
VALUE_MODULES = frozenset({"forge.config"})


def library_closure(modules: tuple[str, ...]) -> list[str]:
    """The named modules plus every Forge module they import, directly or through each other (sorted)."""
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name in VALUE_MODULES:
            continue
        seen.add(name)
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        stat = os.stat(spec.origin)
        todo += _library_imports(spec.origin, stat.st_mtime_ns, stat.st_size)
    return sorted(seen)


@functools.lru_cache(maxsize=1024)
def _library_imports(origin: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The Forge modules one source file imports, parsed once per version of the file: parsing was most of a cache
    key's cost (~0.3 s a stage on 2 loaded cores, bench/recipe_profile.py), and every stage computes one."""
    found: list[str] = []
    for node in ast.walk(ast.parse(Path(origin).read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return tuple(f for f in found if f.split(".")[0] in LIBRARY_PACKAGES and _is_module(f))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # "forge.data.schemas.ChatSample": a name inside a module, not a module
        return False


@dataclass
class LibrarySource(CachePolicy):
    """Cache key component: the source text of the named modules and of the Forge modules they import."""

    modules: tuple[str, ...] = field(default_factory=tuple)

    def compute_key(
        self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        h = hashlib.sha256()
        for name in library_closure(self.modules):
            h.update(name.encode())
            h.update(Path(importlib.util.find_spec(name).origin).read_bytes())
        return h.hexdigest()


def cached_task(*, name: str, modules: tuple[str, ...] = (), **options: Any):
    """A Prefect task with persisted results, keyed on inputs + task source + library source."""
    policy = INPUTS + TASK_SOURCE + LibrarySource(modules=tuple(modules))
    for arg in BOOKKEEPING_ARGS:
        policy = policy - arg
    return task(name=name, cache_policy=policy, persist_result=True, **options)
