"""Evaluation refuses, before computing anything, a sequence longer than the task's max_eval_length
(the PCFG family's own limit by default: its inside pass is cubic in the length)."""

from __future__ import annotations

import pytest
import torch

from zoo.models import PCFG, CategoricalHMM
from zoo.tasks import LikelihoodTask, ParsingTask


def text_batch(length: int) -> dict:
    tokens = torch.randint(2, 6, (2, length))
    tokens[:, -1] = 0
    return {"tokens": tokens, "lengths": torch.tensor([length, 3])}


def untouchable(model):
    def fail(*args, **kwargs):
        raise AssertionError("the model was run on a batch over the limit")

    model.log_likelihood = model.forward = model.parse = fail
    return model


def pcfg():
    return PCFG(6, 2, 3, "exact", embedding_dim=8, hidden_dim=8)


@pytest.mark.parametrize("step", ["validation_step", "test_step"])
def test_a_pcfg_refuses_sentences_over_its_cost_limit_before_any_computation(step):
    task = ParsingTask(pcfg())
    assert task.max_eval_length == PCFG.max_eval_length == 300
    untouchable(task.model)
    message = f"{step.split('_')[0]} batch 7 holds a sequence of 5,001 events, over max_eval_length = 300 "
    with pytest.raises(ValueError, match=message):
        getattr(task, step)(text_batch(5001), 7)


def test_the_limit_is_configurable_and_sequences_within_it_are_evaluated():
    task = ParsingTask(pcfg(), max_eval_length=8)
    with pytest.raises(ValueError, match="over max_eval_length = 8"):
        task.validation_step(text_batch(9), 0)
    task.validation_step(text_batch(8), 0)  # at the limit: evaluated
    assert LikelihoodTask(pcfg(), max_eval_length=10_000).max_eval_length == 10_000
    with pytest.raises(ValueError, match="max_eval_length must be a positive int or None"):
        LikelihoodTask(pcfg(), max_eval_length=0)


def test_chains_have_no_limit_by_default():
    task = LikelihoodTask(CategoricalHMM(6, 3, embedding_dim=8, hidden_dim=8))
    assert task.max_eval_length is None
    task.validation_step(text_batch(2000), 0)
