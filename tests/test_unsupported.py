"""What the engine cannot run on is refused by name (``zoo.inference.unsupported``), and what it can is
not: meta tensors and ``torch.func.vmap`` everywhere; for linear chains, the other ``torch.func``
transforms and forward-mode AD (whose tangent the chain once dropped: a derivative of 0, no error);
forward-mode AD and ``torch.func.grad`` through semi-Markov chains and trees, and a chain's
Jacobian-vector product by reverse mode, give the reverse-mode answer."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as forward_ad

from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    SemiMarkovChain,
    TreeDistribution,
    terminal_scores,
)

g = torch.Generator().manual_seed(0)
B, T, N, D, NT, PT, V = 2, 6, 3, 2, 2, 3, 5
UNARY = torch.randn(B, T, N, generator=g, dtype=torch.float64)
TRANSITION = torch.randn(N, N, generator=g, dtype=torch.float64)
DURATION = torch.randn(N, D, generator=g, dtype=torch.float64)
ROOT = torch.randn(NT, generator=g, dtype=torch.float64)
RULES = torch.randn(NT, NT + PT, NT + PT, generator=g, dtype=torch.float64)
WORDS = torch.randint(V, (B, T), generator=g)
EMISSION = torch.randn(PT, V, generator=g, dtype=torch.float64).log_softmax(-1)
DIRECTION = torch.randn(B, T, N, generator=g, dtype=torch.float64)


def chain_log_z(unary):
    return LinearChain(DenseChain(unary, TRANSITION)).log_partition


def semimarkov_log_z(unary):
    return SemiMarkovChain(DenseSemiMarkov(unary, TRANSITION, DURATION)).log_partition


def tree_log_z(rules):
    return TreeDistribution(DenseGrammar(ROOT, rules), terminal_scores(EMISSION, WORDS)).log_partition


STRUCTURES = {
    "chain": (chain_log_z, UNARY),
    "semi-Markov": (semimarkov_log_z, UNARY),
    "tree": (tree_log_z, RULES),
}


def reverse_jvp(log_z, x, v):
    """The Jacobian-vector product (B,) by reverse mode, one row at a time."""
    leaf = x.clone().requires_grad_(True)
    out = log_z(leaf)
    rows = [torch.autograd.grad(out[b], leaf, retain_graph=True)[0] for b in range(B)]
    return torch.stack([(row * v).sum() for row in rows])


@pytest.mark.parametrize("structure", STRUCTURES)
def test_meta_tensors_are_refused_by_name(structure):
    log_z, x = STRUCTURES[structure]
    with pytest.raises(NotImplementedError, match="meta tensors"):
        if structure == "tree":
            DenseGrammar(ROOT.to("meta"), x.to("meta"))
        elif structure == "chain":
            DenseChain(x.to("meta"), TRANSITION.to("meta"))
        else:
            DenseSemiMarkov(x.to("meta"), TRANSITION.to("meta"), DURATION.to("meta"))


@pytest.mark.parametrize("structure", STRUCTURES)
def test_vmap_is_refused_by_name(structure):
    log_z, x = STRUCTURES[structure]
    with pytest.raises(NotImplementedError, match=r"torch\.func\.vmap"):
        if structure == "tree":  # a batch of two grammars
            torch.func.vmap(log_z)(torch.stack([x, x]))
        else:  # each sequence alone
            torch.func.vmap(lambda y: log_z(y.unsqueeze(0)))(x)


def test_a_chain_refuses_forward_mode_ad_rather_than_dropping_the_tangent():
    with forward_ad.dual_level(), pytest.raises(NotImplementedError, match="forward-mode AD"):
        chain_log_z(forward_ad.make_dual(UNARY, DIRECTION))
    with forward_ad.dual_level(), pytest.raises(NotImplementedError, match="forward-mode AD"):
        tangent = torch.randn_like(TRANSITION)  # the tangent on another potential
        _ = LinearChain(DenseChain(UNARY, forward_ad.make_dual(TRANSITION, tangent))).log_partition


@pytest.mark.parametrize("transform", ["grad", "jacrev", "jvp"])
def test_a_chain_refuses_the_other_torch_func_transforms(transform):
    with pytest.raises(NotImplementedError, match=r"torch\.func transforms"):
        if transform == "jvp":
            torch.func.jvp(chain_log_z, (UNARY,), (DIRECTION,))
        else:
            getattr(torch.func, transform)(lambda u: chain_log_z(u).sum())(UNARY)


def test_a_chains_jvp_by_reverse_mode_is_right():
    """What the refusal points to: ``torch.autograd.functional.jvp`` (reverse mode twice)."""
    _, got = torch.autograd.functional.jvp(chain_log_z, UNARY, DIRECTION)
    torch.testing.assert_close(got, reverse_jvp(chain_log_z, UNARY, DIRECTION), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("structure", ["semi-Markov", "tree"])
def test_semimarkov_and_tree_follow_forward_mode_ad_and_torch_func_grad(structure):
    log_z, x = STRUCTURES[structure]
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    expected = reverse_jvp(log_z, x, v)
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(log_z(forward_ad.make_dual(x, v))).tangent
    torch.testing.assert_close(tangent, expected, rtol=1e-10, atol=1e-10)
    leaf = x.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(log_z(leaf).sum(), leaf)
    torch.testing.assert_close(torch.func.grad(lambda y: log_z(y).sum())(x), gradient, rtol=1e-10, atol=1e-10)
