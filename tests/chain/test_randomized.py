"""Statistical tests of the randomized backend (Fu et al. 2022), all with fixed seeds.

Independent estimates come cheaply from one LinearChain whose batch repeats the same sequence:
every batch row draws its own kept states.
"""

import itertools
import math
import re

import pytest
import torch

from zoo.inference import DenseChain, EmbeddingChain, LinearChain, LowRankChain, RankSpaceChain, RDPOptions
from zoo.inference.chain import exact
from zoo.inference.chain.randomized import reduced_chain
from zoo.inference.rdp import KeptStates, proposal_weights

N, T, D = 24, 6, 4


def chain(repeats, seed=0, scale=1.0):
    """One random embedding CRF (N states, length T) repeated ``repeats`` times in the batch."""
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(N, D, generator=g, dtype=torch.float64) * scale
    unary = (torch.randn(1, T, N, generator=g, dtype=torch.float64) * 2 * scale).expand(repeats, T, N)
    return EmbeddingChain(unary.contiguous(), states)


def estimates(factors, k1, k2, proposal="local+global", seed=0, lengths=None):
    opts = RDPOptions(k1, k2, proposal, torch.Generator().manual_seed(seed))
    return LinearChain(factors, lengths, backend="randomized", options=opts)


def exact_value(factors, lengths=None):
    return LinearChain(factors, lengths)


def test_k1_equal_to_n_is_exact():
    factors = chain(3)
    lengths = torch.tensor([6, 2, 4])
    rdp, ex = estimates(factors, N, 0, lengths=lengths), exact_value(factors, lengths)
    torch.testing.assert_close(rdp.log_partition, ex.log_partition)
    torch.testing.assert_close(rdp.entropy, ex.entropy)
    torch.testing.assert_close(rdp.marginals, ex.marginals)


@pytest.mark.parametrize("proposal", ["uniform", "local", "global", "local+global"])
def test_expectation_over_every_possible_draw_is_exactly_z(proposal):
    """Enumerate all K2 = 1 draws (N = 4, T = 3, K1 = 1) and weight them by their probability."""
    g = torch.Generator().manual_seed(23)
    n, t = 4, 3
    factors = EmbeddingChain(
        torch.randn(1, t, n, generator=g, dtype=torch.float64) * 2,
        torch.randn(n, 3, generator=g, dtype=torch.float64),
    )
    q = proposal_weights(factors.unary, factors.init, factors.state_prior, proposal)[0].softmax(-1)
    top = q.argmax(-1)
    tail = q.scatter(-1, top.unsqueeze(-1), 0.0)
    tail = tail / tail.sum(-1, keepdim=True)
    expectation = 0.0
    for draw in itertools.product(range(n), repeat=t):
        if any(draw[i] == top[i] for i in range(t)):
            continue
        drawn = torch.tensor(draw)
        p_draw = tail[torch.arange(t), drawn]
        kept = KeptStates(
            torch.stack([top, drawn], -1).unsqueeze(0),
            torch.stack([torch.zeros(t, dtype=torch.float64), -p_draw.log()], -1).unsqueeze(0),
        )
        z_hat = exact.log_forward(reduced_chain(factors, kept), torch.tensor([t]))[0].exp()
        expectation = expectation + p_draw.prod() * z_hat
    torch.testing.assert_close(expectation.log(), exact_value(factors).log_partition, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("proposal", ["uniform", "local", "global", "local+global", "tensor"])
def test_probability_space_estimate_is_unbiased(proposal):
    runs = 4000
    factors = chain(runs, seed=1, scale=0.25)
    if proposal == "tensor":
        g = torch.Generator().manual_seed(5)
        proposal = torch.rand(runs, T, N, generator=g, dtype=torch.float64) + 0.1
    z_hat = estimates(factors, 4, 3, proposal, seed=2).log_partition
    log_z = exact_value(factors).log_partition[0]
    ratio = (z_hat - log_z).exp()  # Z_hat / Z, mean 1 if unbiased
    se = ratio.std() / math.sqrt(runs)
    assert abs(ratio.mean() - 1) < 4 * se, (ratio.mean().item(), se.item())


def test_log_space_estimate_is_below_exact_on_average():
    runs = 2000
    factors = chain(runs, seed=3)
    log_z_hat = estimates(factors, 3, 2, seed=4).log_partition
    log_z = exact_value(factors).log_partition[0]
    gap = log_z_hat - log_z
    assert gap.mean() + 4 * gap.std() / math.sqrt(runs) < 0


def test_error_falls_as_k_grows():
    runs = 500
    factors = chain(runs, seed=6)
    exact = exact_value(factors)
    mse_z, mse_h = [], []
    for k in (2, 6, 12, 20):
        rdp = estimates(factors, k - 1, 1, seed=k)
        mse_z.append(((rdp.log_partition - exact.log_partition) ** 2).mean().item())
        mse_h.append(((rdp.entropy - exact.entropy) ** 2).mean().item())
    assert mse_z == sorted(mse_z, reverse=True), mse_z
    assert mse_h == sorted(mse_h, reverse=True), mse_h


def test_top_k_baseline_underestimates_and_on_dense_chains_randomization_has_less_bias():
    runs = 500
    factors = chain(runs, seed=8, scale=0.25)
    log_z = exact_value(factors).log_partition
    top_k = estimates(factors, 6, 0).log_partition
    assert (top_k < log_z).all()
    rdp = estimates(factors, 5, 1, seed=9).log_partition
    assert (rdp - log_z).mean().abs() < (top_k - log_z).mean().abs()


def test_marginals_live_on_kept_states_and_gradients_flow():
    factors = chain(2, seed=10)
    unary = factors.unary.clone().requires_grad_()
    states = factors.states.clone().requires_grad_()
    rdp = estimates(EmbeddingChain(unary, states), 3, 2, seed=11)
    kept = torch.zeros(2, T, N, dtype=torch.bool)
    kept.scatter_(-1, rdp.engine.kept_states(rdp.factors).index, True)
    assert (rdp.marginals[~kept] == 0).all()
    torch.testing.assert_close(rdp.marginals.sum(-1), torch.ones(2, T, dtype=torch.float64))
    (rdp.log_partition.sum() + rdp.entropy.sum()).backward()
    assert torch.isfinite(unary.grad).all() and torch.isfinite(states.grad).all()
    assert states.grad.abs().sum() > 0


def test_rsample_with_all_states_kept_matches_exact_marginals():
    runs = 4000
    factors = chain(runs, seed=12, scale=0.5)
    rdp = estimates(factors, N, 0, seed=13)
    relaxed = rdp.rsample(temperature=0.5, generator=torch.Generator().manual_seed(14))
    torch.testing.assert_close(relaxed.sum(-1), torch.ones(runs, T, dtype=torch.float64))
    hard = torch.nn.functional.one_hot(relaxed.argmax(-1), N).double().mean(0)
    marg = exact_value(factors).marginals[0]
    assert (hard - marg).abs().max() < 0.04


def test_rsample_is_differentiable_and_supported_on_kept_states():
    factors = chain(2, seed=15)
    states = factors.states.clone().requires_grad_()
    rdp = estimates(EmbeddingChain(factors.unary, states), 4, 2, seed=16)
    relaxed = rdp.rsample(temperature=1.0)
    kept = torch.zeros(2, T, N, dtype=torch.bool)
    kept.scatter_(-1, rdp.engine.kept_states(rdp.factors).index, True)
    assert (relaxed[~kept] == 0).all()
    (relaxed * torch.randn_like(relaxed)).sum().backward()
    assert states.grad.abs().sum() > 0


def test_embedding_chain_never_builds_n_by_n():
    """N = 200000: an N x N float32 matrix would need 160 GB, so any dense step would fail."""
    g = torch.Generator().manual_seed(17)
    n = 200_000
    factors = EmbeddingChain(torch.randn(2, 5, n, generator=g), torch.randn(n, 8, generator=g) * 0.1)
    rdp = estimates(factors, 16, 4, seed=18)
    assert torch.isfinite(rdp.log_partition).all()
    assert torch.isfinite(rdp.entropy).all()
    assert rdp.rsample().shape == (2, 5, n)


def test_same_seed_same_estimate():
    factors = chain(3, seed=19)
    a = estimates(factors, 3, 2, seed=20).log_partition
    b = estimates(factors, 3, 2, seed=20).log_partition
    torch.testing.assert_close(a, b)


def test_dense_chain_randomized_matches_its_embedding_form_on_the_same_draw():
    factors = chain(3, seed=21)
    dense = DenseChain(factors.unary, factors.states @ factors.states.T)
    a = estimates(factors, 3, 2, proposal="local", seed=22).log_partition
    b = estimates(dense, 3, 2, proposal="local", seed=22).log_partition
    torch.testing.assert_close(a, b)


def test_the_global_proposal_is_the_incoming_mass_and_informative_for_normalized_models():
    """Eq. 34's global prior: each state's incoming transition mass. The outgoing mass would make it
    uniform for every locally normalized model (an HMM's rows sum to one)."""
    g = torch.Generator().manual_seed(0)
    B, T, N, R = 2, 4, 6, 3
    unary = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    transition = (torch.randn(N, N, generator=g, dtype=torch.float64) * 2).log_softmax(-1)
    dense = DenseChain(unary, transition)
    left, right = (torch.rand(N, R, generator=g, dtype=torch.float64) + 0.1 for _ in range(2))
    low_rank = LowRankChain(unary, left, right)
    rank_space = RankSpaceChain(
        torch.rand(N, generator=g, dtype=torch.float64).softmax(0),
        torch.rand(N, R, generator=g, dtype=torch.float64).softmax(-1),
        torch.rand(N, R, generator=g, dtype=torch.float64).softmax(0),
        torch.randn(B, T, R, generator=g, dtype=torch.float64),
    )
    transitions = {  # the row-normalized N x N p(z_t | z_{t-1}) of each (rank space: sum_r U V^T)
        dense: transition.exp(),
        low_rank: low_rank.dense().transition.exp(),
        rank_space: rank_space.U @ rank_space.V.T,
    }
    for factors, p in transitions.items():
        torch.testing.assert_close(p.sum(-1), p.new_ones(N))  # rows sum to one: outgoing mass is uniform
        torch.testing.assert_close(factors.state_prior()[0], p.sum(0).log())  # incoming: column sums
        q = proposal_weights(factors.unary, factors.init, factors.state_prior, "global").softmax(-1)
        assert q[:, 1:].std(-1).min() > 1e-3, f"{type(factors).__name__}: the global proposal is uniform"
        torch.testing.assert_close(q[:, 0], factors.init.softmax(-1))  # no transition enters position 0


@pytest.mark.parametrize("proposal", ["global", "local+global"])
def test_the_global_prior_of_a_crf_reads_only_inside_each_length(proposal):
    """Per-position transitions padded with -inf past a length: the global prior was the mean of the
    incoming log-masses over every position, -inf for every state of the padded sequence, and
    torch.multinomial failed on its NaN proposal ("invalid multinomial distribution"). It is now the
    mean mass over the transitions inside each length, whatever the padding holds."""
    g = torch.Generator().manual_seed(0)
    B, T, N = 3, 5, 6
    unary, transition = torch.randn(B, T, N, generator=g), torch.randn(B, T - 1, N, N, generator=g)
    lengths = torch.tensor([2, 5, 1])
    inside = DenseChain(unary, transition).state_prior(lengths)
    expected = transition[0, :1].logsumexp(-2).logsumexp(0)  # one transition inside the first length
    torch.testing.assert_close(inside[0], expected)
    torch.testing.assert_close(inside[1], transition[1].logsumexp(-2).logsumexp(0) - math.log(T - 1))
    assert (inside[2] == 0).all()  # no transition: uniform
    estimates = []
    for pad in (float("-inf"), 1e3):
        padded = transition.clone()
        padded[0, 1:], padded[2] = pad, pad
        torch.testing.assert_close(DenseChain(unary, padded).state_prior(lengths), inside)
        options = RDPOptions(2, 2, proposal=proposal, generator=torch.Generator().manual_seed(0))
        estimates.append(LinearChain(DenseChain(unary, padded), lengths, "randomized", options).log_partition)
    torch.testing.assert_close(estimates[0], estimates[1])


@pytest.mark.parametrize("proposal", ["local", "local+global"])
def test_a_position_no_state_can_take_raises_the_exact_error(proposal):
    """Every state's unary -inf at one position: the chain has zero probability. The local proposal
    was NaN there and torch.multinomial failed ("probability tensor contains either inf, nan or
    element < 0"); its row is now uniform and the estimate raises what the exact forward raises."""
    unary = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0))
    unary[1, 2] = float("-inf")
    options = RDPOptions(1, 1, proposal=proposal, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="zero probability"):
        LinearChain(DenseChain(unary, torch.randn(3, 3)), backend="randomized", options=options).log_partition  # noqa: B018


@pytest.mark.parametrize("proposal", ["local", "local+global"])
def test_an_empty_tail_is_estimated_unbiasedly_with_finite_entropy(proposal):
    """4 of 6 states forbidden at every position and k1 = 2: the local proposal leaves the tail without
    mass, and select_states raised "the proposal gives no mass to the states outside its top k1"
    (audit). The K2 draws there are placeholders of weight 0: the estimate is unbiased, its entropy
    and gradients finite (a -inf log weight once made the carried entropy NaN)."""
    g = torch.Generator().manual_seed(0)
    unary = torch.randn(1, 5, 6, generator=g, dtype=torch.float64)
    unary[..., 2:] = float("-inf")
    transition = torch.randn(6, 6, generator=g, dtype=torch.float64, requires_grad=True)
    exact = LinearChain(DenseChain(unary, transition)).log_partition
    options = [RDPOptions(2, 1, proposal, torch.Generator().manual_seed(s)) for s in range(300)]
    runs = [LinearChain(DenseChain(unary, transition), backend="randomized", options=o) for o in options]
    ratio = torch.stack([d.log_partition for d in runs]).detach().exp() / exact.detach().exp()
    assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(len(runs)) + 1e-12
    assert torch.isfinite(runs[0].entropy).all()
    (grad,) = torch.autograd.grad(runs[0].log_partition.sum(), transition)
    assert torch.isfinite(grad).all()


def fixed_start_chain(dtype=torch.float64):
    """B = 2, T = 5, N = 5: a left-to-right chain (i -> i or i + 1) from state 0."""
    g = torch.Generator().manual_seed(4)
    transition = torch.full((5, 5), float("-inf"), dtype=dtype)
    for i in range(5):
        transition[i, i:i + 2] = torch.randn(min(2, 5 - i), generator=g, dtype=dtype)
    init = torch.full((5,), float("-inf"), dtype=dtype)
    init[0] = 0.0
    return DenseChain(torch.randn(2, 5, 5, generator=g, dtype=dtype), transition, init)


def test_a_draw_that_keeps_no_path_is_an_estimate_of_zero():
    """Kept states that leave a sequence no path give Z_hat = 0, a value of the unbiased estimator: it
    raised the chain's "zero probability" error (1,737 of 3,000 draws of the audit's chain; one sequence's
    zero also lost the other's estimate). Now log Z_hat = -inf for that sequence alone (draws with one
    sequence at zero and the other not occur), and the mean of Z_hat over 2000 draws is Z within 4
    standard errors for each sequence."""
    chain = fixed_start_chain()
    exact = LinearChain(chain).log_partition.exp()
    zeros, draws = 0, []
    for seed in range(2000):
        options = RDPOptions(1, 1, proposal="uniform", generator=torch.Generator().manual_seed(seed))
        log_z = LinearChain(chain, backend="randomized", options=options).log_partition
        draws.append(log_z.exp())
        zeros += int(bool(torch.isinf(log_z).any()) and not bool(torch.isinf(log_z).all()))
    draws = torch.stack(draws)
    assert zeros > 0
    mean, error = draws.mean(0), draws.std(0) / 2000**0.5
    assert ((mean - exact).abs() < 4 * error).all(), (mean, exact, error)


def test_estimates_of_zero_in_a_large_batch_take_one_pass(monkeypatch):
    """Where some sequences keep no path, the others' estimates were redone one sequence at a time:
    17.5 s against 0.04 s at B = 20,000 with a fixed start state (audit U). Now the forward runs three
    times (the batch, the chain's own check that it has a path, the live sequences) and each live
    sequence's estimate is the one it gets on its own."""
    base = fixed_start_chain()
    chain = DenseChain(base.unary.repeat(32, 1, 1), base.transition, base.init[0])  # B = 64
    lengths = torch.arange(64) % 5 + 1
    options = RDPOptions(1, 1, proposal="uniform", generator=torch.Generator().manual_seed(0))
    dist = LinearChain(chain, lengths, backend="randomized", options=options)
    runs = []
    original = exact.fast_log_partition
    monkeypatch.setattr(exact, "fast_log_partition", lambda *a: runs.append(1) or original(*a))
    log_z = dist.log_partition
    assert len(runs) == 3
    dead = torch.isneginf(log_z)
    assert 0 < int(dead.sum()) < 64
    small = reduced_chain(dist.factors, dist.engine.kept_states(dist.factors))
    for b in (~dead).nonzero().flatten().tolist():
        one = DenseChain(small.unary[b : b + 1], small.transition[b : b + 1])
        assert log_z[b].item() == pytest.approx(original(one, lengths[b : b + 1]).item(), rel=1e-12)


def test_a_chain_without_a_path_still_names_its_sequence():
    chain = fixed_start_chain()
    chain.unary[1, 3] = float("-inf")  # sequence 1: no state can be at position 3
    options = RDPOptions(1, 1, proposal="uniform", generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"zero probability for batch element\(s\) \[1\]"):
        LinearChain(chain, backend="randomized", options=options).log_partition  # noqa: B018
    with pytest.raises(ValueError, match=r"zero probability for batch element\(s\) \[1\]"):
        LinearChain(chain).log_partition  # noqa: B018


def test_what_is_derived_from_an_estimate_of_zero_is_refused():
    """Where a draw keeps no path of a sequence (Z_hat = 0, log -inf as before), the marginals (all 0),
    the entropy and the relaxed samples (the chain's 'zero probability' error, which blamed its
    potentials) are undefined: one error names the sequences and what to change. The chain still
    trains: log Z_hat's gradient is 0 there."""
    chain = fixed_start_chain()
    for seed in range(200):  # a draw where sequence 0 or 1 has Z_hat = 0
        options = RDPOptions(1, 1, proposal="uniform", generator=torch.Generator().manual_seed(seed))
        dist = LinearChain(chain, backend="randomized", options=options)
        dead = torch.isneginf(dist.log_partition)
        if dead.any():
            break
    named = re.escape(f"Z_hat is 0 for batch elements {dead.nonzero().flatten().tolist()}")
    for operation in ("marginals", "entropy"):
        with pytest.raises(ValueError, match=named + r".*its " + operation):
            getattr(dist, operation)
    with pytest.raises(ValueError, match=named + r".*relaxed samples"):
        dist.rsample(1.0)
    unary = chain.unary.clone().requires_grad_()
    options = RDPOptions(1, 1, proposal="uniform", generator=torch.Generator().manual_seed(seed))  # the draw
    trained = LinearChain(DenseChain(unary, chain.transition, chain.init), None, "randomized", options)
    trained.log_partition.exp().sum().backward()
    assert torch.isfinite(unary.grad).all() and (unary.grad[dead] == 0).all()
