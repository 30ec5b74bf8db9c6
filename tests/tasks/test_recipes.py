"""Every recipe in recipes/ parses: its classes resolve and its arguments fit their signatures."""

from __future__ import annotations

import pytest
from cli_testlib import config_with_ddp, recipes

RECIPES = recipes("hmm")
TRAINERS = recipes("trainer")


def test_there_are_recipes_for_every_backend_and_dataset():
    names = {p.stem for p in RECIPES}
    for backend in ("exact", "low-rank", "rank-space", "randomized"):
        assert f"ptb-{backend}" in names and f"ptb-{backend}-small" in names
    for music in ("jsb", "nottingham", "musedata", "piano"):
        assert {f"{music}-exact", f"{music}-low-rank"} <= names
    assert {"single", "ddp", "fsdp"} <= {p.stem for p in TRAINERS}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_parses_and_composes_with_ddp(recipe, capsys):
    config = config_with_ddp(recipe, capsys)
    model = config["model"]["init_args"]["model"]
    assert model["init_args"]["backend"] in ("exact", "low-rank", "rank-space", "randomized")
