"""Every family's ``log_likelihood`` in eval mode builds no autograd graph (issue 18), unless an input
asks for one (then the same values, with gradients to the inputs); training mode keeps its graph."""

from __future__ import annotations

import inspect

import pytest
import torch
from family_batches import SMALL, batches

from zoo.hub.families import family
from zoo.models import PCFG, BernoulliHMM, CategoricalHMM, GaussianHSMM, StructuredVAE


def families():
    b = batches()
    return {
        "categorical HMM": (CategoricalHMM(20, 4, **SMALL), b["tokens"], None),
        "Bernoulli HMM": (BernoulliHMM(4, num_keys=6, **SMALL), b["frames"], "frames"),
        "PCFG": (PCFG(20, 3, 4, "exact", **SMALL), b["tokens"], None),
        "HSMM": (GaussianHSMM(3, 3, 4, **SMALL), b["features"], "features"),
        "structured VAE": (
            vae := StructuredVAE(backend="exact", **family("StructuredVAE").test_sizes),
            family("StructuredVAE").example_batch(vae, torch.Generator().manual_seed(0)),
            None,
        ),
    }


@pytest.mark.parametrize("name", list(families()))
def test_eval_mode_scoring_builds_no_graph(name):
    model, batch, float_input = families()[name]
    scores = model.eval().log_likelihood(batch)
    assert not scores.requires_grad
    assert model.train().log_likelihood(batch).requires_grad
    if float_input is not None:  # gradients with respect to the inputs still work in eval mode
        wanted = {**batch, float_input: batch[float_input].clone().requires_grad_()}
        with_graph = model.eval().log_likelihood(wanted)
        torch.testing.assert_close(with_graph.detach(), scores)
        with_graph.sum().backward()
        assert wanted[float_input].grad is not None


@pytest.mark.parametrize("name", list(families()))
def test_requires_grad_builds_the_graph_in_eval_mode(name):
    model, batch, _ = families()[name]
    model.eval()
    scores = model.log_likelihood(batch, torch.Generator().manual_seed(0))
    with_graph = model.log_likelihood(batch, torch.Generator().manual_seed(0), requires_grad=True)
    assert model.training is False and with_graph.requires_grad
    torch.testing.assert_close(with_graph.detach(), scores)
    with_graph.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert "requires_grad" in str(inspect.signature(model.log_likelihood))
