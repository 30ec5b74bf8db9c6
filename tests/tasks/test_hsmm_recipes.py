"""Every HSMM recipe in recipes/hsmm parses, composes with the DDP trainer and builds its model; the small
smartwatch recipes run one training and validation batch as they are."""

from __future__ import annotations

import pytest
import yaml
from cli_testlib import config_with_ddp, cpu_trainer, recipes

from zoo.cli import main
from zoo.models import GaussianHSMM

RECIPES = recipes("hsmm")
SMALL = [p for p in RECIPES if p.stem.endswith("-small")]


def test_there_are_recipes_for_every_backend_and_paper_size():
    names = {p.stem for p in RECIPES}
    for backend in ("exact", "low-rank", "rank-space", "randomized"):
        assert f"smartwatch-{backend}-small" in names
    assert {f"crosstask-exact-{n}" for n in (64, 128, 256)} <= names
    assert {"crosstask-low-rank-128-r128", "crosstask-low-rank-1024-r16"} <= names
    assert {
        "crosstask-rank-space-1024-r16",
        "crosstask-rank-space-1024-r128",
        "crosstask-randomized-1024",
    } <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_hsmm_recipe_parses_and_composes_with_ddp(recipe, capsys):
    config = config_with_ddp(recipe, capsys)
    assert config["model"]["class_path"] == "zoo.tasks.SegmentationTask"
    model = config["model"]["init_args"]["model"]
    assert model["class_path"] == "zoo.models.GaussianHSMM"
    GaussianHSMM(**model["init_args"])  # the constructor validates every argument


@pytest.mark.parametrize("recipe", SMALL, ids=lambda p: p.stem)
def test_small_recipe_runs_one_batch(recipe, tmp_path):
    trainer = tmp_path / "trainer.yaml"
    trainer.write_text(yaml.safe_dump({"trainer": cpu_trainer(tmp_path)}))
    args = ["fit", "--config", str(recipe), "--config", str(trainer), "--trainer.fast_dev_run", "1"]
    assert main(args) == 0
