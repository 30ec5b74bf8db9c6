"""Every recipe in recipes/ parses: its classes resolve and its arguments fit their signatures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zoo.cli import main

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes" / "hmm").glob("*.yaml"))
TRAINERS = sorted((Path(__file__).resolve().parents[2] / "recipes" / "trainer").glob("*.yaml"))


def test_there_are_recipes_for_every_backend_and_dataset():
    names = {p.stem for p in RECIPES}
    for backend in ("exact", "low-rank", "rank-space", "randomized"):
        assert f"ptb-{backend}" in names and f"ptb-{backend}-small" in names
    for music in ("jsb", "nottingham", "musedata", "piano"):
        assert {f"{music}-exact", f"{music}-low-rank"} <= names
    assert {"single", "ddp", "fsdp"} <= {p.stem for p in TRAINERS}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_parses_and_composes_with_ddp(recipe, capsys):
    ddp = recipe.parents[1] / "trainer" / "ddp.yaml"
    with pytest.raises(SystemExit) as done:
        main(
            ["fit", "--config", str(recipe), "--config", str(ddp), "--trainer.devices", "8", "--print_config"]
        )
    assert done.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["trainer"]["strategy"] == "ddp" and str(config["trainer"]["devices"]) == "8"
    model = config["model"]["init_args"]["model"]
    assert model["init_args"]["backend"] in ("exact", "low-rank", "rank-space", "randomized")
