"""Finding the processes a test started indirectly (a launched stage's ranks), by what their command lines name."""

from __future__ import annotations

import psutil


def processes_naming(text: str) -> list[psutil.Process]:
    """Running processes whose command line contains ``text`` (a launched rank names its job folder)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if text in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found
