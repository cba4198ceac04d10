"""What one stage cost this process: CPU seconds and peak resident memory, for the run summary and ``forge status``.

CPU time is ``getrusage`` of this process (every thread: torch's included) plus the children it has waited for
(the sandbox's judged programs, launched trainers), taken at the start and the end. Resident memory is sampled
from ``/proc/self/statm`` every ``SAMPLE_S`` seconds on a daemon thread, since ``ru_maxrss`` is a high-water mark
for the whole process, not for a stage. Work a stage hands to another machine (a Ray task) is not counted here.
"""

from __future__ import annotations

import os
import resource
import threading

SAMPLE_S = 0.25
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rss_bytes() -> int:
    """This process's resident set now (0 where ``/proc`` is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


class UsageMeter:
    """Started at a stage's start, read at its end: ``stop()`` gives ``{"cpu_s", "peak_rss_mb"}`` (the same figures
    when called again)."""

    def __init__(self) -> None:
        self._cpu = cpu_seconds()
        self._peak = rss_bytes()
        self._done = threading.Event()
        self._result: dict[str, float] | None = None
        self._sampler = threading.Thread(target=self._sample, name="forge-usage", daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_S):
            self._peak = max(self._peak, rss_bytes())

    def stop(self) -> dict[str, float]:
        if self._result is None:
            self._done.set()
            self._sampler.join()
            peak = max(self._peak, rss_bytes())
            self._result = {"cpu_s": round(cpu_seconds() - self._cpu, 2), "peak_rss_mb": round(peak / 2**20, 1)}
        return self._result
