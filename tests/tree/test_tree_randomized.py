"""Statistical tests of the randomized tree backend (Fu et al. 2022, Alg. 2), all with fixed seeds.

Independent estimates come cheaply from one TreeDistribution whose batch repeats the same sentence
under a shared grammar: every batch row draws its own kept labels. K1 = NT must reproduce the exact
inside; exp(log Z_hat) must be unbiased (checked exactly over every possible draw on a tiny case, and
statistically for every grammar kind and proposal); log Z_hat is below log Z on average (Jensen);
K2 = 0 (the top-K baseline) is biased low; the error falls as K grows.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import tree_bruteforce as tb
from tree_testlib import (
    DTYPE,
    build_dist,
    close,
    grammar_of,
    one_thread,
    random_tree_spec,
)

from zoo.inference.rdp import KeptStates, RDPOptions
from zoo.inference.tree import TreeDistribution
from zoo.inference.tree.randomized import KeptLabels, _feature_entries, gathered_inside, projected_kept_inside

KINDS = tb.KINDS


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


def repeated(kind, runs, T=5, NT=6, PT=4, rank=3, seed=0, scale=0.5) -> tb.TreeSpec:
    """One random sentence under one shared grammar, repeated ``runs`` times in the batch."""
    spec = random_tree_spec(
        kind, B=1, T=T, NT=NT, PT=PT, rank=rank, seed=seed, shared_grammar=True, scale=scale
    )
    spec.args["terms"] = spec.args["terms"].expand(runs, T, PT).contiguous()
    return spec


def randomized(spec, k1, k2, proposal="local", seed=0) -> TreeDistribution:
    options = RDPOptions(k1, k2, proposal, torch.Generator().manual_seed(seed))
    return TreeDistribution(grammar_of(spec), spec.args["terms"], spec.lengths, "randomized", options)


def span_proposal(B, T, NT, seed=0) -> torch.Tensor:
    """A user-supplied B x T x (T+1) x NT proposal with full support."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, T, T + 1, NT, generator=g, dtype=DTYPE) + 0.1


# --------------------------------------------------------------------------- K1 = NT is exact
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("proposal", ["uniform", "local", "tensor"])
def test_k1_equal_to_nt_is_exact(kind, proposal):
    """Beyond brute-force reach (T = 6, NT = 5, PT = 4 <= NT), ragged, batched grammar: every
    estimate and the gradients of log Z_hat equal the exact ones."""
    spec = random_tree_spec(kind, B=3, T=6, NT=5, PT=4, rank=3, lengths=[6, 3, 5], seed=21)
    if proposal == "tensor":
        proposal = span_proposal(3, 6, 5)
    exact = build_dist(spec, "exact")
    rdp = randomized(spec, spec.NT, 0, proposal)
    for op in ("log_partition", "span_marginals", "marginals", "preterminal_marginals", "entropy"):
        close(getattr(rdp, op), getattr(exact, op), op)

    names = [n for n in tb.GRAMMAR_ARGS[kind]] + ["terms"]
    grads = {}
    for which, backend in (("exact", "exact"), ("rdp", "randomized")):
        leaves = {n: spec.args[n].clone().requires_grad_(True) for n in names}
        leaf_spec = tb.TreeSpec(kind, leaves, spec.lengths)
        if backend == "randomized":
            dist = randomized(leaf_spec, spec.NT, 0, proposal)
        else:
            dist = build_dist(leaf_spec, "exact")
        grads[which] = torch.autograd.grad(dist.log_partition.sum(), [leaves[n] for n in names])
    for n, g_rdp, g_exact in zip(names, grads["rdp"], grads["exact"]):
        close(g_rdp, g_exact, f"d log Z / d {n}")


@pytest.mark.parametrize("kind", KINDS)
def test_k1_equal_to_nt_is_exact_with_more_preterminals_than_nonterminals(kind):
    spec = random_tree_spec(kind, B=2, T=4, NT=2, PT=3, rank=2, lengths=[4, 3], seed=22)
    close(randomized(spec, spec.NT, 0).log_partition, build_dist(spec, "exact").log_partition, "log Z")


@pytest.mark.parametrize("shared", [True, False])
def test_lpcfg_kept_entries_through_the_features_equal_the_grammars_own(shared):
    """The randomized inside forms an LPCFG's two-nonterminal entries from gathered feature rows in
    one batched product; on kept triples of any shape they equal ``LowRankGrammar.rule_entries``,
    for a shared grammar and one per sentence, in float32 as in float64."""
    B, n, s, K, KL, KR = 3, 4, 2, 3, 2, 5
    spec = random_tree_spec("lowrank", B=B, T=6, NT=6, PT=4, rank=3, seed=41, shared_grammar=shared)
    for dtype in (torch.float32, torch.float64):
        args = {name: x.to(dtype) for name, x in spec.args.items()}
        grammar = grammar_of(tb.TreeSpec("lowrank", args, spec.lengths))
        g = torch.zeros(B, dtype=torch.long) if shared else torch.arange(B)
        gen = torch.Generator().manual_seed(1)
        parent, left, right = (torch.randint(0, 6, shape, generator=gen) for shape in
                               ((B, n, K), (B, n, s, KL), (B, n, s, KR)))
        got = _feature_entries(grammar, g, parent, left, right)
        want = grammar.rule_entries(
            g.view(B, 1, 1, 1, 1, 1), parent[:, :, None, :, None, None], left[..., None, :, None],
            right[..., None, None, :],
        )
        assert got.shape == (B, n, s, K, KL, KR) and got.dtype == dtype
        torch.testing.assert_close(got, want)


# --------------------------------------------------------------------------- exact unbiasedness
def _tail(q: torch.Tensor):
    """(top index, tail distribution) of a proposal vector: the top-1 and the renormalized rest."""
    top = int(q.argmax())
    tail = q.clone()
    tail[top] = 0
    return top, tail / tail.sum()


@pytest.mark.parametrize("kind", KINDS)
def test_expectation_over_every_possible_draw_is_exactly_z(kind):
    """T = 3, NT = PT = 3, K1 = K2 = 1: every span of width >= 2 and every leaf keeps its top-1
    label plus one drawn from the tail. Enumerating the 2^6 draws, weighting each Z_hat by its
    probability, gives Z to rounding (Alg. 2's estimator with the 1 / (K2 q) weights)."""
    T, NT, PT = 3, 3, 3
    spec = random_tree_spec(kind, B=1, T=T, NT=NT, PT=PT, rank=2, seed=31, scale=1.0)
    grammar, terms = grammar_of(spec), spec.args["terms"]
    lengths = torch.tensor([T])
    q_span = span_proposal(1, T, NT, seed=32)[0]
    q_span = q_span / q_span.sum(-1, keepdim=True)
    q_leaf = torch.softmax(terms[0], -1)  # "local": leaves by their terms
    spans = [(i, i + w) for w in range(2, T + 1) for i in range(T - w + 1)]
    slots = [("span", s) for s in spans] + [("leaf", t) for t in range(T)]
    options = []
    for what, where in slots:
        top, tail = _tail(q_span[where] if what == "span" else q_leaf[where])
        options.append([(top, d, float(tail[d])) for d in range(len(tail)) if d != top])

    inside = projected_kept_inside if kind == "rankspace" else gathered_inside
    expectation = 0.0
    for draw in itertools.product(*options):
        span_index = torch.zeros(1, T, T + 1, 2, dtype=torch.long)
        span_index[..., 1] = 1  # unused entries (spans of width < 2): any labels
        span_w = torch.zeros(1, T, T + 1, 2, dtype=DTYPE)
        leaf_index = torch.zeros(1, T, 2, dtype=torch.long)
        leaf_w = torch.zeros(1, T, 2, dtype=DTYPE)
        p_draw = 1.0
        for (what, where), (top, drawn, q) in zip(slots, draw):
            p_draw *= q
            if what == "span":
                i, k = where
                span_index[0, i, k] = torch.tensor([top, drawn])
                span_w[0, i, k, 1] = -math.log(q)
            else:
                leaf_index[0, where] = torch.tensor([top, drawn])
                leaf_w[0, where, 1] = -math.log(q)
        kept = KeptLabels(KeptStates(span_index, span_w), KeptStates(leaf_index, leaf_w))
        expectation += p_draw * math.exp(float(inside(grammar, terms, lengths, kept)[0]))
    assert math.isclose(sum(math.prod(o[2] for o in d) for d in itertools.product(*options)), 1.0)
    close(torch.tensor([math.log(expectation)], dtype=DTYPE), build_dist(spec).log_partition, "log E[Z_hat]",
          rtol=1e-10)


# --------------------------------------------------------------------------- statistics
RUNS = 4000


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("proposal", ["uniform", "local", "tensor"])
def test_probability_space_estimate_is_unbiased(kind, proposal):
    """mean(Z_hat / Z) over RUNS independent draws is within 4 standard errors of 1 (K = 3 of
    NT = 6 labels per span, 3 of PT = 4 per leaf)."""
    spec = repeated(kind, RUNS, seed=1)
    if proposal == "tensor":
        proposal = span_proposal(RUNS, spec.T, spec.NT, seed=5)
    log_z_hat = randomized(spec, 1, 2, proposal, seed=2).log_partition
    log_z = build_dist(spec, "exact").log_partition[0]
    ratio = (log_z_hat - log_z).exp()
    se = ratio.std() / math.sqrt(RUNS)
    assert abs(ratio.mean() - 1) < 4 * se, (ratio.mean().item(), se.item())
    assert ratio.std() > 0, "the estimates should vary between runs"


@pytest.mark.parametrize("kind", KINDS)
def test_a_leaf_whose_other_labels_cannot_emit_its_word_is_estimated_unbiasedly(kind):
    """Every word emitted by 2 of PT = 4 preterminals (-inf terms, a sparse emission): K1 = 2 leaves the
    tail with no proposal mass. select_states raised "the proposal gives no mass to the states outside
    its top k1" (audit); its K2 draws are now placeholders of weight 0, and the estimate stays unbiased."""
    spec = repeated(kind, RUNS, seed=1)
    spec.args["terms"] = spec.args["terms"].clone()
    spec.args["terms"][..., 2:] = -math.inf
    log_z_hat = randomized(spec, 2, 1, seed=2).log_partition
    ratio = (log_z_hat - build_dist(spec, "exact").log_partition[0]).exp()
    se = ratio.std() / math.sqrt(RUNS)
    assert torch.isfinite(log_z_hat).all() and abs(ratio.mean() - 1) < 4 * se + 1e-12, (ratio.mean(), se)


@pytest.mark.parametrize("kind", KINDS)
def test_log_space_estimate_is_below_exact_on_average(kind):
    """E[log Z_hat] <= log E[Z_hat] = log Z (Jensen): the mean gap is negative beyond 4 SE."""
    runs = 2000
    spec = repeated(kind, runs, seed=3, scale=1.0)
    gap = randomized(spec, 1, 2, seed=4).log_partition - build_dist(spec, "exact").log_partition[0]
    assert gap.mean() + 4 * gap.std() / math.sqrt(runs) < 0, (gap.mean().item(), gap.std().item())


@pytest.mark.parametrize("kind", KINDS)
def test_top_k_baseline_is_biased_low(kind):
    """K2 = 0 sums a subset of the trees: every run is below log Z, and Z_topK / Z is far below the
    randomized estimator's mean ratio (which is 1 up to noise) at the same K. The named proposals are
    uniform over span labels (refused for K2 = 0): the top K1 come from a tensor of span weights."""
    runs = 500
    spec = repeated(kind, runs, seed=8, scale=1.0)
    log_z = build_dist(spec, "exact").log_partition[0]
    terms = spec.args["terms"]
    top_k = randomized(spec, 3, 0, span_proposal(runs, terms.shape[1], spec.NT)).log_partition
    assert (top_k < log_z - 1e-6).all(), (top_k - log_z).max()
    ratio = (randomized(spec, 2, 1, seed=9).log_partition - log_z).exp()
    lower = ratio.mean() - 4 * ratio.std() / math.sqrt(runs)
    assert (top_k - log_z).exp().mean() < lower, ((top_k - log_z).exp().mean().item(), lower.item())


@pytest.mark.parametrize("kind", KINDS)
def test_error_falls_as_k_grows(kind):
    runs = 200
    spec = repeated(kind, runs, NT=6, seed=6, scale=1.0)
    log_z = build_dist(spec, "exact").log_partition[0]
    mse = []
    for k in (2, 4, 5, 6):
        k1, k2 = (k - 1, 1) if k < spec.NT else (k, 0)
        mse.append(((randomized(spec, k1, k2, seed=k).log_partition - log_z) ** 2).mean().item())
    assert mse == sorted(mse, reverse=True), mse
    assert mse[-1] < 1e-20, mse  # K = NT >= PT: exact


# --------------------------------------------------------------------------- estimates
@pytest.mark.parametrize("kind", KINDS)
def test_estimated_marginals_live_on_kept_labels_and_gradients_flow(kind):
    """K = 2 of NT = 4: the estimated marginals are distributions over the estimator's trees (each
    leaf one preterminal, the root span one label), non-zero on at most K labels per span, and the
    gradient of log Z_hat reaches every grammar tensor and the terms."""
    K = 2
    spec = random_tree_spec(kind, B=3, T=5, NT=4, PT=3, rank=3, lengths=[5, 2, 4], seed=41)
    names = list(tb.GRAMMAR_ARGS[kind]) + ["terms"]
    leaves = {n: spec.args[n].clone().requires_grad_(True) for n in names}
    dist = randomized(tb.TreeSpec(kind, leaves, spec.lengths), 1, 1, seed=42)
    marginals = dist.marginals.detach()
    assert ((marginals > 0).sum(-1) <= K).all()
    assert (marginals >= 0).all() and (marginals <= 1 + 1e-9).all()
    lengths = spec.lengths
    B = len(lengths)
    root = marginals[torch.arange(B), 0, lengths]
    close(root.sum(-1), torch.ones(B, dtype=DTYPE), "root label marginals sum to 1")
    pre = dist.preterminal_marginals.detach()
    inside = torch.arange(spec.T) < lengths.unsqueeze(-1)
    close(pre.sum(-1), inside.to(DTYPE), "each leaf has one preterminal (0 past the length)")
    span = dist.span_marginals.detach()
    close(span[torch.arange(B), 0, lengths], torch.ones(B, dtype=DTYPE), "the root span is in every tree")
    close(span.sum((1, 2)), (2 * lengths - 1).to(DTYPE), "a tree has 2n - 1 spans")
    mbr = tb.from_tensor_trees(dist.mbr())
    for b in range(B):
        assert mbr[b] in set(tb.enumerate_trees(int(lengths[b]))), mbr[b]

    grads = torch.autograd.grad(dist.log_partition.sum(), [leaves[n] for n in names])
    for n, g in zip(names, grads):
        assert torch.isfinite(g).all(), n
        assert g.abs().sum() > 0, f"no gradient reaches {n}"


def test_marginals_of_an_estimate_of_zero_are_refused():
    """Where Z_hat = 0 (the kept nonterminal derives nothing, or a word no preterminal emits), the
    marginals and the MBR tree are undefined: a ValueError names the sentences (the root span's marginal
    came out 0 and the MBR tree right-branching); log Z_hat stays -inf, as documented."""
    from zoo.inference import DenseGrammar

    g = torch.Generator().manual_seed(0)
    NT, PT, B, T = 3, 2, 2, 4
    root = torch.randn(NT, dtype=torch.float64, generator=g)
    rules = torch.randn(NT, NT + PT, NT + PT, dtype=torch.float64, generator=g)
    rules[0] = float("-inf")  # nonterminal 0 derives nothing
    terms = torch.randn(B, T, PT, dtype=torch.float64, generator=g)
    lengths = torch.tensor([4, 3])
    proposal = torch.ones(B, T, T + 1, NT, dtype=torch.float64)
    proposal[..., 0] = 100.0  # k1 = 1, k2 = 0 keeps the dead nonterminal 0 on every span
    grammar = DenseGrammar(root, rules)
    dead = TreeDistribution(grammar, terms, lengths, "randomized", RDPOptions(1, 0, proposal))
    assert torch.isneginf(dead.log_partition).all()
    assert torch.isfinite(TreeDistribution(grammar, terms, lengths).log_partition).all()
    for operation in ("span_marginals", "marginals", "preterminal_marginals", "mbr"):
        with pytest.raises(ValueError, match=r"randomized estimate Z_hat is 0 for batch elements \[0, 1\]"):
            value = getattr(dead, operation)
            value() if callable(value) else value
    no_tree = terms.clone()
    no_tree[1, 1] = float("-inf")  # no preterminal emits word 1 of sentence 1
    options = RDPOptions(1, 1, generator=torch.Generator().manual_seed(0))
    one_dead = TreeDistribution(DenseGrammar(root, torch.randn(NT, NT + PT, NT + PT, dtype=torch.float64)),
                                no_tree, lengths, "randomized", options)  # fmt: skip
    with pytest.raises(ValueError, match=r"Z_hat is 0 for batch elements \[1\]"):
        one_dead.span_marginals  # noqa: B018
