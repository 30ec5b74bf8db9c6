"""recipes/trainer/gpu.yaml composes with a recipe of every family into one GPU in the precision measured
safe (docs/gpu.md); parsing needs no GPU."""

from __future__ import annotations

import pytest
import yaml
from cli_testlib import REPO

from zoo.cli import main

RECIPES = ["hmm/ptb-rank-space.yaml", "hsmm/smartwatch-exact-small.yaml", "pcfg/ptb-exact-small.yaml",
           "vae/ptb-short-exact-small.yaml"]  # fmt: skip


@pytest.mark.parametrize("recipe", RECIPES)
def test_gpu_trainer_composes_with_every_family(recipe, capsys):
    gpu = REPO / "recipes" / "trainer" / "gpu.yaml"
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(REPO / "recipes" / recipe), "--config", str(gpu), "--print_config"])
    assert done.value.code == 0
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert (trainer["accelerator"], str(trainer["devices"]), trainer["precision"]) == ("gpu", "1", "32-true")


@pytest.mark.parametrize("trainer", ["gpu.yaml", "fsdp.yaml"])
def test_a_gpu_trainer_without_a_gpu_is_one_line(trainer, capsys, monkeypatch):
    """It was Lightning's traceback ending in "No supported gpu backend found!" (audit)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    recipe, config = REPO / "recipes" / "hmm/ptb-exact-small.yaml", REPO / "recipes" / "trainer" / trainer
    assert main(["fit", "--config", str(recipe), "--config", str(config)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("zoo: error: the trainer's accelerator is 'gpu'")
    assert line.endswith("--trainer.accelerator cpu")
