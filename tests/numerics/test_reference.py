"""The yardstick itself: the plain log-space DPs of numerics/reference.py agree with brute-force
enumeration (tests/bruteforce.py, semimarkov/sm_bruteforce.py, tree_bruteforce.py) in float64, and
assert_float32_close reports the worst entry with both values and the budget."""

import math
import os
import sys

import bruteforce as bf
import pytest
import torch
import tree_bruteforce as tb

from numerics import reference as ref

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "semimarkov"))
import sm_bruteforce as sbf  # noqa: E402

F64 = torch.float64
INF = float("inf")


def close(a, b, what, atol=1e-10):
    b = torch.as_tensor(b, dtype=F64)
    assert torch.allclose(torch.as_tensor(a, dtype=F64), b, atol=atol, rtol=0), f"{what}: {a} != {b}"


@pytest.mark.parametrize("per_position", [False, True])
def test_chain_reference_matches_bruteforce(per_position):
    g = torch.Generator().manual_seed(0)
    B, T, N = 2, 4, 3
    u = torch.randn(B, T, N, generator=g, dtype=F64)
    tr = torch.randn(*((B, T - 1, N, N) if per_position else (N, N)), generator=g, dtype=F64)
    tr[..., 0, 1] = -INF
    init = torch.tensor([0.0, -INF, 0.3], dtype=F64)
    L = torch.tensor([4, 2])
    spec = bf.ChainSpec("dense", dict(unary=u, transition=tr, init=init), L)
    r = ref.ChainRef(u, tr, init, L, pairwise=True)
    for b in range(B):
        n = int(L[b])
        close(r.log_partition[b], bf.log_partition(spec, b), "log Z")
        close(r.marginals[b, :n], bf.marginals(spec, b)[:n], "marginals")
        close(r.pairwise_marginals[b, : n - 1], bf.pairwise_marginals(spec, b)[: n - 1], "pairwise")
        close(r.entropy[b], bf.entropy(spec, b), "entropy", 1e-9)
        close(r.max_score[b], bf.max_score(spec, b), "max score")
        seq, score = bf.best(spec, b)
        states = torch.full((B, T), -1)
        states[b, :n] = torch.tensor(seq)
        close(r.score(states.clamp(min=0))[b], score, "score")


@pytest.mark.parametrize("kind", ["dense", "edge"])
def test_semimarkov_reference_matches_bruteforce(kind):
    g = torch.Generator().manual_seed(1)
    B, T, N, D = 2, 5, 3, 3
    L = torch.tensor([5, 3])
    if kind == "dense":
        u = torch.randn(B, T, N, generator=g, dtype=F64)
        tr = torch.randn(N, N, generator=g, dtype=F64).fill_diagonal_(-INF)
        dur = torch.randn(N, D, generator=g, dtype=F64)
        dur[1, 1] = -INF
        init = torch.randn(N, generator=g, dtype=F64)
        spec = sbf.SMSpec("dense", dict(unary=u, transition=tr, duration=dur, init=init), L)
        form = ref.dense_sm_form(u, tr, dur, init)
    else:
        first = torch.randn(B, D, N, generator=g, dtype=F64)
        edge = torch.randn(B, T - 1, D, N, N, generator=g, dtype=F64)
        edge[0, 1, 0, 1, 2] = -INF
        spec = sbf.SMSpec("edge", dict(first=first, edge=edge), L)
        form = ref.SMForm("edge", first=first, edge=edge)
    r = ref.SMRef(form, L)
    for b in range(B):
        close(r.log_partition[b], sbf.log_partition(spec, b), "log Z")
        close(r.segment_marginals[b], sbf.segment_marginals(spec, b), "segment marginals")
        close(r.marginals[b], sbf.marginals(spec, b), "marginals")
        close(r.entropy[b], sbf.entropy(spec, b), "entropy", 1e-9)
        segs, best = sbf.best(spec, b)
        close(r.max_score[b], best, "max score")
        row = torch.tensor(sbf.to_tensor_format(segs, T))
        close(r.score(torch.stack([row] * B))[b], best, "score")


def test_semimarkov_restricted_reference_keeps_only_kept_states():
    """keep = all states is the unrestricted DP; a restriction never adds mass."""
    g = torch.Generator().manual_seed(2)
    B, T, N, D = 1, 6, 3, 2
    form = ref.dense_sm_form(
        torch.randn(B, T, N, generator=g, dtype=F64),
        torch.randn(N, N, generator=g, dtype=F64),
        torch.randn(N, D, generator=g, dtype=F64),
    )
    full = ref.sm_forward(form)
    close(ref.sm_forward(form, keep=torch.ones(B, T, N, dtype=torch.bool)), full, "keep all")
    keep = torch.rand(B, T, N, generator=g) < 0.6
    keep[..., 0] = True
    assert (ref.sm_forward(form, keep=keep) <= full + 1e-12).all()


def test_tree_reference_matches_bruteforce():
    g = torch.Generator().manual_seed(3)
    B = 2
    spec = tb.random_spec("dense", B, 5, 2, 3, lengths=torch.tensor([5, 3]), generator=g)
    a = spec.args
    root = a["root"].expand(B, -1)
    rules = a["rules"].expand(B, *a["rules"].shape[-3:])
    r = ref.TreeRef(root, rules, a["terms"], spec.lengths)
    for b in range(B):
        close(r.log_partition[b], tb.log_partition(spec, b), "log Z")
        close(r.span_marginals[b], tb.span_marginals(spec, b), "span marginals")
        close(r.marginals[b], tb.marginals(spec, b), "marginals")
        close(r.preterminal_marginals[b], tb.preterminal_marginals(spec, b), "preterminal marginals")
        close(r.entropy[b], tb.entropy(spec, b), "entropy", 1e-9)
        close(r.max_score[b], tb.max_score(spec, b), "max score")
        best = next(iter(tb.best(spec, b)[1]))
        trees = tb.to_tensor_trees([best], 5).expand(B, -1, -1)
        close(r.score(trees)[b], tb.max_score(spec, b), "score")


def test_plain_float32_dp_error_is_small_on_easy_inputs():
    """Sanity of the yardstick: on O(1) inputs the float32 plain DP is within 1e-5 of float64."""
    g = torch.Generator().manual_seed(4)
    u = torch.randn(2, 30, 4, generator=g, dtype=F64)
    tr = torch.randn(4, 4, generator=g, dtype=F64).log_softmax(-1)
    r64 = ref.ChainRef(u, tr)
    r32 = ref.ChainRef(u.float(), tr.float())
    assert (ref.ref_error(r32.log_partition, r64.log_partition) < 1e-4).all()
    assert (ref.ref_error(r32.marginals, r64.marginals) < 1e-5).all()
    assert (ref.ref_error(r32.entropy, r64.entropy) < 1e-4).all()


def test_assert_float32_close_reports_the_worst_entry():
    q64 = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    q32 = torch.tensor([1.0, 2.5, 3.0])
    with pytest.raises(AssertionError, match=r"worst entry \(1,\): float32 = 2\.5, float64 = 2.*budget"):
        ref.assert_float32_close("q", q32, q64, torch.zeros(3, dtype=F64), 1e-3)
    with pytest.raises(AssertionError, match="float32 gives nan at"):
        ref.assert_float32_close("q", torch.tensor([1.0, math.nan, 3.0]), q64, 0.0, 1e-3)
    ref.assert_float32_close("q", q32, q64, torch.tensor([0.0, 0.3, 0.0], dtype=F64), 1e-3)


def test_run_pair_requires_float32_to_raise_where_float64_does():
    def raise_value_error():
        raise ValueError("bad")

    assert ref.run_pair("x", raise_value_error, raise_value_error) is None
    with pytest.raises(AssertionError, match="float64 raised ValueError"):
        ref.run_pair("x", raise_value_error, lambda: 1)
    with pytest.raises(AssertionError, match="float32 raised ValueError: bad where float64 succeeded"):
        ref.run_pair("x", lambda: 1, raise_value_error)
