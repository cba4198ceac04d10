"""A promoter in a process of its own, for the concurrency test of tests/registry/test_promotion.py.

Imported by name in the spawned child (multiprocessing pickles the target by module and name), so it lives
outside the test module, which pytest imports under a name no child could import.
"""

import threading

from mlflow import MlflowClient

import registry.promotion
from forge.config import PromotionConfig


def promote_in_step(
    uri: str, model_name: str, version: str, policy: PromotionConfig, start, window, window_timeout_s: float
) -> None:
    """Promote ``version`` once every promoter is ready (``start``), then, inside promote()'s critical section
    (champion read, nothing decided or written yet), wait for the other promoter to get there too (``window``).

    Without the promotion lock both get there and both judge against the same champion: the race, every time.
    With it the other cannot enter; the wait times out after ``window_timeout_s`` and breaks ``window``, so the
    other passes straight through when its turn comes."""
    decide = registry.promotion.decide_promotion

    def decide_once_the_other_read(*args, **kwargs):
        try:
            window.wait(window_timeout_s)
        except threading.BrokenBarrierError:
            pass
        return decide(*args, **kwargs)

    registry.promotion.decide_promotion = decide_once_the_other_read
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.get_registered_model(model_name)  # connect (and check the schema) before the start line
    start.wait(60)
    registry.promotion.promote(client, model_name, policy, version=version)
