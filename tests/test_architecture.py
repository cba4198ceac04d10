"""The rooms of docs/architecture.md and which may import which: every import in the tree, those inside functions
included, goes to the importer's own room or to a room below it. Peers that feed each other through the stage that
composes them (training and generation, search and review) import neither way.

    .venv/bin/pytest tests/test_architecture.py -q
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from forge.workspace import REPO_ROOT

# Room → module prefixes (the longest matching prefix decides).
ROOMS: dict[str, tuple[str, ...]] = {
    "core": ("forge.config", "forge.atomic", "forge.hashing", "forge.workspace", "forge.stages", "forge"),
    "records": ("forge.data.schemas", "forge.data.jsonl"),
    "chat": ("forge.chat",),
    "generation": ("forge.generation",),
    "data": ("forge.data",),
    "code": ("forge.code",),
    "review": ("forge.review",),
    "search": ("forge.search",),
    "training": ("forge.training",),
    "evals": ("forge.evals",),
    "registry": ("registry",),
    "tasks": ("tasks",),
    "flows": ("flows",),
    # Entry points: the command line and the dashboard compose every room below them.
    "entry": ("forge.cli", "forge.data.cli", "forge.code.cli", "forge.review.cli", "forge.search.cli", "forge.evals.cli",
              "forge.plan", "dashboards"),
}
LIBRARY = {"core", "records", "chat", "generation", "data", "code", "review", "search", "training", "evals"}
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "records": {"core"},
    "chat": {"core", "records"},
    "generation": {"core", "chat"},
    "data": {"core", "records", "chat", "generation"},
    "code": {"core", "records", "chat", "data"},
    "review": {"core", "records"},
    "search": {"core", "records", "chat", "generation", "data", "code"},
    "training": {"core", "records", "chat"},
    "evals": {"core", "records", "chat", "generation", "data", "code"},
    "registry": {"core", "records"},
    "tasks": LIBRARY | {"registry"},
    "flows": LIBRARY | {"registry", "tasks"},
    "entry": LIBRARY | {"registry", "tasks", "flows"},
}
SOURCE_DIRS = ("forge", "registry", "tasks", "flows", "dashboards")


def room_of(module: str) -> str | None:
    best, room = -1, None
    for name, prefixes in ROOMS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, room = len(prefix), name
    return room


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations() -> list[str]:
    out = []
    for folder in SOURCE_DIRS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            src_room = room_of(module_name(path))
            for line, target in imports_of(path):
                dst_room = room_of(target)
                if dst_room is None or dst_room == src_room:
                    continue
                if dst_room not in MAY_IMPORT[src_room]:
                    out.append(f"{path.relative_to(REPO_ROOT)}:{line}: {src_room} imports {target} ({dst_room})")
    return out


def test_every_module_is_in_a_room():
    homeless = [str(p) for folder in SOURCE_DIRS for p in (REPO_ROOT / folder).rglob("*.py")
                if room_of(module_name(p)) is None]
    assert not homeless


def test_no_import_goes_to_a_higher_room():
    assert violations() == []


@pytest.mark.parametrize("a, b", [("training", "generation"), ("search", "review"), ("training", "search")])
def test_peers_import_neither_way(a, b):
    assert b not in MAY_IMPORT[a] and a not in MAY_IMPORT[b]


def test_the_room_order_has_no_cycle():
    seen: set[str] = set()
    order = []
    while len(order) < len(MAY_IMPORT):
        ready = [r for r in MAY_IMPORT if r not in seen and MAY_IMPORT[r] <= seen]
        assert ready, f"a cycle among {set(MAY_IMPORT) - seen}"
        order += sorted(ready)
        seen |= set(ready)
    assert order[0] == "core" and order[-1] == "entry"


def test_the_checker_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    # A lazy import is still an import: the check must not be fooled by moving one into a function body.
    probe = REPO_ROOT / "forge" / "generation" / "_probe_for_test.py"
    probe.write_text("def f():\n    from forge.training.sft import run_sft_stage\n")
    try:
        assert any("_probe_for_test.py:2: generation imports forge.training.sft" in v for v in violations())
    finally:
        probe.unlink()


def test_flows_pass_stage_inputs_by_keyword():
    """Stage calls in flows/ name their inputs: no call there takes more than 4 positional arguments."""
    long_calls = []
    for path in sorted((REPO_ROOT / "flows").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and len(node.args) > 4:
                long_calls.append(f"{path.name}:{node.lineno}: {len(node.args)} positional arguments")
    assert long_calls == []
