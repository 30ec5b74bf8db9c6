"""Semi-Markov chains with D = 1 (an HMM) run log Z and Viterbi, and the dense one its marginals without a
gradient, on the linear chain they equal: the same answers, gradients (also second order) and errors as
the D-window forward."""

from __future__ import annotations

import pytest
import torch

import zoo.inference.chain.chunked_marginals as chunked_marginals
from zoo.inference import DenseSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov, SemiMarkovChain

NEG_INF = float("-inf")


def one_frame_hsmm(B=3, T=7, N=4, per_sequence_duration=False, dtype=torch.float64, spread=3.0, seed=0):
    """Unary, transition (one forbidden entry), duration (N x 1 or B x N x 1) and a fixed start state."""
    g = torch.Generator().manual_seed(seed)
    unary = torch.randn(B, T, N, generator=g, dtype=dtype) * spread
    transition = torch.randn(N, N, generator=g, dtype=dtype).log_softmax(-1)
    transition[0, 1] = NEG_INF
    shape = (B, N, 1) if per_sequence_duration else (N, 1)
    duration = torch.randn(shape, generator=g, dtype=dtype)
    init = torch.full((N,), NEG_INF, dtype=dtype)
    init[2] = 0.0
    return unary, transition, duration, init


def general(monkeypatch):
    """Force the D-window forward (no chain) for what follows."""
    for container in (DenseSemiMarkov, LowRankSemiMarkov, RankSpaceSemiMarkov):
        monkeypatch.setattr(container, "one_frame_chain", lambda self, probe=None: None)


def low_rank_and_rank_space(dtype=torch.float64, seed=1):
    """The LHSMM (self-transitions allowed) and the rank-space HSMM of a D = 1 model, as constructors of
    leaves that require grad, and their inputs."""
    g = torch.Generator().manual_seed(seed)
    B, T, N, R = 3, 7, 5, 3

    def normal(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    def uniform(*shape):
        return torch.rand(*shape, generator=g, dtype=dtype)

    low_rank = [normal(B, T, N) * 3, uniform(N, R), uniform(N, R), normal(N, 1), normal(N)]
    rank_space = [uniform(N), uniform(N, R), uniform(N, R), normal(R, 1), normal(B, T, R) * 3]
    return [(LowRankSemiMarkov, low_rank), (RankSpaceSemiMarkov, rank_space)]


@pytest.mark.parametrize("index", [0, 1], ids=["low-rank", "rank-space"])
def test_low_rank_and_rank_space_log_z_and_gradients_equal_the_d_window_forward(index, monkeypatch):
    container, inputs = low_rank_and_rank_space()[index]
    lengths = torch.tensor([7, 1, 4])

    def run():
        leaves = [x.clone().requires_grad_() for x in inputs]
        log_z = SemiMarkovChain(container(*leaves), lengths).log_partition
        return [log_z, *torch.autograd.grad(log_z.sum(), leaves)]

    fast = run()
    general(monkeypatch)
    for a, b in zip(fast, run()):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("per_sequence_duration", [False, True])
def test_answers_and_gradients_equal_the_d_window_forward(per_sequence_duration, monkeypatch):
    lengths = torch.tensor([7, 1, 4])
    inputs = one_frame_hsmm(per_sequence_duration=per_sequence_duration)

    def run():
        leaves = [x.clone().requires_grad_() for x in inputs]
        dist = SemiMarkovChain(DenseSemiMarkov(*leaves), lengths)
        marginals = dist.marginals
        answers = [dist.log_partition, marginals, dist.max_score, dist.argmax]
        grads = torch.autograd.grad(dist.log_partition.sum() + (marginals**2).sum(), leaves[:3])
        return answers, grads

    fast_answers, fast_grads = run()
    general(monkeypatch)
    slow_answers, slow_grads = run()
    for fast, slow in zip(fast_answers + list(fast_grads), slow_answers + list(slow_grads)):
        torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-10)


def test_float32_with_emissions_hundreds_of_nats_apart():
    lengths = torch.tensor([500, 17, 333])
    inputs = one_frame_hsmm(T=500, N=8, spread=300.0, dtype=torch.float32)
    dist32 = SemiMarkovChain(DenseSemiMarkov(*inputs), lengths)
    dist64 = SemiMarkovChain(DenseSemiMarkov(*(x.double() for x in inputs)), lengths)
    torch.testing.assert_close(dist32.log_partition.double(), dist64.log_partition, rtol=1e-6, atol=0)
    torch.testing.assert_close(dist32.marginals.double(), dist64.marginals, rtol=0, atol=1e-4)
    assert torch.equal(dist32.argmax, dist64.argmax)


def test_a_sequence_no_path_covers_is_the_semi_markov_error():
    unary, transition, duration, init = one_frame_hsmm()
    unary[1, 0] = NEG_INF  # the second sequence's first frame cannot be emitted by any state
    dist = SemiMarkovChain(DenseSemiMarkov(unary, transition, duration, init), torch.tensor([7, 3, 4]))
    for operation in ("log_partition", "argmax", "marginals", "segment_marginals"):
        with pytest.raises(ValueError, match=r"no segmentation covers batch elements \[1\]"):
            getattr(dist, operation)
    unary[1, 0] = 0.0
    unary[1, 5] = NEG_INF  # past the second sequence's length: ignored
    dist = SemiMarkovChain(DenseSemiMarkov(unary, transition, duration, init), torch.tensor([7, 3, 4]))
    assert torch.isfinite(dist.log_partition).all() and (dist.argmax[1, 3:] == -1).all()


@pytest.mark.parametrize("per_sequence_duration", [False, True])
def test_marginals_without_a_gradient_equal_the_d_window_forward(per_sequence_duration, monkeypatch):
    """No input needs a gradient: the segment marginals (B x T x 1 x N) and the frames' marginals are the
    chain's, equal to the segment probe's gradient through the D-window forward."""
    lengths = torch.tensor([7, 1, 4])
    inputs = one_frame_hsmm(per_sequence_duration=per_sequence_duration)
    dist = SemiMarkovChain(DenseSemiMarkov(*inputs), lengths)
    fast = [dist.segment_marginals, dist.marginals]
    assert fast[0].shape == (3, 7, 1, 4) and not fast[0].requires_grad
    general(monkeypatch)
    slow = SemiMarkovChain(DenseSemiMarkov(*inputs), lengths)
    for a, b in zip(fast, [slow.segment_marginals, slow.marginals]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_long_float32_marginals_run_in_chunks(monkeypatch):
    """A Gaussian HMM's ground (3,000 frames, 3 states, emissions hundreds of nats apart): the frames'
    marginals come from the chain's chunks, float32 against the D-window forward in float64 to 1e-5."""
    seen = []
    original = chunked_marginals.marginals
    monkeypatch.setattr(chunked_marginals, "marginals", lambda *args: seen.append(1) or original(*args))
    lengths = torch.tensor([3000, 2222])
    inputs = one_frame_hsmm(B=2, T=3000, N=3, spread=100.0, dtype=torch.float32)
    got = SemiMarkovChain(DenseSemiMarkov(*inputs), lengths).marginals
    assert seen
    general(monkeypatch)
    expected = SemiMarkovChain(DenseSemiMarkov(*(x.double() for x in inputs)), lengths).marginals
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)
