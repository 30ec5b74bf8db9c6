"""Cross-entropy and KL divergence between two chains (``LinearChain.cross_entropy`` / ``kl``) against
enumeration of every state sequence: values and gradients in float64, ragged lengths, every container on
either side, the randomized backend (exact distributions), and forbidden transitions."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from zoo.inference import DenseChain, LinearChain, LowRankChain, RDPOptions

B, T, N, R = 3, 3, 3, 2
LENGTHS = torch.tensor([3, 1, 2])
F64 = torch.float64


def leaf(*shape, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    draw = torch.rand if positive else torch.randn
    x = draw(*shape, generator=g, dtype=F64) + (0.1 if positive else 0.0)
    return x.requires_grad_()


def features(seed):
    return leaf(N, R, seed=seed, positive=True)


def dense_parts(chain) -> tuple:
    """(unary, per-position transition, init) of a chain's dense form."""
    dense = chain.dense()
    return dense.unary, dense.per_position(), dense.init


def log_probs(parts, b: int, length: int) -> dict:
    """log p(z) of every state sequence z of ``length`` under sequence b's potentials (a torch scalar
    each, differentiable)."""
    unary, transition, init = parts
    scores = {}
    for z in itertools.product(range(N), repeat=length):
        score = init[b, z[0]] + sum(unary[b, t, z[t]] for t in range(length))
        scores[z] = score + sum(transition[b, t - 1, z[t - 1], z[t]] for t in range(1, length))
    log_z = torch.logsumexp(torch.stack(list(scores.values())), 0)
    return {z: s - log_z for z, s in scores.items()}


def brute_cross_entropy(p_parts, q_parts) -> torch.Tensor:
    out = []
    for b, length in enumerate(LENGTHS.tolist()):
        p, q = log_probs(p_parts, b, length), log_probs(q_parts, b, length)
        out.append(-sum(p[z].exp() * q[z] for z in p if p[z] > -math.inf))
    return torch.stack(out)


def brute_entropy(parts) -> torch.Tensor:
    return brute_cross_entropy(parts, parts)


CHAINS = {
    "shared": lambda s: DenseChain(leaf(B, T, N, seed=s), leaf(N, N, seed=s + 1), leaf(N, seed=s + 2)),
    "per-position": lambda s: DenseChain(leaf(B, T, N, seed=s), leaf(B, T - 1, N, N, seed=s + 1)),
    "low-rank": lambda s: LowRankChain(leaf(B, T, N, seed=s), features(s + 1), features(s + 2)),
}


def leaves_of(chain) -> list:
    return [x for x in vars(chain).values() if isinstance(x, torch.Tensor) and x.requires_grad and x.is_leaf]


@pytest.mark.parametrize("ours, theirs", list(itertools.product(CHAINS, CHAINS)))
def test_cross_entropy_and_kl_match_enumeration(ours, theirs):
    p_chain, q_chain = CHAINS[ours](10), CHAINS[theirs](20)
    p, q = LinearChain(p_chain, LENGTHS), LinearChain(q_chain, LENGTHS)
    expected = brute_cross_entropy(dense_parts(p_chain), dense_parts(q_chain))
    got = p.cross_entropy(q)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)
    kl = p.kl(q)
    torch.testing.assert_close(kl, expected - brute_entropy(dense_parts(p_chain)), rtol=1e-9, atol=1e-10)
    assert (kl > 0).all()
    leaves = leaves_of(p_chain) + leaves_of(q_chain)
    weights = torch.tensor([1.0, -0.5, 2.0], dtype=F64)
    for a, e in zip(torch.autograd.grad((got * weights).sum(), leaves, allow_unused=True),
                    torch.autograd.grad((expected * weights).sum(), leaves, allow_unused=True)):  # fmt: skip
        torch.testing.assert_close(a, e, rtol=1e-8, atol=1e-10)


def test_a_chain_has_no_divergence_from_itself_and_the_randomized_backend_is_exact():
    chain = CHAINS["shared"](30)
    p = LinearChain(chain, LENGTHS)
    torch.testing.assert_close(p.kl(p), torch.zeros(B, dtype=F64), rtol=0, atol=1e-12)
    randomized = LinearChain(chain, LENGTHS, backend="randomized", options=RDPOptions(k1=1, k2=1))
    q = LinearChain(CHAINS["per-position"](40), LENGTHS)
    torch.testing.assert_close(randomized.cross_entropy(q), p.cross_entropy(q), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(randomized.kl(q), p.kl(q), rtol=1e-10, atol=1e-12)


def test_forbidden_transitions():
    """q forbidding a transition p takes: +inf for the sequences long enough to take it; one p never
    takes (forbidden in both): finite."""
    unary = leaf(B, T, N, seed=50)
    allowed = torch.zeros(N, N, dtype=F64)
    forbidden = allowed.clone()
    forbidden[0, 1] = -math.inf
    p = LinearChain(DenseChain(unary, allowed), LENGTHS)
    q = LinearChain(DenseChain(unary, forbidden), LENGTHS)
    ce = q.cross_entropy(p)
    assert torch.isfinite(ce).all()
    assert p.cross_entropy(q).tolist()[0] == math.inf and p.kl(q).tolist()[2] == math.inf
    assert math.isfinite(p.kl(q).tolist()[1])  # one position: no transition
    both = LinearChain(DenseChain(unary.detach(), forbidden), LENGTHS)
    torch.testing.assert_close(q.kl(both), torch.zeros(B, dtype=F64), rtol=0, atol=1e-12)
    expected = brute_cross_entropy(dense_parts(q.factors), dense_parts(p.factors))
    torch.testing.assert_close(ce, expected, rtol=1e-9, atol=1e-10)
    (grad,) = torch.autograd.grad(ce.sum(), unary)
    assert torch.isfinite(grad).all()


def test_chains_over_other_sequences_are_refused():
    p = LinearChain(CHAINS["shared"](60), LENGTHS)
    with pytest.raises(ValueError, match=r"the same lengths, got \[3, 1, 2\] and \[3, 3, 3\]"):
        p.kl(LinearChain(CHAINS["shared"](61)))
    with pytest.raises(ValueError, match=r"the same B x T x N, got \(3, 3, 3\) and \(3, 3, 2\)"):
        p.cross_entropy(LinearChain(DenseChain(torch.zeros(B, T, 2, dtype=F64), torch.zeros(2, 2, dtype=F64)),
                                    LENGTHS))  # fmt: skip
    with pytest.raises(TypeError, match="expected another LinearChain"):
        p.kl(p.factors)


def test_one_position_and_inference_mode():
    """T = 1 (no transition: the per-position probe is B x 0 x N x N), under torch.inference_mode too."""
    u, v = leaf(2, 1, N, seed=70), leaf(2, 1, N, seed=71)
    p, q = (LinearChain(DenseChain(x, torch.zeros(N, N, dtype=F64))) for x in (u, v))
    expected = -(u[:, 0].log_softmax(-1).exp() * v[:, 0].log_softmax(-1)).sum(-1)
    torch.testing.assert_close(p.cross_entropy(q), expected, rtol=1e-12, atol=0)
    with torch.inference_mode():
        torch.testing.assert_close(p.kl(q), expected - brute_entropy_of_one(u), rtol=1e-12, atol=0)


def brute_entropy_of_one(unary):
    log_p = unary[:, 0].log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def test_potentials_made_under_inference_mode_that_require_grad():
    """The other chain's inference tensors were saved for a backward: "Inference tensors cannot be saved
    for backward" (a low-rank q), an out= error (a per-position q)."""
    with torch.inference_mode():
        p = LinearChain(CHAINS["shared"](80), LENGTHS)
        for name in ("per-position", "low-rank"):
            q = LinearChain(CHAINS[name](81), LENGTHS)
            expected = brute_cross_entropy(dense_parts(p.factors), dense_parts(q.factors))
            torch.testing.assert_close(p.cross_entropy(q), expected, rtol=1e-9, atol=1e-10)
