"""CPU load beside a bench: processes that each spin one core for as long as the ``with`` block lasts.

    with spinning(2):
        run_the_thing()
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager


def _spin() -> None:
    while True:
        pass


@contextmanager
def spinning(n: int) -> Iterator[None]:
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in busy:
        p.start()
    try:
        yield
    finally:
        for p in busy:
            p.kill()
