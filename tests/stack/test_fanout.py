"""Deep-search synthesis fanned out on the stack's two-node Ray cluster (forge/fanout.py, forge/stack.py) writes
the files an in-process run writes: the tiny profile's 200 QAs in two shards, each shard in a Ray worker of its own
(one CPU per node, so the two ran side by side, one per node); the code judge's batches on the cluster give the
in-process verdicts; once stopped, nothing of the cluster runs.
bench/fanout.py is the driver: each run is a subprocess with a scratch checkout and home, so neither reads the
other's cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fanout  # bench/ is not a package: on sys.path above

from forge.fanout import MIN_BATCH

pytestmark = pytest.mark.cost(300)


def test_tiny_synthesis_on_two_ray_nodes_writes_the_in_process_files(tmp_path):
    result = fanout.compare("tiny", tmp_path)
    assert result["in_process"]["qas"] == result["ray"]["qas"] == 200
    assert result["same_qa_file"], (result["in_process"]["qa_md5"], result["ray"]["qa_md5"])
    assert result["same_trajectories_file"]
    assert result["ray_workers_running_a_shard"] == 2  # both shards ran on the cluster, in two workers
    judge = result["judge"]
    assert judge["verdicts"] >= 2 * MIN_BATCH  # enough to fan out (fewer stay in the flow's process)
    assert 0 < judge["passed"] < judge["verdicts"]  # references pass, wrong answers fail
    assert judge["same_verdicts"]
    assert judge["ray_workers_running_a_batch"] == 2  # code-judge-batch tasks ran on both nodes
    assert result["left_running"] == [] and result["nodes_recorded"] == []
