"""``zoo.tasks.random_state``: the generators' states a checkpoint keeps come back whole through
``torch.load(weights_only=True)``, and a rank takes its own only when it resumes fitting with as many
ranks as wrote them."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import torch

from zoo.tasks.random_state import current_state, set_state, this_rank_state


def draws():
    return torch.rand(3), torch.randn(2), random.random(), np.random.rand(2), np.random.randn()  # noqa: NPY002


def test_a_saved_state_sets_every_generator_back(tmp_path):
    np.random.randn()  # noqa: NPY002 (NumPy then holds a cached Gaussian, part of its state)
    torch.save(current_state(), tmp_path / "state.pt")
    want = draws()
    draws()
    set_state(torch.load(tmp_path / "state.pt", weights_only=True))
    for got, expected in zip(draws(), want):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def trainer(fn: str, world: int, rank: int):
    return SimpleNamespace(state=SimpleNamespace(fn=fn), world_size=world, global_rank=rank)


def test_a_rank_takes_its_own_state_only_when_it_resumes_fitting_on_as_many_ranks():
    states = [{"rank": 0}, {"rank": 1}]
    assert this_rank_state(states, trainer("fit", 2, 1)) == {"rank": 1}
    assert this_rank_state(states, trainer("fit", 1, 0)) is None  # another number of ranks
    assert this_rank_state(states, trainer("validate", 2, 0)) is None  # weights for an evaluation
    assert this_rank_state(None, trainer("fit", 2, 0)) is None  # a checkpoint of an older release
    assert this_rank_state(states, None) is None  # load_from_checkpoint, no trainer
