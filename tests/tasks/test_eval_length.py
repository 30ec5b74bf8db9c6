"""Evaluation refuses, before computing anything, a sequence longer than the task's max_eval_length
(the PCFG family's own limit by default: its inside pass is cubic in the length), and a batch whose
evaluation the family's cost model puts over the task's memory budget (the device's memory by default)."""

from __future__ import annotations

import pytest
import torch

from zoo.models import PCFG, CategoricalHMM
from zoo.tasks import LikelihoodTask, ParsingTask
from zoo.tasks.likelihood import device_memory, parse_bytes


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


@pytest.mark.parametrize("budget, size", [("8GiB", 8 * 2**30), ("512 MiB", 512 * 2**20), ("2GB", 2 * 10**9),
                                          ("1.5KiB", 1536), (4096, 4096), (None, None)])  # fmt: skip
def test_memory_budgets_parse(budget, size):
    assert parse_bytes(budget, "max_eval_memory") == size
    assert LikelihoodTask(pcfg(), max_eval_memory=budget).max_eval_memory == size


@pytest.mark.parametrize("budget", ["8 gigs", "GiB", "-1GiB", 0, -5, True, 1.5])
def test_bad_memory_budgets_are_one_sentence(budget):
    with pytest.raises(ValueError, match="max_eval_memory must be a positive number of bytes, e.g. 8GiB"):
        LikelihoodTask(pcfg(), max_eval_memory=budget)


@pytest.mark.parametrize("step", ["validation_step", "test_step"])
def test_a_batch_over_the_memory_budget_is_refused_before_any_computation(step):
    """A chain has no length limit, but a batch its cost model puts over the budget is refused, whatever
    the family: here 2 x 2000 tokens of an HMM with 3 states and 6 words, 16 * 3 * (4000 + 6) bytes."""
    model = CategoricalHMM(6, 3, embedding_dim=8, hidden_dim=8)
    assert model.eval_memory(2, 2000) == 16 * 3 * (2 * 2000 + 6)
    task = LikelihoodTask(model, max_eval_memory="100KiB")
    untouchable(task.model)
    stage = step.split("_")[0]
    message = (
        rf"{stage} batch 3 \(2 sequences of up to 2,000 events\) would take about 0.000179 GiB to evaluate "
        r"\(CategoricalHMM.eval_memory, its cost model\), over max_eval_memory = 9.54e-05 GiB; evaluate in "
        r"smaller batches"
    )
    with pytest.raises(ValueError, match=message):
        getattr(task, step)(text_batch(2000), 3)


def test_the_default_budget_is_the_device_memory(monkeypatch):
    task = LikelihoodTask(CategoricalHMM(6, 3, embedding_dim=8, hidden_dim=8))
    assert task.max_eval_memory == "auto" and device_memory(torch.device("cpu")) > 2**28
    task.validation_step(text_batch(2000), 0)  # far within this machine's memory
    monkeypatch.setattr("zoo.tasks.likelihood.device_memory", lambda device: 1000)
    with pytest.raises(ValueError, match=r"over max_eval_memory = 9.31e-07 GiB \(auto: the device memory\)"):
        task.validation_step(text_batch(2000), 0)
    assert (
        LikelihoodTask(
            CategoricalHMM(6, 3, embedding_dim=8, hidden_dim=8), max_eval_memory=None
        )._check_budget(text_batch(2000), "validation", 0)
        is None
    )  # no budget


def test_predict_refuses_what_test_refuses():
    """``zoo predict`` (the TreeWriter's parses) has the up-front guard of validation and test (audit)."""
    task = ParsingTask(pcfg())
    untouchable(task.model)
    with pytest.raises(ValueError, match="predict batch 2 holds a sequence of 5,001 events, over max_eval_"):
        task.predict_step(text_batch(5001), 2)
    budget = LikelihoodTask(CategoricalHMM(6, 3, embedding_dim=8, hidden_dim=8), max_eval_memory="100KiB")
    untouchable(budget.model)
    with pytest.raises(ValueError, match=r"predict batch 0 \(2 sequences of up to 2,000 events\) would take"):
        budget.predict_step(text_batch(2000), 0)


def test_the_memory_refusal_names_the_data_modules_own_batch_options():
    """Music and feature data modules take batch_frames, not batch_tokens (the refusal named the
    latter whatever the data: audit)."""
    from types import SimpleNamespace

    from zoo.data import MusicDataModule, PTBDataModule
    from zoo.models import BernoulliHMM

    model = BernoulliHMM(num_states=8, num_keys=88, embedding_dim=8, hidden_dim=8)
    task = LikelihoodTask(model, max_eval_memory="1KiB")
    batch = {"frames": torch.zeros(2, 10, 88), "lengths": torch.tensor([10, 7])}
    named = {MusicDataModule: "batch_frames / batch_size", PTBDataModule: "batch_tokens / batch_size"}
    for data, options in named.items():
        task._trainer = SimpleNamespace(datamodule=data.__new__(data))
        with pytest.raises(ValueError, match=rf"the data module's {options}\)"):
            task._check_budget(batch, "test", 0)


def test_the_refusal_names_where_the_sequence_is():
    """It named the batch alone; now the sequence's place in its split, and in a prediction the input
    line (blank lines and short sentences are left out, so the two differ)."""
    from types import SimpleNamespace

    task = ParsingTask(pcfg(), max_eval_length=8)
    batch = {**text_batch(9), "index": torch.tensor([4, 0])}
    where = r"events \(sequence 5 of the split, blank lines not counted\), over"
    with pytest.raises(ValueError, match=where):
        task.validation_step(batch, 0)
    lines = SimpleNamespace(predict_lines=lambda: ([], [1, 2, 3, 6, 9], 9))
    task._trainer = SimpleNamespace(datamodule=lines)
    with pytest.raises(ValueError, match=r"predict batch 0 holds a sequence of 9 events \(line 9 of"):
        task.predict_step(batch, 0)
