"""Every PCFG recipe in recipes/pcfg parses, composes with the DDP trainer, and builds its model."""

from __future__ import annotations

import pytest
from cli_testlib import config_with_ddp, recipes

from zoo.models import PCFG

RECIPES = recipes("pcfg")


def test_there_are_recipes_for_every_backend_and_paper_size():
    names = {p.stem for p in RECIPES}
    for backend in ("exact", "low-rank", "rank-space", "randomized"):
        assert f"ptb-{backend}-small" in names
    for size in ("30-60", "60-120", "100-200"):
        assert {f"ptb-exact-{size}", f"ptb-low-rank-{size}"} <= names
    assert {"ptb-rank-space-250-500", "ptb-rank-space-4500-9000", "ptb-randomized-100-200"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_pcfg_recipe_parses_and_composes_with_ddp(recipe, capsys):
    config = config_with_ddp(recipe, capsys)
    assert config["model"]["class_path"] == "zoo.tasks.ParsingTask"
    model = config["model"]["init_args"]["model"]
    assert model["class_path"] == "zoo.models.PCFG"
    args = model["init_args"]
    if args["num_nonterminals"] <= 60:  # the constructor validates every argument (cheap at these sizes)
        PCFG(**args)
