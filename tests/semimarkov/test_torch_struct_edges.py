"""``EdgeSemiMarkov.from_torch_struct``: torch-struct's ``SemiMarkovCRF`` edges give its distribution.

The docs called ``EdgeSemiMarkov`` "torch-struct's edge layout": taken literally (no transpose, no free
start state) it gave log Z 8.6805 against torch-struct's 8.6135, with no error (audit)."""

from __future__ import annotations

import warnings

import pytest
import torch

from zoo.inference import EdgeSemiMarkov, SemiMarkovChain

torch_struct = pytest.importorskip("torch_struct")


def torch_struct_edges(seed: int, B=2, T=5, D=3, N=3) -> torch.Tensor:
    return torch.randn(B, T, D + 1, N, N, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seed, shape", [(0, (2, 5, 3, 3)), (1, (3, 4, 6, 2)), (2, (1, 1, 2, 4))], ids=str)
def test_torch_struct_edges_give_its_log_partition_and_marginals(seed, shape):
    B, T, D, N = shape
    edge = torch_struct_edges(seed, B, T, D, N).requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        their_log_z = torch_struct.SemiMarkovCRF(edge).partition
        (their_marginals,) = torch.autograd.grad(their_log_z.sum(), edge)
    ours = SemiMarkovChain(EdgeSemiMarkov.from_torch_struct(edge))
    torch.testing.assert_close(ours.log_partition, their_log_z, rtol=1e-12, atol=1e-12)
    (our_marginals,) = torch.autograd.grad(ours.log_partition.sum(), edge)
    torch.testing.assert_close(our_marginals, their_marginals, rtol=1e-10, atol=1e-12)  # d = 0: 0 in both


def test_with_a_fixed_start_state_the_best_segmentations_agree():
    """torch-struct's max also maximizes over the free start state, which ours sums out: with the start
    state fixed (the others at -1e4) the two best scores and segmentations are one."""
    edge = torch_struct_edges(4, B=3, T=6, D=3, N=3)
    edge[:, 0, :, :, 1:] = -1e4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_struct.SemiMarkovCRF(edge)
        their_max, their_argmax = theirs.max, theirs.argmax
    ours = SemiMarkovChain(EdgeSemiMarkov.from_torch_struct(edge))
    torch.testing.assert_close(ours.max_score, their_max, rtol=1e-12, atol=1e-12)
    B, T = edge.shape[:2]
    theirs_as_ours = torch.full((B, T), -1, dtype=torch.long)  # the state of the segment starting at s
    for b, s, _, state, _ in their_argmax.nonzero().tolist():
        theirs_as_ours[b, s] = state
    assert torch.equal(ours.argmax, theirs_as_ours)


def test_the_first_segment_sums_the_free_start_state():
    """torch-struct's first segment follows a free state: fixing it (others at -1e4) changes log Z,
    and ours follows."""
    edge = torch_struct_edges(3)
    fixed = edge.clone()
    fixed[:, 0, :, :, 1:] = -1e4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [torch_struct.SemiMarkovCRF(e).partition for e in (edge, fixed)]
    got = [SemiMarkovChain(EdgeSemiMarkov.from_torch_struct(e)).log_partition for e in (edge, fixed)]
    assert float((expected[0] - expected[1]).abs().min()) > 0.1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_a_forbidden_first_segment_gives_no_nan_gradient():
    """A first segment whose every previous state is -inf (a state that cannot start): log Z as
    torch-struct's, and zero gradients there (torch.logsumexp's were NaN)."""
    edge = torch_struct_edges(5)
    edge[:, 0, 2, 1, :] = float("-inf")  # state 1 may not start with duration 2
    edge.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch_struct.SemiMarkovCRF(edge.detach()).partition
    log_z = SemiMarkovChain(EdgeSemiMarkov.from_torch_struct(edge)).log_partition
    torch.testing.assert_close(log_z, expected, rtol=1e-12, atol=1e-12)
    (gradient,) = torch.autograd.grad(log_z.sum(), edge)
    assert torch.isfinite(gradient).all() and (gradient[:, 0, 2, 1] == 0).all()


@pytest.mark.parametrize("shape", [(2, 5, 3, 3), (2, 5, 1, 3, 3), (2, 5, 3, 3, 2), (2, 0, 3, 3, 3)], ids=str)
def test_a_tensor_not_in_torch_struct_s_layout_is_a_clear_error(shape):
    with pytest.raises(ValueError, match=r"torch-struct's edge must have shape B x T x \(D\+1\) x N x N"):
        EdgeSemiMarkov.from_torch_struct(torch.zeros(shape))
