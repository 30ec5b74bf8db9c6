"""zoo.models emissions and layers: the factored Bernoulli formula, the chunked categorical
normalizer, the LHMM feature map."""

from __future__ import annotations

import torch

from zoo.models import emissions
from zoo.models.emissions import BernoulliEmission, CategoricalEmission
from zoo.models.layers import ExpFeatureMap, ResidualMLP, orthogonal_random_features


def test_bernoulli_emission_is_the_per_key_sum():
    torch.manual_seed(0)
    em = BernoulliEmission(num_keys=5, dim=4).double()
    hidden = torch.randn(3, 4, dtype=torch.float64)
    frames = (torch.rand(2, 6, 5) < 0.5).double()
    got = em(hidden, frames)
    p = em.table(hidden)  # C x K
    want = torch.empty(2, 6, 3, dtype=torch.float64)
    for b in range(2):
        for t in range(6):
            for c in range(3):
                x = frames[b, t]
                want[b, t, c] = sum(
                    (x[k] * p[c, k].log() + (1 - x[k]) * (1 - p[c, k]).log()) for k in range(5)
                )
    torch.testing.assert_close(got, want)
    assert BernoulliEmission(88, 4).num_keys == 88


def test_categorical_emission_gathers_the_log_softmax(monkeypatch):
    torch.manual_seed(0)
    em = CategoricalEmission(vocab_size=7, dim=4).double()
    hidden = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(7, (3, 4))
    want = em.table(hidden)[:, tokens].permute(1, 2, 0)
    grad_want = torch.autograd.grad(want.sum(), hidden)[0]
    got = em(hidden, tokens)
    torch.testing.assert_close(got, want)
    # the chunked, recomputed normalizer (used when C x V is large) gives the same values and grads
    monkeypatch.setattr(emissions, "NORMALIZER_CHUNK", 14)  # 2 rows of 7 words per chunk
    chunked = em(hidden, tokens)
    torch.testing.assert_close(chunked, want)
    torch.testing.assert_close(torch.autograd.grad(chunked.sum(), hidden)[0], grad_want)


def test_feature_map_shifts_leave_the_transition_unchanged():
    torch.manual_seed(0)
    phi = ExpFeatureMap(dim=6, num_features=10).double()
    u, v = torch.randn(4, 6, dtype=torch.float64), torch.randn(5, 6, dtype=torch.float64)
    left, right = phi(u, shift="row"), phi(v, shift="global")
    assert (left > 0).all() and (right > 0).all() and left.shape == (4, 10)
    raw_l, raw_r = (u @ phi.weight.T).exp(), (v @ phi.weight.T).exp()
    trans = left @ right.T
    raw = raw_l @ raw_r.T
    torch.testing.assert_close(trans / trans.sum(-1, keepdim=True), raw / raw.sum(-1, keepdim=True))


def test_orthogonal_random_features_blocks_are_orthogonal():
    w = orthogonal_random_features(12, 5, torch.Generator().manual_seed(0))
    assert w.shape == (12, 5)
    block = w[:5] / w[:5].norm(dim=-1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(5), atol=1e-5, rtol=0)


def test_residual_mlp_shapes():
    mlp = ResidualMLP(dim=6, hidden_dim=9, num_blocks=2, dropout=0.1)
    assert mlp(torch.randn(3, 4, 6)).shape == (3, 4, 6)
    assert ResidualMLP(6, 9, num_blocks=0)(torch.randn(2, 6)).shape == (2, 6)
