"""A batch whose ``lengths`` is a list (docs/training-api.md allows it, as ``log_likelihood`` does) trains
and evaluates as the same batch with a lengths tensor, in every family's task."""

from __future__ import annotations

import warnings

import pytest
import torch

import zoo.models
from zoo.hub.families import family
from zoo.tasks import LikelihoodTask, ParsingTask, SegmentationTask, VAETask

TASKS = {
    "CategoricalHMM": LikelihoodTask,
    "BernoulliHMM": LikelihoodTask,
    "PCFG": ParsingTask,
    "GaussianHSMM": SegmentationTask,
    "StructuredVAE": VAETask,
}


@pytest.mark.parametrize("name", list(TASKS))
def test_a_list_of_lengths_trains_as_a_tensor_does(name):
    torch.manual_seed(0)
    spec = family(name)
    model = getattr(zoo.models, name)(**spec.test_sizes)
    if getattr(model, "input_projection", None) is not None:
        dims = model.input_projection.input_dim, model.input_projection.output_dim
        model.input_projection.set(torch.zeros(dims[0]), torch.eye(*dims))
    batch = spec.example_batch(model, torch.Generator().manual_seed(0))
    task = TASKS[name](model=model)
    as_list = {**batch, "lengths": batch["lengths"].tolist()}
    events = model.num_events(as_list)
    assert isinstance(events, torch.Tensor) and torch.equal(events, model.num_events(batch))
    model.eval()  # no dropout: the two losses are the same number
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")  # no trainer here
        with torch.random.fork_rng():
            want = task.training_step(batch, 0)
        got = task.training_step(as_list, 0)
    torch.testing.assert_close(got, want)
