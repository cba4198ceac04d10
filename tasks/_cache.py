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
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE, TASK_SOURCE, CachePolicy, Inputs

from forge import pyast

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
        origin = module_file(name)
        if origin is None:
            continue
        stat = os.stat(origin)
        todo += _library_imports(str(origin), stat.st_mtime_ns, stat.st_size)
    return sorted(seen)


@functools.lru_cache(maxsize=1024)
def _library_imports(origin: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The Forge modules one source file imports, read once per version of the file (a long-lived worker computes
    many keys). Only the import statements are parsed, not the whole file: parsing every module of a closure was
    most of a stage's cache key (0.2 s for the code stages' 23 modules)."""
    found: list[str] = []
    for statement in import_statements(Path(origin).read_text()):
        if isinstance(statement, ast.Import):
            found += [alias.name for alias in statement.names]
        elif statement.module and statement.level == 0:
            found += [statement.module] + [f"{statement.module}.{alias.name}" for alias in statement.names]
    return tuple(f for f in found if f.split(".")[0] in LIBRARY_PACKAGES and module_file(f) is not None)


_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+\.*[\w.]*[ \t]+import\b|import[ \t]+\w)", re.MULTILINE)


def import_statements(source: str) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``source``, at any depth (the library imports lazily inside functions), each
    parsed on its own: a line that starts like an import and is not one (prose in a docstring) is skipped."""
    out = []
    for match in _IMPORT.finditer(source):
        end = source.find("\n", match.end())
        end = len(source) if end < 0 else end
        line = source[match.start():end]
        if "(" in line and ")" not in line:  # from x import (a,\n b)
            close = source.find(")", end)
            end = len(source) if close < 0 else close + 1
        try:
            tree = pyast.parse(source[match.start():end].strip())
        except SyntaxError:
            continue
        out += [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return out


def module_file(name: str) -> Path | None:
    """The source file of a library module, found on disk without importing anything; None for a name that is no
    module (``forge.data.schemas.ChatSample``: a name inside one). ``importlib.util.find_spec`` would import the
    parent package of a dotted name, i.e. run the library's modules inside a cache key: that import was most of
    the first code stage's Prefect time (0.19 s of its 0.20, ``code-drills`` in bench/recipe_profile.py)."""
    top, *rest = name.split(".")
    root = _package_dir(top)
    if root is None:
        return None
    path = root.joinpath(*rest)
    candidates = [path.with_suffix(".py"), path / "__init__.py"] if rest else [path / "__init__.py"]
    return next((c for c in candidates if c.is_file()), None)


@functools.cache
def _package_dir(top: str) -> Path | None:
    """Where a top-level package lives (finding a top-level package imports nothing); None for a plain module."""
    spec = importlib.util.find_spec(top)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


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
            h.update(module_file(name).read_bytes())
        return h.hexdigest()


InputsView = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class ViewedInputs(CachePolicy):
    """Cache key component: the task's inputs, bookkeeping left out, as ``view`` narrows them (None: all of them).
    A view is for a task that reads a few fields of a config section shared with other stages (tasks/rl.py: a reward
    model reads one of its GRPO stage's settings), so that changing what it does not read leaves it cached. Without
    one the key is Prefect's ``INPUTS - "ctx"``'s, so caches from before views existed still hit."""

    view: InputsView | None = None

    def compute_key(
        self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        kept = {k: v for k, v in (inputs or {}).items() if k not in BOOKKEEPING_ARGS}
        return Inputs().compute_key(task_ctx, self.view(kept) if self.view else kept, flow_parameters, **kwargs)


def cached_task(*, name: str, modules: tuple[str, ...] = (), key_view: InputsView | None = None, **options: Any):
    """A Prefect task with persisted results, keyed on task source + library source + inputs; ``key_view`` maps the
    inputs to what the key hashes (default: all of them)."""
    policy = TASK_SOURCE + LibrarySource(modules=tuple(modules)) + ViewedInputs(view=key_view)
    return task(name=name, cache_policy=policy, persist_result=True, **options)


def uncached_task(*, name: str, **options: Any):
    """A Prefect task that runs every time it is called (it reads state that changes between runs: the corpora's
    digest, the registry, the DVC remote), its result kept in memory only. Prefect's default policy would hash its
    inputs and source into a key that includes the flow-run id, which no later run can hit, and the workspace's
    persist-by-default (forge/workspace.py) would write each result to disk for nothing (issue 18's overhead
    budget, bench/recipe_profile.py)."""
    return task(name=name, cache_policy=NO_CACHE, persist_result=False, **options)
