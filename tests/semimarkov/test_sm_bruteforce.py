"""Every semi-Markov operation of docs/semimarkov-api.md against brute-force enumeration.

Containers x backends: "exact" for all; the container's own backend; "randomized" with k1 = N, k2 = 0
(which must reproduce exact). Tiny sizes (N <= 3, T <= 4, D <= 3, B in 2..3, ragged lengths), float64.
The forward shifts its values every frame here (every 32 in use: ``forward.SHIFT_EVERY``), so that what
reads values of different frames (the window, sampling's walk back, the Viterbi) is checked with shifts.
"""

from __future__ import annotations

import math
import os

import pytest
import sm_bruteforce as bf
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sm_strategies import ALL_COMBOS, DTYPE, build_dist, combo_id, grad_names, sm_specs, with_grad

import zoo.inference.semimarkov.forward as forward_module

RTOL, ATOL = 1e-8, 1e-10
FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 8)), deadline=None)
STAT = settings(max_examples=2, deadline=None, derandomize=True)
combos = pytest.mark.parametrize("combo", ALL_COMBOS, ids=combo_id)


@pytest.fixture(autouse=True, scope="module")
def shift_every_frame():
    """The forward's shifts at every frame (module scope: hypothesis reruns a test in one call)."""
    every, forward_module.SHIFT_EVERY = forward_module.SHIFT_EVERY, 1
    yield
    forward_module.SHIFT_EVERY = every


def close(actual, expected, what, rtol=RTOL, atol=ATOL):
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
    assert actual.dtype == DTYPE, f"{what}: dtype {actual.dtype}"
    expected = torch.as_tensor(expected, dtype=DTYPE)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(actual.detach(), expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


QUANTITIES = {
    "log_partition": (bf.log_partition, ATOL),
    "segment_marginals": (bf.segment_marginals, ATOL),
    "marginals": (bf.marginals, ATOL),
    "entropy": (bf.entropy, 1e-9),
}


@pytest.mark.parametrize("operation", list(QUANTITIES))
@combos
@FAST
@given(data=st.data())
def test_exact_quantity(operation, combo, data):
    kind, backend = combo
    spec = data.draw(sm_specs(kind))
    dist = build_dist(spec, backend)
    reference, atol = QUANTITIES[operation]
    expected = torch.stack([torch.as_tensor(reference(spec, b), dtype=DTYPE) for b in range(spec.batch)])
    close(getattr(dist, operation), expected, operation, atol=atol)


@pytest.mark.parametrize("operation", list(QUANTITIES))
@pytest.mark.parametrize("combo", [c for c in ALL_COMBOS if c[0] != "edge"], ids=combo_id)
@FAST
@given(data=st.data())
def test_forbidden_frames(operation, combo, data):
    """-inf frame scores (a state forbidden at a frame, as a partial labelling makes): a segment's
    emission is a difference of cumulative sums, which was -inf - (-inf) = NaN for every segment after
    the first -inf (log Z, marginals and entropy NaN)."""
    kind, backend = combo
    spec = data.draw(sm_specs(kind))
    key = "emission" if kind == "rankspace" else "unary"
    scores = spec.args[key]
    rare = st.sampled_from([False, False, False, True])  # most draws keep a segmentation
    forbidden = torch.tensor(data.draw(st.lists(rare, min_size=scores.numel(), max_size=scores.numel())))
    spec.args[key] = scores.masked_fill(forbidden.view(scores.shape), float("-inf"))
    assume(all(math.isfinite(bf.log_partition(spec, b)) for b in range(spec.batch)))
    reference, atol = QUANTITIES[operation]
    expected = torch.stack([torch.as_tensor(reference(spec, b), dtype=DTYPE) for b in range(spec.batch)])
    close(getattr(build_dist(spec, backend), operation), expected, operation, atol=atol)


def random_segmentations(spec, S, g, fill):
    """S x B x T segmentations: random starts (frame 0 always), random states; past the length
    either random garbage or -1. Some segments are longer than D (log_prob -inf)."""
    starts = torch.rand(S, spec.batch, spec.T, generator=g) < 0.5
    starts[..., 0] = True
    seg = torch.where(starts, torch.randint(0, spec.N, (S, spec.batch, spec.T), generator=g), -1)
    for b in range(spec.batch):
        L = spec.length(b)
        if fill == "random":
            seg[:, b, L:] = torch.randint(-1, spec.N, seg[:, b, L:].shape, generator=g)
        else:
            seg[:, b, L:] = -1
    return seg


@combos
@FAST
@given(data=st.data(), seed=st.integers(0, 2**31 - 1), fill=st.sampled_from(["random", -1]))
def test_log_prob(combo, data, seed, fill):
    kind, backend = combo
    spec = data.draw(sm_specs(kind))
    dist = build_dist(spec, backend)
    S = 4
    seg = random_segmentations(spec, S, torch.Generator().manual_seed(seed), fill)
    logz = [bf.log_partition(spec, b) for b in range(spec.batch)]
    expected = torch.tensor(
        [
            [
                bf.score_of(spec, b, bf.from_tensor_format(seg[s, b].tolist(), spec.length(b))) - logz[b]
                for b in range(spec.batch)
            ]
            for s in range(S)
        ],
        dtype=DTYPE,
    )
    close(dist.log_prob(seg), expected, "log_prob (S x B x T)")
    close(dist.log_prob(seg[0]), expected[0], "log_prob (B x T)")


@combos
@FAST
@given(data=st.data())
def test_log_prob_sums_to_one(combo, data):
    """Sum of exp(log_prob) over every segmentation and labeling (brute-force list) is 1."""
    kind, backend = combo
    spec = data.draw(sm_specs(kind, max_t=3))
    dist = build_dist(spec, backend)
    for b in range(spec.batch):
        structures = list(bf.all_structures(spec, b))
        seg = torch.full((len(structures), spec.batch, spec.T), -1, dtype=torch.long)
        seg[:, :, 0] = 0
        for k, segs in enumerate(structures):
            seg[k, b] = torch.tensor(bf.to_tensor_format(segs, spec.T))
        total = dist.log_prob(seg)[:, b].exp().sum()
        close(total, 1.0, f"sum exp(log_prob), element {b}")


@combos
@FAST
@given(data=st.data())
def test_argmax_and_max_score(combo, data):
    kind, backend = combo
    spec = data.draw(sm_specs(kind))
    dist = build_dist(spec, backend)
    best = [bf.best(spec, b)[1] for b in range(spec.batch)]
    am = dist.argmax
    assert am.dtype == torch.long and am.shape == (spec.batch, spec.T)
    for b in range(spec.batch):
        L = spec.length(b)
        assert (am[b, L:] == -1).all(), f"argmax past length must be -1: {am[b].tolist()} (L={L})"
        assert am[b, 0] >= 0, f"frame 0 must start a segment: {am[b].tolist()}"
    got = [
        bf.score_of(spec, b, bf.from_tensor_format(am[b].tolist(), spec.length(b))) for b in range(spec.batch)
    ]
    close(torch.tensor(got, dtype=DTYPE), best, "score of argmax vs brute-force max")
    close(dist.max_score, best, "max_score")


def tv_bound(cells, n):
    return 0.5 * math.sqrt(cells / n) + 0.05


def check_samples(samples, spec, n):
    for b in range(spec.batch):
        L = spec.length(b)
        assert (samples[:, b, L:] == -1).all(), f"samples past length {L} must be -1"
        probs = bf.distribution(spec, b)
        counts = {}
        for row in samples[:, b].tolist():
            key = bf.from_tensor_format(row, L)
            counts[key] = counts.get(key, 0) + 1
        unknown = [k for k in counts if probs.get(k, 0.0) == 0.0]
        assert not unknown, f"sampled impossible segmentations {unknown[:3]}"
        tv = 0.5 * sum(abs(counts.get(k, 0) / n - p) for k, p in probs.items())
        assert tv < tv_bound(len(probs), n), f"element {b}: TV = {tv:.4f} >= {tv_bound(len(probs), n):.4f}"


@combos
@STAT
@given(data=st.data())
def test_sample_distribution(combo, data):
    kind, backend = combo
    spec = data.draw(sm_specs(kind, max_t=3, max_n=2))
    dist = build_dist(spec, backend)
    n = 3000
    samples = dist.sample(n, generator=torch.Generator().manual_seed(1234))
    assert samples.dtype == torch.long and samples.shape == (n, spec.batch, spec.T)
    check_samples(samples, spec, n)
    s1 = dist.sample(5, generator=torch.Generator().manual_seed(5))
    s2 = dist.sample(5, generator=torch.Generator().manual_seed(5))
    assert torch.equal(s1, s2), "equal generator seeds must give equal samples"


@combos
@FAST
@given(data=st.data(), temperature=st.sampled_from([1.0, 0.5]))
def test_rsample(combo, data, temperature):
    kind, backend = combo
    spec = with_grad(data.draw(sm_specs(kind)), grad_names(kind))
    dist = build_dist(spec, backend)
    y = dist.rsample(temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert y.dtype == DTYPE and y.shape == (spec.batch, spec.T, spec.D, spec.N)
    assert (y >= 0).all()
    for b in range(spec.batch):
        L = spec.length(b)
        # every relaxed segment lies within the length; each backward step spends mass 1, so the
        # total is the (integer) number of segments of the underlying hard sample
        ends = torch.arange(spec.T).view(-1, 1) + torch.arange(1, spec.D + 1).view(1, -1)
        assert (y[b][ends > L] == 0).all(), "rsample put weight on a segment past the length"
        total = y[b].sum().detach()
        assert 1 - 1e-9 <= total <= L + 1e-9, f"relaxed mass {total} outside 1..{L}"
        close(total, total.round(), "relaxed mass is a number of segments", rtol=0, atol=1e-9)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    (y * w).sum().backward()
    leaf = spec.args[grad_names(kind)[0]]
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all(), "rsample: no finite gradient"


def _tile(spec, n):
    args = {}
    batched = {"unary": 3, "emission": 3, "first": 3, "edge": 5, "init": 2, "start": 2, "duration": 3}
    for k, v in spec.args.items():
        if isinstance(v, torch.Tensor) and v.dim() == batched.get(k, -1):
            args[k] = v[:1].expand(n, *v.shape[1:]).contiguous()
        else:
            args[k] = v
    lengths = None if spec.lengths is None else spec.lengths[:1].expand(n).contiguous()
    return bf.SMSpec(spec.kind, args, lengths)


@pytest.mark.parametrize("combo", [c for c in ALL_COMBOS if c[1] is None], ids=combo_id)
@settings(max_examples=1, deadline=None, derandomize=True)
@given(data=st.data())
def test_rsample_low_temperature_is_a_sample(combo, data):
    """At temperature 0.01 the relaxed indicators round to exact samples (one chain tiled 2000 times)."""
    kind, backend = combo
    spec = data.draw(sm_specs(kind, max_t=3, max_n=2))
    n = 2000
    tiled = _tile(spec, n)
    y = build_dist(tiled, backend).rsample(temperature=0.01, generator=torch.Generator().manual_seed(7))
    L = tiled.length(0)
    seg = torch.full((n, tiled.T), -1, dtype=torch.long)
    flat = y.flatten(2)  # n x T x (D N)
    for s in range(tiled.T):
        mass, idx = flat[:, s].max(-1)
        seg[:, s] = torch.where(mass > 0.5, idx % tiled.N, -1)
    one = _tile(spec, 1)
    assert one.length(0) == L
    check_samples(seg[:, None, :], one, n)


@pytest.mark.parametrize("backend", [None, "exact", "randomized"], ids=lambda b: b or "native")
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_forbidden_self_transitions_and_durations(backend, data):
    """-inf on the transition diagonal and on some durations: values and gradients stay exact."""
    spec = data.draw(sm_specs("dense", min_n=2, forbid_self=True, min_d=2, max_d=3))
    dur = spec.args["duration"].clone()
    dur[..., 0, -1] = float("-inf")  # state 0 never lasts D frames
    spec.args["duration"] = dur
    spec = with_grad(spec, ["unary", "transition"])
    dist = build_dist(spec, backend)
    B = spec.batch
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(B)], "log_partition")
    close(dist.marginals, torch.stack([bf.marginals(spec, b) for b in range(B)]), "marginals")
    close(dist.entropy, [bf.entropy(spec, b) for b in range(B)], "entropy", atol=1e-9)
    close(dist.max_score, [bf.best(spec, b)[1] for b in range(B)], "max_score")
    dist.log_partition.sum().backward()
    for name in ("unary", "transition"):
        g = spec.args[name].grad
        assert g is None or torch.isfinite(g).all(), f"non-finite gradient of {name}: {g}"
    if spec.args["unary"].grad is not None:
        expected = torch.stack([bf.marginals(spec, b) for b in range(B)])
        close(spec.args["unary"].grad, expected, "d logZ / d unary")


@pytest.mark.parametrize("kind", ["dense", "lowrank"])
@pytest.mark.parametrize("proposal", ["uniform", "local", "global", "local+global", "tensor"])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_randomized_full_k1_any_proposal(kind, proposal, data):
    from zoo.inference import RDPOptions

    spec = data.draw(sm_specs(kind))
    if proposal == "tensor":
        g = torch.Generator().manual_seed(3)
        proposal = torch.rand(spec.batch, spec.T, spec.N, generator=g, dtype=DTYPE) + 0.1
    opts = RDPOptions(spec.N, 0, proposal=proposal, generator=torch.Generator().manual_seed(0))
    dist = build_dist(spec, "randomized", options=opts)
    close(dist.log_partition, [bf.log_partition(spec, b) for b in range(spec.batch)], "log_partition")
    close(dist.entropy, [bf.entropy(spec, b) for b in range(spec.batch)], "entropy", atol=1e-9)


def test_to_frame_states():
    from zoo.inference.semimarkov import to_frame_states

    seg = torch.tensor([[2, -1, -1, 0, 1], [1, 1, -1, -1, -1]])
    frames = to_frame_states(seg, torch.tensor([5, 3]))
    assert frames.tolist() == [[2, 2, 2, 0, 1], [1, 1, 1, -1, -1]]
