"""What the CLI tests share: the trainer section of a tiny, quiet, CSV-logged CPU recipe, the recipes of a
family and their composition with the DDP trainer, `zoo fit` on two CPU processes, `zoo predict` with a
writer, and the CSV logs."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from zoo.cli import main

REPO = Path(__file__).resolve().parents[2]


def cpu_trainer(tmp: Path) -> dict:
    """One CPU device, one epoch, no progress bar or summary, CSV logs and runs under ``tmp``."""
    return {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp / "runs"),
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(tmp)}},
    }


def recipes(family: str) -> list[Path]:
    """The recipe files of recipes/``family``, sorted."""
    return sorted((REPO / "recipes" / family).glob("*.yaml"))


def config_with_ddp(recipe: Path, capsys) -> dict:
    """The configuration `zoo fit --print_config` prints for ``recipe`` composed with the DDP trainer on 8
    devices (checked to be that trainer)."""
    ddp = REPO / "recipes" / "trainer" / "ddp.yaml"
    with pytest.raises(SystemExit) as done:
        main(
            ["fit", "--config", str(recipe), "--config", str(ddp), "--trainer.devices", "8", "--print_config"]
        )
    assert done.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["trainer"]["strategy"] == "ddp" and str(config["trainer"]["devices"]) == "8"
    return config


def predict(config: Path, ckpt: Path, writer: str, output: Path, *options: str, **init_args) -> int:
    """`zoo predict` of the checkpoint with the prediction writer class ``writer`` writing ``output``
    (``options``: more command-line arguments; ``init_args``: the writer's other arguments)."""
    callback = {"class_path": writer, "init_args": {"output_path": str(output), **init_args}}
    return main(
        [
            "predict",
            "--config",
            str(config),
            "--ckpt_path",
            str(ckpt),
            "--trainer.callbacks+",
            yaml.safe_dump(callback),
            *options,
        ]
    )


def logged_rows(root: Path) -> list[dict]:
    """The rows of every CSV log (metrics.csv) under ``root``."""
    rows = []
    for path in sorted(root.rglob("metrics.csv")):
        with open(path) as f:
            rows += list(csv.DictReader(f))
    return rows


def logged(root: Path, key: str) -> list[float]:
    """Every value logged as ``key`` under ``root``."""
    return [float(r[key]) for r in logged_rows(root) if r.get(key)]


def ddp_command(recipe_path: Path, *args: str, devices: int = 2) -> None:
    """``zoo fit`` on ``devices`` CPU processes (gloo), without recipes/trainer/ddp.yaml: the zoo's data
    modules need the trainer's use_distributed_sampler off, which the command sets."""
    command = [sys.executable, "-m", "zoo.cli", "fit", "--config", str(recipe_path),
               "--trainer.devices", str(devices), "--trainer.strategy", "ddp", *args]  # fmt: skip
    path = os.pathsep.join([str(REPO), str(Path(__file__).parent)])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
