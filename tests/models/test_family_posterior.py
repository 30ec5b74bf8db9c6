"""Every family exposes its posterior as ``posterior(batch, generator=None)`` (issue 22): the HMMs'
chain, the HSMM's semi-Markov chain, the PCFG's tree distribution, the VAE's q(z | y). For the
generative families its log-partition is ``log_likelihood``; the old names still work, with a warning."""

from __future__ import annotations

import pytest
import torch
from family_batches import SMALL, batches

from zoo.inference import LinearChain, SemiMarkovChain, TreeDistribution
from zoo.models import PCFG, BernoulliHMM, CategoricalHMM, GaussianHSMM, StructuredVAE


def families():
    b = batches()
    tokens, frames, features, small = b["tokens"], b["frames"], b["features"], SMALL
    vae = StructuredVAE(4, vocab_size=20, encoder_layers=1, encoder_dim=8, state_dim=8, decoder_dim=8,
                        decoder_hidden=8, max_positions=8)  # fmt: skip
    return {
        "categorical HMM": (CategoricalHMM(20, 4, **small), tokens, LinearChain, "chain"),
        "Bernoulli HMM": (BernoulliHMM(4, num_keys=6, backend="randomized", k1=2, k2=1, **small), frames,
                          LinearChain, "chain"),  # fmt: skip
        "PCFG": (PCFG(20, 3, 4, "low-rank", rank=3, **small), tokens, TreeDistribution, "distribution"),
        "HSMM": (GaussianHSMM(3, 3, 4, **small), features, SemiMarkovChain, "hsmm"),
        "VAE": (vae, tokens, LinearChain, None),
    }


@pytest.mark.parametrize("name", list(families()))
def test_every_family_has_posterior(name):
    model, batch, kind, old_name = families()[name]
    model.eval()
    posterior = model.posterior(batch, generator=torch.Generator().manual_seed(0))
    assert isinstance(posterior, kind)
    assert torch.isfinite(posterior.log_partition).all()
    if old_name is None:  # the VAE: q(z | y), whose log-partition is not log p(y)
        return
    with torch.no_grad():
        torch.testing.assert_close(posterior.log_partition, model.log_likelihood(batch))
    with pytest.warns(FutureWarning, match=rf"\.{old_name}\(\) is renamed posterior\(\)"):
        old = getattr(model, old_name)(batch, torch.Generator().manual_seed(0))
    torch.testing.assert_close(old.log_partition, posterior.log_partition)
