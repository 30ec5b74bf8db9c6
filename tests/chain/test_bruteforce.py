"""Every chain operation of docs/chain-api.md against brute-force enumeration (tests/bruteforce.py).

Containers x backends: "exact" for all; the container's own backend (backend=None and, where it is
not "exact", its explicit name); "randomized" with k1 = N, k2 = 0 (which must reproduce exact).
Tiny sizes (N <= 3, T <= 4, B in 2..3, ragged lengths), float64.
"""

from __future__ import annotations

import itertools
import math
import os

import bruteforce as bf
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    ALL_COMBOS,
    DTYPE,
    backends_for,
    build_dist,
    chain_specs,
    combo_id,
    with_grad,
)

RTOL = 1e-8
ATOL = 1e-10

# ZOO_TEST_EXAMPLES=200 for a longer hunt (default keeps the file around a minute)
FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 10)), deadline=None)
STAT = settings(max_examples=3, deadline=None, derandomize=True)


def close(actual, expected, what, rtol=RTOL, atol=ATOL):
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
    assert actual.dtype == DTYPE, f"{what}: dtype {actual.dtype}, expected {DTYPE}"
    expected = torch.as_tensor(expected, dtype=DTYPE)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(actual.detach(), expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def specs(kind, **kw):
    return chain_specs(kind, **kw)


combos = pytest.mark.parametrize("combo", ALL_COMBOS, ids=combo_id)


def tv_bound(n_cells, n):
    """Threshold for the total-variation distance between an n-sample empirical distribution and
    the truth: E[TV] <= 0.5 sqrt(K/n); McDiarmid gives P(TV > E[TV] + 0.05) <= exp(-n 0.1^2 / 2)."""
    return 0.5 * math.sqrt(n_cells / n) + 0.05


def tv_distance(counts: dict, probs: dict, n: int) -> float:
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(k, 0) / n - probs.get(k, 0.0)) for k in keys)


# --------------------------------------------------------------------------- exact quantities
# (operation, brute-force reference for one batch element, absolute tolerance)
EXACT_QUANTITIES = {
    "log_partition": (bf.log_partition, ATOL),
    "marginals": (bf.marginals, ATOL),
    "pairwise_marginals": (bf.pairwise_marginals, ATOL),
    "entropy": (bf.entropy, 1e-9),
}


@pytest.mark.parametrize("operation", list(EXACT_QUANTITIES))
@combos
@FAST
@given(data=st.data())
def test_exact_quantity(operation, combo, data):
    kind, backend = combo
    spec = data.draw(specs(kind))
    dist = build_dist(spec, backend)
    reference, atol = EXACT_QUANTITIES[operation]
    expected = torch.stack([torch.as_tensor(reference(spec, b), dtype=DTYPE) for b in range(spec.batch)])
    close(getattr(dist, operation), expected, operation, atol=atol)


def _garbage_past_length(states, spec, fill):
    """Overwrite entries past each length with `fill` ("random" in-range states or an int)."""
    states = states.clone()
    T = spec.T
    for b in range(spec.batch):
        L = spec.length(b)
        if L < T:
            if fill == "random":
                states[..., b, L:] = torch.randint(0, spec.N, states[..., b, L:].shape)
            else:
                states[..., b, L:] = fill
    return states


@combos
@FAST
@given(data=st.data(), seed=st.integers(0, 2**31 - 1), fill=st.sampled_from(["random", -1]))
def test_log_prob(combo, data, seed, fill):
    kind, backend = combo
    spec = data.draw(specs(kind))
    dist = build_dist(spec, backend)
    g = torch.Generator().manual_seed(seed)
    S = 3
    states = torch.randint(0, spec.N, (S, spec.batch, spec.T), generator=g)
    states = _garbage_past_length(states, spec, fill)
    logz = [bf.log_partition(spec, b) for b in range(spec.batch)]
    expected = torch.tensor(
        [
            [bf.seq_score(spec, b, states[s, b].tolist()) - logz[b] for b in range(spec.batch)]
            for s in range(S)
        ],
        dtype=DTYPE,
    )
    close(dist.log_prob(states), expected, "log_prob (S x B x T)")
    close(dist.log_prob(states[1]), expected[1], "log_prob (B x T)")


@combos
@FAST
@given(data=st.data())
def test_log_prob_sums_to_one(combo, data):
    """Sum over all N^T full-length sequences of exp(log_prob) = N^(T - L): each of the N^L
    sequences of length L appears N^(T-L) times (entries past L are ignored)."""
    kind, backend = combo
    spec = data.draw(specs(kind, max_t=3))
    dist = build_dist(spec, backend)
    allseq = torch.tensor(list(itertools.product(range(spec.N), repeat=spec.T)), dtype=torch.long)
    states = allseq[:, None, :].expand(-1, spec.batch, -1).contiguous()
    lp = dist.log_prob(states)
    assert lp.shape == (allseq.shape[0], spec.batch)
    expected = [float(spec.N ** (spec.T - spec.length(b))) for b in range(spec.batch)]
    close(lp.exp().sum(0), expected, "sum exp(log_prob)")


@combos
@FAST
@given(data=st.data())
def test_argmax_and_max_score(combo, data):
    kind, backend = combo
    spec = data.draw(specs(kind))
    dist = build_dist(spec, backend)
    best = [bf.max_score(spec, b) for b in range(spec.batch)]
    am = dist.argmax
    assert am.dtype == torch.long and am.shape == (spec.batch, spec.T)
    for b in range(spec.batch):
        L = spec.length(b)
        assert (am[b, L:] == -1).all(), f"argmax past length must be -1: {am[b].tolist()} (L={L})"
        assert ((am[b, :L] >= 0) & (am[b, :L] < spec.N)).all(), am[b].tolist()
    got = [bf.seq_score(spec, b, am[b].tolist()) for b in range(spec.batch)]
    close(torch.tensor(got, dtype=DTYPE), best, "score of argmax vs brute-force max")
    close(dist.max_score, best, "max_score")
    logz = [bf.log_partition(spec, b) for b in range(spec.batch)]
    close(dist.log_prob(am), [m - z for m, z in zip(best, logz)], "log_prob(argmax)")


# --------------------------------------------------------------------------- sampling
def _check_samples_against_truth(samples, spec, n):
    for b in range(spec.batch):
        L = spec.length(b)
        assert (samples[:, b, L:] == -1).all(), f"samples past length {L} must be -1"
        inside = samples[:, b, :L]
        assert ((inside >= 0) & (inside < spec.N)).all(), "sampled state out of range"
        probs = bf.distribution(spec, b)
        counts = {}
        for row in inside.tolist():
            counts[tuple(row)] = counts.get(tuple(row), 0) + 1
        zero = [k for k in counts if probs[k] == 0.0]
        assert not zero, f"sampled zero-probability sequences {zero}"
        tv = tv_distance(counts, probs, n)
        assert tv < tv_bound(len(probs), n), (
            f"element {b}: TV(empirical, brute force) = {tv:.4f} >= {tv_bound(len(probs), n):.4f}"
        )


@combos
@STAT
@given(data=st.data())
def test_sample_distribution(combo, data):
    kind, backend = combo
    spec = data.draw(specs(kind, max_t=3))
    dist = build_dist(spec, backend)
    n = 4000
    g = torch.Generator().manual_seed(1234)
    samples = dist.sample(n, generator=g)
    assert samples.dtype == torch.long and samples.shape == (n, spec.batch, spec.T)
    _check_samples_against_truth(samples, spec, n)
    # the generator makes it reproducible
    s1 = dist.sample(7, generator=torch.Generator().manual_seed(5))
    s2 = dist.sample(7, generator=torch.Generator().manual_seed(5))
    assert torch.equal(s1, s2), "sample with equal generator seeds must be reproducible"


def _grad_names(kind):
    return ["emission"] if kind == "rankspace" else ["unary"]


@combos
@FAST
@given(data=st.data(), temperature=st.sampled_from([1.0, 0.5, 2.0]))
def test_rsample(combo, data, temperature):
    kind, backend = combo
    spec = with_grad(data.draw(specs(kind)), _grad_names(kind))
    dist = build_dist(spec, backend)
    g = torch.Generator().manual_seed(0)
    y = dist.rsample(temperature=temperature, generator=g)
    assert y.dtype == DTYPE and y.shape == (spec.batch, spec.T, spec.N)
    for b in range(spec.batch):
        L = spec.length(b)
        assert (y[b, L:] == 0).all(), f"rsample past length {L} must be zero: {y[b].tolist()}"
        assert (y[b, :L] >= 0).all(), f"rsample rows must be non-negative: {y[b].tolist()}"
        close(y[b, :L].sum(-1), torch.ones(L, dtype=DTYPE), "rsample row sums", rtol=1e-9, atol=1e-9)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    (y * w).sum().backward()
    leaf = spec.args[_grad_names(kind)[0]]
    assert leaf.grad is not None, "rsample: no gradient reached the potentials"
    assert torch.isfinite(leaf.grad).all(), f"rsample: non-finite gradient {leaf.grad}"
    one_rank = kind == "rankspace" and spec.args["U"].shape[-1] == 1  # emissions shift every state alike
    if spec.N > 1 and not one_rank:
        assert leaf.grad.abs().sum() > 0, "rsample: gradient is identically zero"


_BATCHED_DIM = {"unary": 3, "emission": 3, "init": 2, "start": 2, "transition": 4, "log_rank_weights": 3}


def _tile(spec, n):
    """Spec with batch size 1 -> n identical copies along the batch."""
    args = {}
    for k, v in spec.args.items():
        if isinstance(v, torch.Tensor) and v.dim() == _BATCHED_DIM.get(k, -1):
            args[k] = v.expand(n, *v.shape[1:]).contiguous()
        else:
            args[k] = v
    lengths = None if spec.lengths is None else spec.lengths.expand(n).contiguous()
    return bf.ChainSpec(spec.kind, args, lengths)


@pytest.mark.slow
@combos
@STAT
@given(data=st.data())
def test_rsample_low_temperature_is_a_sample(combo, data):
    """A relaxed one-hot sample at low temperature rounds to an (exact) sample of the chain:
    tile one chain 3000 times along the batch and compare the rounded sequences to brute force."""
    kind, backend = combo
    spec = data.draw(specs(kind, max_t=3, min_b=1, max_b=1))
    n = 3000
    tiled = _tile(spec, n)
    dist = build_dist(tiled, backend)
    y = dist.rsample(temperature=0.01, generator=torch.Generator().manual_seed(7))
    L = spec.length(0)
    top = y[:, :L].max(-1).values
    assert top.mean() > 0.95, f"temperature 0.01 should give near one-hot rows, mean max {top.mean():.3f}"
    hard = y.argmax(-1)
    hard[:, L:] = -1
    _check_samples_against_truth(hard[:, None, :], spec, n)


# --------------------------------------------------------------------------- -inf transitions
@pytest.mark.parametrize("backend", backends_for("dense"), ids=lambda b: b or "native")
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_forbidden_transitions(backend, data):
    spec = data.draw(specs("dense", forbid=True, min_n=2, min_t=2))
    spec = with_grad(spec, ["unary", "transition"])
    dist = build_dist(spec, backend)
    B = spec.batch
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(B)], "log_partition")
    close(dist.marginals, torch.stack([bf.marginals(spec, b) for b in range(B)]), "marginals")
    pw = torch.stack([bf.pairwise_marginals(spec, b) for b in range(B)])
    close(dist.pairwise_marginals, pw, "pairwise_marginals")
    close(dist.entropy, [bf.entropy(spec, b) for b in range(B)], "entropy", atol=1e-9)
    am = dist.argmax
    close(
        torch.tensor([bf.seq_score(spec, b, am[b].tolist()) for b in range(B)], dtype=DTYPE),
        [bf.max_score(spec, b) for b in range(B)],
        "score of argmax",
    )
    close(dist.max_score, [bf.max_score(spec, b) for b in range(B)], "max_score")
    # a forbidden sequence has log_prob -inf
    tr = spec.args["transition"].detach()
    for b in range(B):
        L = spec.length(b)
        for z, p in bf.distribution(spec, b).items():
            if p == 0.0:
                states = torch.zeros(B, spec.T, dtype=torch.long)
                states[b, :L] = torch.tensor(z)
                lp = dist.log_prob(states)[b]
                assert lp == float("-inf"), f"log_prob of forbidden {z} = {lp}"
                break
    # gradients of log Z: d/d unary = marginals, d/d transition = pairwise marginals (finite, no NaN)
    dist.log_partition.sum().backward()
    # a None grad (input unused, e.g. every length is 1) counts as zero; compared below
    gu, gt = (
        torch.zeros_like(x) if x.grad is None else x.grad
        for x in (spec.args["unary"], spec.args["transition"])
    )
    assert torch.isfinite(gu).all() and torch.isfinite(gt).all(), f"non-finite grads {gu} {gt}"
    close(gu, torch.stack([bf.marginals(spec, b) for b in range(B)]), "d logZ / d unary")
    expected_gt = pw.sum((0, 1)) if tr.dim() == 2 else pw
    close(gt, expected_gt, "d logZ / d transition")


@pytest.mark.parametrize("backend", backends_for("dense"), ids=lambda b: b or "native")
@settings(max_examples=3, deadline=None, derandomize=True)
@given(data=st.data())
def test_forbidden_transitions_sampling(backend, data):
    spec = data.draw(specs("dense", forbid=True, max_t=3, min_n=2, min_t=2))
    dist = build_dist(spec, backend)
    n = 4000
    samples = dist.sample(n, generator=torch.Generator().manual_seed(99))
    _check_samples_against_truth(samples, spec, n)


# --------------------------------------------------------------------------- specific cases
@pytest.mark.parametrize("backend", [None, "exact", "low-rank", "low_rank", "randomized"])
@pytest.mark.parametrize("normalize", [True, False])
def test_lowrank_zero_features(backend, normalize):
    """Exact zeros in the non-negative features (some transitions impossible)."""
    left = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.5, 0.5]], dtype=DTYPE)
    right = torch.tensor([[1.0, 0.0], [0.3, 0.0], [0.0, 1.5]], dtype=DTYPE)
    unary = torch.randn(3, 4, 3, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    spec = bf.ChainSpec(
        "lowrank",
        dict(unary=unary, left=left, right=right, init=None, normalize=normalize, log_rank_weights=None),
        torch.tensor([4, 2, 3]),
    )
    dist = build_dist(spec, backend)
    B = spec.batch
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(B)], "log_partition")
    close(dist.marginals, torch.stack([bf.marginals(spec, b) for b in range(B)]), "marginals")
    close(dist.entropy, [bf.entropy(spec, b) for b in range(B)], "entropy", atol=1e-9)
    close(dist.max_score, [bf.max_score(spec, b) for b in range(B)], "max_score")


@pytest.mark.parametrize(
    "kind,spelling",
    [("lowrank", "low_rank"), ("rankspace", "rank_space"), ("lowrank", "LOW-RANK"), ("dense", "EXACT")],
)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_backend_spellings(kind, spelling, data):
    spec = data.draw(specs(kind))
    dist = build_dist(spec, spelling)
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(spec.batch)], "log_partition")


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_low_rank_backend_on_rank_space(data):
    """Not in the contract's list, but the 'low-rank' backend says it accepts RankSpaceChain
    factors; if it does, it must be right."""
    spec = data.draw(specs("rankspace"))
    dist = build_dist(spec, "low-rank")
    B = spec.batch
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(B)], "log_partition")
    close(dist.marginals, torch.stack([bf.marginals(spec, b) for b in range(B)]), "marginals")
    close(dist.entropy, [bf.entropy(spec, b) for b in range(B)], "entropy", atol=1e-9)


@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_lengths_none_is_full_length(data):
    spec = data.draw(specs("dense"))
    full = bf.ChainSpec(spec.kind, spec.args, torch.full((spec.batch,), spec.T, dtype=torch.long))
    none = bf.ChainSpec(spec.kind, spec.args, None)
    close(build_dist(none).log_partition, build_dist(full).log_partition.detach(), "lengths=None vs T")
    close(build_dist(none).log_partition, [bf.log_partition(none, b) for b in range(spec.batch)], "log Z")


@pytest.mark.parametrize("kind", ["dense", "lowrank", "rankspace"])
@pytest.mark.parametrize("proposal", ["uniform", "local", "global", "local+global", "tensor"])
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_randomized_full_k1_any_proposal(kind, proposal, data):
    from zoo.inference import RDPOptions

    spec = data.draw(specs(kind))
    if proposal == "tensor":
        proposal = (
            torch.rand(spec.batch, spec.T, spec.N, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
            + 0.1
        )
    opts = RDPOptions(spec.N, 0, proposal=proposal, generator=torch.Generator().manual_seed(0))
    dist = build_dist(spec, "randomized", options=opts)
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(spec.batch)], "log_partition")
    close(dist.entropy, [bf.entropy(spec, b) for b in range(spec.batch)], "entropy", atol=1e-9)


def _tile_fixed_chain(kind, N, T, B, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=DTYPE)  # noqa: E731
    u = lambda *s: torch.rand(*s, generator=g, dtype=DTYPE) + 0.1  # noqa: E731
    L = torch.tensor([T, T - 1])[torch.arange(B) % 2]
    if kind == "dense":
        args = dict(unary=r(1, T, N).expand(B, T, N), transition=r(N, N), init=None)
    elif kind == "lowrank":
        args = dict(
            unary=r(1, T, N).expand(B, T, N),
            left=u(N, 2),
            right=u(N, 2),
            init=r(N),
            normalize=True,
            log_rank_weights=None,
        )
    else:
        args = dict(start=u(N), U=u(N, 2), V=u(N, 2), emission=(r(1, T, 2) - 1).expand(B, T, 2))
    return bf.ChainSpec(kind, args, L)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind,proposal,k1,k2",
    [
        ("dense", "uniform", 1, 1),
        ("dense", "local", 0, 2),
        ("dense", "tensor", 2, 1),
        ("lowrank", "global", 1, 1),
        ("lowrank", "local+global", 2, 1),
        ("lowrank", "uniform", 0, 2),
        ("rankspace", "local+global", 1, 1),
        ("rankspace", "tensor", 0, 2),
    ],
)
def test_randomized_unbiased(kind, proposal, k1, k2):
    """exp(log Z_hat) is unbiased for Z; E[log Z_hat] <= log Z (Jensen).

    One chain tiled along the batch (even elements length T, odd ones T-1); M independent
    LinearChain objects; the standard error comes from the M per-object means (robust to any
    correlation between batch elements inside one object)."""
    from zoo.inference import RDPOptions

    N, T, B, M = 4, 4, 400, 20
    spec = _tile_fixed_chain(kind, N, T, B, seed=11)
    if proposal == "tensor":
        proposal = torch.rand(B, T, N, generator=torch.Generator().manual_seed(3), dtype=DTYPE) + 0.1
    for parity in (0, 1):
        logz = bf.log_partition(spec, parity)
        means, logmeans = [], []
        for m in range(M):
            opts = RDPOptions(k1, k2, proposal=proposal, generator=torch.Generator().manual_seed(100 + m))
            est = build_dist(spec, "randomized", options=opts).log_partition.detach()[parity::2]
            assert torch.isfinite(est).all(), f"non-finite log Z_hat: {est[~torch.isfinite(est)][:5]}"
            means.append((est - logz).exp().mean().item())
            logmeans.append((est - logz).mean().item())
        mean = sum(means) / M
        se = math.sqrt(sum((x - mean) ** 2 for x in means) / (M - 1) / M)
        assert abs(mean - 1.0) <= 6 * se + 1e-9, (
            f"E[Z_hat]/Z = {mean:.4f} +- {se:.4f} (length {T - parity}, {k1=}, {k2=})"
        )
        lmean = sum(logmeans) / M
        lse = math.sqrt(sum((x - lmean) ** 2 for x in logmeans) / (M - 1) / M)
        assert lmean <= 6 * lse + 1e-9, f"E[log Z_hat] - log Z = {lmean:.4f} +- {lse:.4f} > 0"
