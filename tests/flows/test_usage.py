"""forge/usage.py: a stage's CPU seconds and peak memory as the run summary records them."""

from __future__ import annotations

import mmap
import time

from forge.usage import SAMPLE_S, UsageMeter, rss_bytes


def test_the_meter_counts_the_cpu_spent_and_the_memory_held_inside_it():
    before_mb = rss_bytes() / 2**20
    meter = UsageMeter()
    # Its own mapping, written so resident, and unmapped at close: malloc would keep a freed block in the process
    # where the training runtime has run in it (forge/hardware.py keep_freed_memory), and a block it had kept would
    # come back without raising the RSS.
    held = mmap.mmap(-1, 200 * 2**20)
    for offset in range(0, len(held), 2**20):
        held[offset : offset + 2**20] = b"x" * 2**20
    start = time.process_time()
    while time.process_time() - start < 0.5:  # half a CPU second, however loaded
        sum(range(1000))
    deadline = time.monotonic() + 4 * SAMPLE_S
    while time.monotonic() < deadline:  # held across several samples
        time.sleep(SAMPLE_S / 5)
    held.close()
    usage = meter.stop()
    assert usage["cpu_s"] >= 0.5
    assert usage["peak_rss_mb"] >= before_mb + 190
    assert rss_bytes() / 2**20 < usage["peak_rss_mb"] - 150  # the peak, not the memory now


def test_an_idle_stretch_costs_no_cpu():
    meter = UsageMeter()
    time.sleep(1.0)
    assert meter.stop()["cpu_s"] < 0.5  # the sampler's wake-ups only
