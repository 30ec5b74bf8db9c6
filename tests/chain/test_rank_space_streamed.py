"""The rank-space chain's two forwards: with H = V^T U formed once, and streamed (V^T then U a step).

``rank_space.chain_streams`` picks one by cost (``streams``); at test sizes it always picks H, so each
test forces the streamed forward and checks it against brute force (float64, tiny, ragged), against
the H forward (log Z and every gradient, with and without autograd, twice differentiable), and in
float32 against float64 on the numerics suite's inputs (emission log-weights down to -1e3, T up to 600).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import bruteforce as bf
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics.checks import check_chain, numerics_settings
from numerics.strategies import chain_cases
from strategies import build_dist, chain_specs, with_grad

from zoo.inference import LinearChain, RankSpaceChain
from zoo.inference.chain import rank_space

FAST = settings(max_examples=15, deadline=None)
NAMES = ("start", "U", "V", "emission")


@contextmanager
def forward(streamed: bool):
    """Every rank-space log Z in the block runs the streamed (True) or the H (False) forward."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rank_space, "chain_streams", lambda chain, grad: streamed)
        yield


def log_z_and_grads(spec, streamed: bool, twice: bool = False):
    """log Z (B,) and the gradients of its sum w.r.t. start, U, V and emission, by one forward."""
    spec = with_grad(spec, NAMES)
    dist = build_dist(spec)
    with forward(streamed):
        if twice:
            log_z = dist.engine.log_partition(dist.factors, dist.lengths, twice_differentiable=True)
        else:
            log_z = dist.log_partition
    grads = torch.autograd.grad(log_z.sum(), [spec.args[n] for n in NAMES], create_graph=twice)
    return log_z, grads


@FAST
@given(spec=chain_specs("rankspace", max_n=3, max_t=4))
def test_streamed_log_partition_is_brute_force(spec):
    with forward(True), torch.no_grad():
        log_z = build_dist(spec).log_partition
    expected = torch.tensor([bf.log_partition(spec, b) for b in range(len(log_z))], dtype=torch.float64)
    torch.testing.assert_close(log_z, expected, rtol=1e-9, atol=1e-9)


@FAST
@given(spec=chain_specs("rankspace", max_n=3, max_t=5), twice=st.booleans())
def test_streamed_gradients_equal_the_h_forward(spec, twice):
    log_z, grads = log_z_and_grads(spec, True, twice)
    log_z_h, grads_h = log_z_and_grads(spec, False, twice)
    torch.testing.assert_close(log_z, log_z_h, rtol=1e-10, atol=1e-10)
    for name, g, g_h in zip(NAMES, grads, grads_h):
        torch.testing.assert_close(
            g, g_h, rtol=1e-9, atol=1e-10, msg=lambda m, n=name: f"d log Z / d {n}: {m}"
        )


@FAST
@given(spec=chain_specs("rankspace", min_n=2, max_n=3, min_t=2, max_t=4))
def test_streamed_second_derivative_equals_the_h_forward(spec):
    """d/d emission of sum(d log Z / d U), through each forward's twice-differentiable path."""
    results = []
    for streamed in (True, False):
        leaves = with_grad(spec, NAMES)
        dist = build_dist(leaves)
        with forward(streamed):
            log_z = dist.engine.log_partition(dist.factors, dist.lengths, twice_differentiable=True)
        (dU,) = torch.autograd.grad(log_z.sum(), [leaves.args["U"]], create_graph=True)
        results.append(torch.autograd.grad(dU.sum(), [leaves.args["emission"]])[0])
    torch.testing.assert_close(results[0], results[1], rtol=1e-9, atol=1e-10)


@numerics_settings(3)
@given(data=st.data())
def test_streamed_float32(data):
    """float32 against float64, with and without gradients: rank-space emission log-weights down to
    -1e3, T from 30 to 600, ragged lengths (tests/numerics)."""
    case = data.draw(chain_cases("rankspace", sizes=((30, 600), (2, 16))), label="case")
    with forward(True):
        check_chain(case, "native", "log_partition")


# time with H / time streamed, per mode, T = 32 (scripts/bench_chain.py table 7)
MEASURED = [  # threads, N, R, B, log Z + backward, no grad
    (1, 16384, 4096, 8, 2.53, 1.11),  # the paper's PTB HMM at its 256-token batches
    (1, 16384, 2048, 8, 1.25, 0.54),
    (1, 16384, 2048, 32, 0.68, 0.34),
    (1, 8192, 1024, 8, 0.65, 0.29),
    (1, 4096, 512, 8, 0.40, 0.23),
    (2, 16384, 4096, 8, 1.74, 0.72),
    (2, 16384, 2048, 8, 0.85, 0.34),
    (2, 16384, 2048, 32, 0.56, 0.25),
    (2, 8192, 1024, 8, 0.52, 0.22),
    (2, 4096, 512, 8, 0.35, 0.20),
]


@pytest.mark.parametrize("threads,N,R,B,with_grad,without_grad", MEASURED)
def test_streams_picks_the_forward_measured_faster(threads, N, R, B, with_grad, without_grad):
    for grad, ratio in ((True, with_grad), (False, without_grad)):
        assert rank_space.streams(B, 32, N, R, grad, threads=threads) is (ratio > 1), (grad, ratio)


@pytest.mark.parametrize("grad", [True, False])
def test_streams_keeps_h_for_large_batches_and_small_ranks(grad):
    assert not rank_space.streams(64, 64, 16384, 2048, grad, threads=1)  # 4096-token batches (table 2)
    assert not rank_space.streams(2, 4, 6, 3, grad, threads=1)  # the tests' sizes


def test_streams_cost_rule_is_monotone_in_the_batch():
    """More tokens a batch share H's N R^2: past some batch size H is always chosen."""
    picks = [rank_space.streams(B, 32, 16384, 4096, True, threads=1) for B in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert picks == sorted(picks, reverse=True), picks
    assert picks[0] and not picks[-1]


def test_streams_prices_a_gpu_by_its_own_floor():
    """On a GPU the paper's size streams in both modes and 4096-token batches keep H: the CPU's thread
    count does not enter (on 64 CPU threads the paper's size would keep H)."""
    for grad in (True, False):
        assert rank_space.streams(8, 32, 16384, 4096, grad, gpu=True, threads=64)
        assert not rank_space.streams(8, 32, 16384, 4096, grad, threads=64)
        assert not rank_space.streams(64, 64, 16384, 2048, grad, gpu=True, threads=1)


@pytest.mark.parametrize("seed", range(4))
def test_streamed_with_zeros_in_u_and_v_and_forbidden_emissions(seed):
    """A sparse CPD (half of U and V exactly 0, so some rank paths are forbidden) and emissions with
    -inf entries: the streamed forward agrees with H in float64 (log Z and gradients) and holds float32
    within 1e-5 relative of float64, with and without gradients."""
    g = torch.Generator().manual_seed(seed)
    N, R, B, T = 12, 5, 3, 60
    U, V = (torch.rand(N, R, generator=g, dtype=torch.float64) for _ in range(2))
    U, V = U * (torch.rand(N, R, generator=g) < 0.5), V * (torch.rand(N, R, generator=g) < 0.5)
    U[:, 0] += 0.1  # every state reaches rank 0 and rank 0 reaches every state: a path always survives
    V[:, 0] += 0.1
    emission = torch.randn(B, T, R, generator=g, dtype=torch.float64) * 30
    emission[..., 1:] = emission[..., 1:].masked_fill(torch.rand(B, T, R - 1, generator=g) < 0.3, -math.inf)
    start = torch.rand(N, generator=g, dtype=torch.float64)
    lengths = torch.tensor([T, T // 2, 7])

    def run(streamed, dtype, grad):
        leaves = [x.to(dtype).detach().requires_grad_(grad) for x in (start, U, V, emission)]
        with forward(streamed), torch.set_grad_enabled(grad):
            log_z = LinearChain(RankSpaceChain(*leaves), lengths).log_partition
        grads = torch.autograd.grad(log_z.sum(), leaves[1:3]) if grad else ()
        return log_z, grads

    log_z_h, grads_h = run(False, torch.float64, True)
    log_z_s, grads_s = run(True, torch.float64, True)
    torch.testing.assert_close(log_z_s, log_z_h, rtol=1e-10, atol=1e-10)
    for g_s, g_h in zip(grads_s, grads_h):
        torch.testing.assert_close(g_s, g_h, rtol=1e-8, atol=1e-10)
    for grad in (True, False):
        log_z32, _ = run(True, torch.float32, grad)
        assert torch.isfinite(log_z32).all(), log_z32
        torch.testing.assert_close(log_z32.double(), log_z_h, rtol=1e-5, atol=1e-4)
