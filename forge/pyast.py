"""``ast.parse`` safe to call from threads.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state, not per thread: two threads
parsing at once (the judge's workers, forge/code/judge.py) can fail with ``SystemError: AST constructor recursion
depth mismatch`` (python/cpython#106905). Seen in CI on 2026-11-28, in the stage-1 filter's judging threads. One lock
serializes Forge's own parsing; parsing is short next to what those threads wait on (a sandboxed run).
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)``, one thread at a time; raises what it raises (SyntaxError, ValueError)."""
    with _LOCK:
        return ast.parse(source, mode=mode)
