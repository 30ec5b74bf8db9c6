"""Bad input raises ValueError / TypeError whose message names the problem (docs/tree-api.md).

The error may come from a container, from TreeDistribution(...) or from the first operation, so
each check builds the whole thing and asks for the operation inside pytest.raises.
"""

from __future__ import annotations

import re

import pytest
import torch
import tree_bruteforce as tb
from mixed_inputs import assert_bfloat16_mixes, assert_other_device_refused, assert_other_dtype_refused
from tree_testlib import DTYPE, close

import zoo.inference.tree.factors as factors
from zoo.inference.rdp import RDPOptions
from zoo.inference.tree import (
    DenseGrammar,
    LowRankGrammar,
    RankSpaceGrammar,
    TreeDistribution,
    sample_sentences,
    terminal_scores,
)

B, T, NT, PT, R = 2, 3, 2, 3, 2
S = NT + PT
ERR = (ValueError, TypeError)
INF, NAN = float("inf"), float("nan")


def _g(seed):
    return torch.Generator().manual_seed(seed)


def lp(*shape, seed=0):
    return torch.randn(*shape, generator=_g(seed), dtype=DTYPE)


def feat(*shape, seed=0):
    return torch.rand(*shape, generator=_g(seed), dtype=DTYPE) + 0.1


def with_entry(x, value, index=0):
    """x with its flat entry ``index`` set to ``value``."""
    x = x.clone()
    x.view(-1)[index] = value
    return x


def dense(root=None, rules=None):
    return DenseGrammar(
        lp(NT, seed=1) if root is None else root, lp(NT, S, S, seed=2) if rules is None else rules
    )


def low_rank(root=None, rules=None, head=None, children=None):
    return LowRankGrammar(
        lp(NT, seed=1) if root is None else root,
        lp(NT, S, S, seed=2) if rules is None else rules,
        feat(NT, R, seed=3) if head is None else head,
        feat(NT, NT, R, seed=4) if children is None else children,
    )


def rank_space(root=None, U=None, V=None, W=None):
    return RankSpaceGrammar(
        lp(NT, seed=1) if root is None else root,
        feat(NT, R, seed=5) if U is None else U,
        feat(S, R, seed=6) if V is None else V,
        feat(S, R, seed=7) if W is None else W,
    )


def terms_(*shape):
    return lp(*(shape or (B, T, PT)), seed=8)


def log_z(grammar=None, terms=None, lengths=None, backend=None, options=None):
    grammar = dense() if grammar is None else grammar
    terms = terms_() if terms is None else terms
    return TreeDistribution(grammar, terms, lengths, backend, options).log_partition


def test_sanity_valid_inputs_do_not_raise():
    """The builders above are valid as given (so each error below is due to the one bad argument)."""
    for grammar in (dense(), low_rank(), rank_space()):
        assert torch.isfinite(log_z(grammar, lengths=torch.tensor([3, 2]))).all()
    assert torch.isfinite(log_z(backend="randomized", options=RDPOptions(1, 1))).all()


def test_unnormalized_and_forbidden_potentials_are_accepted():
    """Log-potentials need not be normalized, and -inf (forbidden) is a valid entry anywhere; a
    preterminal forbidden at a position gets marginal 0 there."""
    big = dense(lp(NT, seed=1) + 50.0, lp(NT, S, S, seed=2) * 10.0)
    assert torch.isfinite(log_z(big, terms_() + 30.0)).all()
    terms = with_entry(terms_(), -INF)  # preterminal 0 impossible at position 0 of sentence 0
    rules = with_entry(lp(NT, S, S, seed=2), -INF, 5)
    dist = TreeDistribution(dense(with_entry(lp(NT, seed=1), -INF), rules), terms)
    assert torch.isfinite(dist.log_partition).all()
    assert dist.preterminal_marginals[0, 0, 0] == 0
    assert (dist.marginals[:, 0, T, 0] == 0).all()  # root label 0 forbidden


# --------------------------------------------------------------------------- sentence lengths
def test_terms_of_one_word():
    with pytest.raises(ValueError, match="at least 2 words"):
        log_z(terms=terms_(B, 1, PT))


@pytest.mark.parametrize("lengths", [[3, 1], [1, 1], [2, 0], [0, 3]], ids=str)
def test_lengths_below_two(lengths):
    """Length 0 said "lengths must lie in 1..T" (a tree needs 2): one message for every length below 2."""
    expected = r"lengths must lie in 2\.\.T = 2\.\.\d+ \(sentences need at least 2 words"
    with pytest.raises(ValueError, match=expected):
        log_z(lengths=torch.tensor(lengths))


@pytest.mark.parametrize(
    "lengths, match",
    [([4, 2], "lengths must lie in"), ([2.5, 3.0], "integers"), ([3, 3, 3], r"shape \(B,\)")],
    ids=["past-T", "fractional", "wrong-shape"],
)
def test_bad_lengths(lengths, match):
    with pytest.raises(ValueError, match=match):
        log_z(lengths=torch.tensor(lengths))


# --------------------------------------------------------------------------- NaN and +inf
@pytest.mark.parametrize("value, word", [(NAN, "NaN"), (INF, r"\+inf")], ids=["nan", "+inf"])
@pytest.mark.parametrize("where", ["root", "rules", "terms", "lowrank rules", "rank-space root"])
def test_nan_and_plus_inf_log_potentials(where, value, word):
    with pytest.raises(ValueError, match=f"{where.split()[-1]} contains {word}"):
        if where == "root":
            log_z(dense(root=with_entry(lp(NT, seed=1), value)))
        elif where == "rules":
            log_z(dense(rules=with_entry(lp(NT, S, S, seed=2), value, 7)))
        elif where == "terms":
            log_z(terms=with_entry(terms_(), value, 4))
        elif where == "lowrank rules":
            log_z(low_rank(rules=with_entry(lp(NT, S, S, seed=2), value, 7)))
        else:
            log_z(rank_space(root=with_entry(lp(NT, seed=1), value)))


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "+inf", "-inf"])
@pytest.mark.parametrize("name", ["head", "children", "U", "V", "W"])
def test_non_finite_features(name, value):
    with pytest.raises(ValueError, match=f"{name} must be (finite|non-negative)"):
        if name in ("head", "children"):
            base = feat(NT, R, seed=3) if name == "head" else feat(NT, NT, R, seed=4)
            log_z(low_rank(**{name: with_entry(base, value)}))
        else:
            base = feat(NT if name == "U" else S, R, seed=5)
            log_z(rank_space(**{name: with_entry(base, value)}))


@pytest.mark.parametrize("name", ["head", "children", "U", "V", "W"])
def test_negative_features(name):
    with pytest.raises(ValueError, match=f"{name} must be non-negative"):
        if name in ("head", "children"):
            base = feat(NT, R, seed=3) if name == "head" else feat(NT, NT, R, seed=4)
            log_z(low_rank(**{name: with_entry(base, -0.5)}))
        else:
            base = feat(NT if name == "U" else S, R, seed=5)
            log_z(rank_space(**{name: with_entry(base, -0.5)}))


# --------------------------------------------------------------------------- shapes
@pytest.mark.parametrize(
    "rules",
    [lp(NT + 1, S, S), lp(NT, S, S + 1), lp(NT, S + 1, S), lp(NT, NT, NT), lp(NT, S), lp(B, NT, S, S, 1)],
    ids=["NT+1", "S x S+1", "S+1 x S", "no-preterminals", "2d", "5d"],
)
def test_rules_not_nt_by_s_by_s(rules):
    with pytest.raises(ValueError, match=r"rules must have shape .*NT x S x S"):
        log_z(dense(rules=rules))


def test_terms_with_the_wrong_number_of_preterminals():
    with pytest.raises(ValueError, match=f"terms must have shape B x T x PT with PT = {PT}"):
        log_z(terms=terms_(B, T, PT + 1))
    with pytest.raises(ValueError, match=f"PT = {PT}"):  # and in a rank-space grammar (from V)
        log_z(rank_space(), terms=terms_(B, T, PT - 1))


@pytest.mark.parametrize("shape", [(T, PT), (1, B, T, PT), (B, 0, PT)], ids=["2d", "4d", "empty"])
def test_terms_not_b_by_t_by_pt(shape):
    with pytest.raises(ValueError, match="terms must have shape B x T x PT"):
        log_z(terms=terms_(*shape))


def test_non_tensor_and_integer_inputs():
    with pytest.raises(TypeError, match="terms must be a floating-point tensor"):
        log_z(terms=torch.zeros(B, T, PT, dtype=torch.long))
    with pytest.raises(TypeError, match="terms must be a torch.Tensor"):
        log_z(terms=terms_().tolist())
    with pytest.raises(TypeError, match="rules must be a torch.Tensor"):
        dense(rules=lp(NT, S, S, seed=2).cpu().numpy())
    with pytest.raises(TypeError, match="grammar must be a DenseGrammar, LowRankGrammar or RankSpaceGrammar"):
        TreeDistribution(lp(NT, S, S), terms_())


@pytest.mark.parametrize("kind", ["dense", "lowrank", "rankspace"])
def test_grammar_batch_does_not_match_terms(kind):
    root = lp(B + 1, NT, seed=1)
    grammar = {"dense": dense, "lowrank": low_rank, "rankspace": rank_space}[kind](root=root)
    with pytest.raises(ValueError, match=rf"grammar has batch size {B + 1} but terms has B = {B}"):
        log_z(grammar)


def test_grammar_tensors_disagree_on_the_batch():
    with pytest.raises(ValueError, match="disagree on the batch size"):
        dense(lp(3, NT), lp(2, NT, S, S))
    with pytest.raises(ValueError, match="disagree on the batch size"):
        rank_space(U=feat(3, NT, R), V=feat(2, S, R))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(head=feat(NT + 1, R)), r"head must have shape NT x R"),
        (dict(children=feat(NT, NT, R + 1)), r"children must have shape NT x NT x R"),
        (dict(children=feat(NT, NT + 1, R)), r"children must have shape NT x NT x R"),
        (dict(rules=lp(NT + 1, S + 1, S + 1)), r"rules must have shape NT x S x S"),
        (dict(head=feat(NT, 0), children=feat(NT, NT, 0)), "feature dimension R >= 1"),
    ],
    ids=["head-NT", "children-R", "children-NT", "rules-NT", "R=0"],
)
def test_low_rank_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        log_z(low_rank(**kwargs))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(U=feat(NT + 1, R)), r"U must have shape NT x r"),
        (dict(V=feat(S, R + 1)), r"V must have shape S x r"),
        (dict(W=feat(S + 1, R)), rf"V and W must have the same number of rows.* {S} rows in V and {S + 1}"),
        (dict(V=feat(S + 1, R)), rf"got {S + 1} rows in V and {S} in W"),  # it blamed W
        (dict(W=feat(S, R + 1)), r"W must have shape S x r"),
        (dict(V=feat(NT, R), W=feat(NT, R)), r"S = NT \+ PT > NT"),
        (dict(U=feat(NT, 0), V=feat(S, 0), W=feat(S, 0)), "rank r >= 1"),
    ],
    ids=["U-NT", "V-r", "W-S", "V-S", "W-r", "no-preterminals", "r=0"],
)
def test_rank_space_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        log_z(rank_space(**kwargs))


def test_root_without_nonterminals():
    with pytest.raises(ValueError, match="at least one nonterminal"):
        DenseGrammar(lp(0), lp(0, PT, PT))


# --------------------------------------------------------------------------- terminal_scores
V_SIZE = 5


@pytest.mark.parametrize("bad", [V_SIZE, V_SIZE + 3, -2], ids=["V", "V+3", "-2"])
def test_word_ids_outside_the_vocabulary(bad):
    words = torch.tensor([[0, bad, 1], [2, 3, -1]])
    with pytest.raises(ValueError, match=rf"word ids must lie in 0..V-1 = 0..{V_SIZE - 1}.*\[{bad}\]"):
        terminal_scores(lp(PT, V_SIZE), words)


@pytest.mark.parametrize("lengths, match", [([4, 2], r"lengths must lie in 1\.\.T = 1\.\.3, got \[4, 2\]"),
                                            ([3, 2, 1], r"lengths must have shape \(B,\) = \(2,\)")])
def test_terminal_scores_lengths_past_the_words(lengths, match):
    """Lengths longer than the words were accepted (the terms then ended before the sentence did)."""
    with pytest.raises(ValueError, match=match):
        terminal_scores(lp(PT, V_SIZE), torch.tensor([[0, 1, 2], [2, 3, -1]]), torch.tensor(lengths))


def test_terminal_scores_shapes():
    emission = lp(PT, V_SIZE)
    with pytest.raises(TypeError, match="words must be a B x T integer tensor"):
        terminal_scores(emission, torch.tensor([[0.0, 1.0]]))
    with pytest.raises(TypeError, match="words must be a B x T integer tensor"):
        terminal_scores(emission, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"emission must have shape \(B x\) PT x V"):
        terminal_scores(lp(V_SIZE), torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match=f"emission has batch size 3 but words has B = {B}"):
        terminal_scores(lp(3, PT, V_SIZE), torch.zeros(B, T, dtype=torch.long))


def test_terminal_scores_values():
    """terms[b, t, P] = emission[(b,) P, words[b, t]], padding (-1) allowed; one table, a table a
    sentence, or one table with a batch axis of 1. The gradient reaches each table entry once per
    time its word is read (padding reads nothing)."""
    words = torch.tensor([[0, 4, -1], [2, 3, 1]])
    for emission in (lp(PT, V_SIZE), lp(B, PT, V_SIZE), lp(1, PT, V_SIZE)):
        emission.requires_grad_(True)
        terms = terminal_scores(emission, words)
        assert terms.shape == (B, T, PT)
        table = emission.expand(B, PT, V_SIZE)
        for b in range(B):
            for t in range(T):
                if words[b, t] >= 0:
                    close(terms[b, t], table[b, :, words[b, t]], f"terms[{b}, {t}]")
        (grad,) = torch.autograd.grad(terms.sum(), emission)
        reads = torch.zeros(B, PT, V_SIZE, dtype=grad.dtype)
        for b, t in (words >= 0).nonzero().tolist():
            reads[b, :, words[b, t]] += 1
        per_sentence = emission.dim() == 3 and emission.shape[0] == B
        close(grad, reads if per_sentence else reads.sum(0).view_as(grad), "d terms / d emission")


# --------------------------------------------------------------------------- trees given to log_prob
GOOD = [((0, 3, 0), (0, 1, 0), (1, 3, 1), (1, 2, 2), (2, 3, 0)), ((0, 2, 1), (0, 1, 2), (1, 2, 0))]
LENGTHS = torch.tensor([3, 2])
NONNEG = "2n-1 rows of non-negative"
FIRST = r"whole sentence \[0, n\) first"
LEAVES = ((0, 1, 0), (1, 3, 1), (1, 2, 2), (2, 3, 0))  # the rows of GOOD[0] after its root
BAD_TREES = {
    "crossing spans": (((0, 3, 0), (0, 2, 0), (1, 3, 1), (1, 2, 2), (2, 3, 0)), "do not form a binary tree"),
    "too few rows": (((0, 3, 0), (0, 1, 0), (1, 3, 1), (1, 2, 2)), NONNEG),
    "nonterminal label out of range": (((0, 3, NT),) + LEAVES, "labels must be"),
    "preterminal label out of range": (((0, 3, 0), (0, 1, PT)) + LEAVES[1:], "labels must be"),
    "negative label": (((0, 3, -1),) + LEAVES, NONNEG),
    "missing root": (((0, 2, 0),) + LEAVES, FIRST),
    "root not first": (((0, 1, 0), (0, 3, 0)) + LEAVES[1:], FIRST),
    "duplicate span": (((0, 3, 0), (0, 1, 0), (1, 3, 1), (1, 2, 2), (1, 2, 0)), "each span once"),
    "span past the length": (((0, 3, 0), (0, 1, 0), (1, 3, 1), (1, 2, 2), (2, 4, 0)), "end <= length"),
    "empty span": (((0, 3, 0), (0, 1, 0), (1, 3, 1), (1, 1, 2), (2, 3, 0)), "start < end"),
}


def _dist(kind="dense"):
    grammar = {"dense": dense, "lowrank": low_rank, "rankspace": rank_space}[kind]()
    return TreeDistribution(grammar, terms_(), LENGTHS)


@pytest.mark.parametrize("kind", ["dense", "lowrank", "rankspace"])
def test_valid_trees_are_accepted(kind):
    trees = tb.to_tensor_trees(GOOD, T)
    assert torch.isfinite(_dist(kind).log_prob(trees)).all()
    assert _dist(kind).log_prob(torch.stack([trees, trees])).shape == (2, B)


@pytest.mark.parametrize("case", list(BAD_TREES))
@pytest.mark.parametrize("kind", ["dense", "rankspace"])
def test_invalid_trees(case, kind):
    tree, match = BAD_TREES[case]
    trees = tb.to_tensor_trees(GOOD, T)
    trees[0] = -1
    trees[0, : len(tree)] = torch.tensor(tree)
    with pytest.raises(ValueError, match=match):
        _dist(kind).log_prob(trees)


def test_invalid_tree_rows_and_padding():
    trees = tb.to_tensor_trees(GOOD, T)
    extra = trees.clone()
    extra[1, 3] = torch.tensor([0, 1, 0])  # a 4th row for the length-2 sentence
    with pytest.raises(ValueError, match=NONNEG):
        _dist().log_prob(extra)
    with pytest.raises(ValueError, match=r"shape \(S x\) B x \(2T-1\) x 3"):
        _dist().log_prob(trees[:, :3])
    with pytest.raises(ValueError, match=r"shape \(S x\) B x \(2T-1\) x 3"):
        _dist().log_prob(trees[:1])
    with pytest.raises(TypeError, match="integer tensor"):
        _dist().log_prob(trees.double())


# --------------------------------------------------------------------------- materializing
@pytest.fixture
def tiny_dense_limit(monkeypatch):
    """MAX_DENSE_RULES below NT x S x S = 50 of the grammars here."""
    monkeypatch.setattr(factors, "MAX_DENSE_RULES", 10)


@pytest.mark.parametrize("kind", ["lowrank", "rankspace"])
def test_dense_too_large(kind, tiny_dense_limit):
    grammar = low_rank() if kind == "lowrank" else rank_space()
    with pytest.raises(ValueError, match=r"NT x S x S = 2 x 5 x 5 .*50 entries.* exceeds the limit of 10"):
        grammar.dense()
    with pytest.raises(ValueError, match="exceeds the limit"):
        log_z(grammar, backend="exact")
    dist = TreeDistribution(grammar, terms_())
    with pytest.raises(ValueError, match="exceeds the limit"):
        _ = dist.entropy
    # what the native backend computes without NT x S x S still works
    assert torch.isfinite(dist.log_partition).all() and torch.isfinite(dist.marginals).all()
    assert dist.mbr().shape == (B, 2 * T - 1, 2)


def test_low_rank_fallbacks_need_the_dense_rules(tiny_dense_limit):
    dist = TreeDistribution(low_rank(), terms_())
    with pytest.raises(ValueError, match="exceeds the limit"):
        _ = dist.argmax
    with pytest.raises(ValueError, match="exceeds the limit"):
        dist.sample(2)


def test_rank_space_sampling_does_not_materialize(tiny_dense_limit):
    samples = TreeDistribution(rank_space(), terms_()).sample(3, _g(0))
    assert samples.shape == (3, B, 2 * T - 1, 3)


def test_dense_grammar_is_its_own_dense_form():
    grammar = dense()
    assert grammar.dense() is grammar


# --------------------------------------------------------------------------- backends and options
def test_rank_space_argmax_points_to_mbr():
    for options in (None, "state-space"):
        dist = TreeDistribution(rank_space(), terms_(), backend="rank-space", options=options)
        with pytest.raises(ValueError, match=r"no Viterbi.*mbr\(\)"):
            _ = dist.argmax
        with pytest.raises(ValueError, match=r"mbr\(\)"):
            _ = dist.max_score


@pytest.mark.parametrize(
    "backend, grammar, match",
    [
        ("low-rank", dense, "the 'low-rank' backend needs LowRankGrammar, got DenseGrammar"),
        ("rank-space", dense, "the 'rank-space' backend needs RankSpaceGrammar, got DenseGrammar"),
        ("rank-space", low_rank, "needs RankSpaceGrammar, got LowRankGrammar"),
        ("low-rank", rank_space, "needs LowRankGrammar, got RankSpaceGrammar"),
    ],
    ids=["low-rank/dense", "rank-space/dense", "rank-space/low-rank", "low-rank/rank-space"],
)
def test_backend_does_not_take_the_grammar(backend, grammar, match):
    with pytest.raises(TypeError, match=match):
        log_z(grammar(), backend=backend)


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'quantum'"):
        log_z(backend="quantum")


def test_randomized_backend_without_options():
    for options in (None, "state-space", (1, 1)):
        with pytest.raises(ValueError, match=r"'randomized' backend needs options=RDPOptions"):
            log_z(backend="randomized", options=options)


def test_options_for_backends_without_any():
    with pytest.raises(ValueError, match="options are only used by"):
        log_z(backend="exact", options=RDPOptions(1, 1))
    with pytest.raises(ValueError, match=r"options are only used by .* the tree's 'rank-space' one"):
        log_z(low_rank(), options="state-space")
    with pytest.raises(ValueError, match="algorithm must be 'rank-space' or 'state-space'"):
        log_z(rank_space(), backend="rank-space", options="bogus")


@pytest.mark.parametrize("k1, k2", [(NT + 1, 0), (NT, 1), (1, NT)])
def test_k1_plus_k2_above_nt(k1, k2):
    with pytest.raises(ValueError, match=rf"k1 \+ k2 must be at most NT = {NT}.*k1={k1}, k2={k2}"):
        log_z(backend="randomized", options=RDPOptions(k1, k2))


@pytest.mark.parametrize("proposal", ["global", "local+global"])
def test_chain_only_proposals(proposal):
    match = rf"tree proposals are \('uniform', 'local'\).*got {re.escape(repr(proposal))}"
    with pytest.raises(ValueError, match=match):
        log_z(backend="randomized", options=RDPOptions(1, 1, proposal))


def test_unknown_proposal():
    with pytest.raises(ValueError, match="unknown proposal 'bogus'"):
        RDPOptions(1, 1, "bogus")


@pytest.mark.parametrize("proposal", ["uniform", "local", None])
def test_a_top_k_baseline_needs_an_informative_proposal(proposal):
    """k2 = 0 with the uniform proposal kept an arbitrary fixed set of K1 states, silently (audit: Z_hat
    / Z = 0.03 for a VAE's q). A tree's "local" proposal (the default) is uniform over span labels too
    (only the leaves read their terms): Z_hat / Z = 7.5e-3 in a second audit, with no error."""
    name = "local" if proposal is None else proposal
    with pytest.raises(ValueError, match=f"the '{name}' proposal ranks none above another"):
        log_z(backend="randomized", options=RDPOptions(1, 0, proposal))
    ranked = feat(B, T, T + 1, NT).abs() + 0.1
    for k1, k2, p in ((0, 1, proposal), (1, 0, ranked), (NT, 0, proposal)):  # draws, a ranking, all
        log_z(backend="randomized", options=RDPOptions(k1, k2, p))


def test_bad_proposal_tensors():
    def run(p):
        return log_z(backend="randomized", options=RDPOptions(1, 1, p))

    with pytest.raises(ValueError, match=r"proposal must have shape B x T x \(T\+1\) x NT"):
        run(feat(B, T, NT))
    with pytest.raises(ValueError, match="proposal weights must be positive"):
        run(-feat(B, T, T + 1, NT))
    with pytest.raises(ValueError, match=r"proposal weights must be finite, got NaN or inf \(first at index"):
        run(with_entry(feat(B, T, T + 1, NT), NAN))
    zero = feat(B, T, T + 1, NT)
    zero[0, 0, 2, 1] = 0  # one label of one span: never drawn, so its mass would be missing
    with pytest.raises(ValueError, match=r"must be positive, got 0 \(first at index \(0, 0, 2, 1\).*missing"):
        run(zero)


@pytest.mark.parametrize("k1, k2", [(-1, 1), (0, 0), (1.0, 1)], ids=["negative", "zero", "float"])
def test_bad_k(k1, k2):
    with pytest.raises(ValueError, match="k1"):
        RDPOptions(k1, k2)


@pytest.mark.parametrize("n", [0, -1, 1.5, True], ids=str)
def test_bad_number_of_samples(n):
    with pytest.raises(ValueError, match="n must be a positive int"):
        TreeDistribution(dense(), terms_()).sample(n)


# --------------------------------------------------------------------------- sample_sentences
@pytest.mark.parametrize(
    "case, match",
    [("length 1", r"lengths must be at least 2 \(sentences need at least 2 words.*got \[3, 1\]"),
     ("length 0", r"lengths must be at least 2 \(sentences need.*got \[3, 0\]"),
     ("only length 1", r"lengths must be at least 2 \(sentences need.*got \[1\]$"),
     ("NaN emission", "NaN"), ("emission PT", "PT")],
    ids=["length-1", "length-0", "only-length-1", "nan-emission", "emission-PT"],
)
def test_sample_sentences_bad_input(case, match):
    """Length 0 said "lengths must lie in 1..T" (1 is refused too); lengths [1] said "2..T = 2..1", an
    empty range, T being only the longest length asked for (audit)."""
    emission = lp(PT, 4).log_softmax(-1)
    lengths = torch.tensor([3, 2])
    if case in ("length 1", "length 0"):
        lengths = torch.tensor([3, int(case[-1])])
    if case == "only length 1":
        lengths = torch.tensor([1])
    if case == "NaN emission":
        emission = with_entry(emission, NAN)
    if case == "emission PT":
        emission = lp(PT + 1, 4).log_softmax(-1)
    with pytest.raises(ValueError, match=match):
        sample_sentences(dense(), emission, lengths, 2, _g(0))


# --------------------------------------------------------------------------- one dtype, one device
def _tree_builders():
    """name -> (build(**tensors), float32 tensors): each grammar, and the sentence-side tensors
    (terms, node_scores; the emission of sample_sentences) checked against a float32 grammar."""
    g = _g(9)

    def f32(*s, positive=False):
        return torch.rand(*s, generator=g) + 0.1 if positive else torch.randn(*s, generator=g)

    grammar = DenseGrammar(f32(NT), f32(NT, S, S))
    return {
        "DenseGrammar": (DenseGrammar, dict(root=f32(NT), rules=f32(NT, S, S))),
        "LowRankGrammar": (
            LowRankGrammar,
            dict(root=f32(NT), rules=f32(NT, S, S), head=f32(NT, R, positive=True),
                 children=f32(NT, NT, R, positive=True)),
        ),
        "RankSpaceGrammar": (
            RankSpaceGrammar,
            dict(root=f32(NT), U=f32(NT, R, positive=True), V=f32(S, R, positive=True),
                 W=f32(S, R, positive=True)),
        ),
        "RankSpaceGrammar.from_logs": (
            RankSpaceGrammar.from_logs,
            dict(root=f32(NT), log_U=f32(NT, R), log_V=f32(S, R), log_W=f32(S, R)),
        ),
        "TreeDistribution": (
            lambda **a: TreeDistribution(grammar, **a),
            dict(terms=f32(B, T, PT), node_scores=f32(B, T, T + 1, NT)),
        ),
        "sample_sentences": (
            lambda **a: sample_sentences(grammar, **a, lengths=torch.tensor([2, 3])),
            dict(emission=f32(PT, 4).log_softmax(-1)),
        ),
    }


TREE_ARGS = [(name, arg) for name, (_, args) in _tree_builders().items() for arg in args]
_ARG_IDS = [f"{name}-{arg}" for name, arg in TREE_ARGS]


@pytest.mark.parametrize("name, arg", TREE_ARGS, ids=_ARG_IDS)
def test_one_potential_of_another_dtype_is_refused(name, arg):
    """One float64 tensor among float32 ones: a TypeError naming both dtypes where it is given (it once
    failed inside a product, or ran in a mixed dtype)."""
    assert_other_dtype_refused(*_tree_builders()[name], name.split(".")[0], arg)


LOG_Z_ARGS = [(name, arg) for name, arg in TREE_ARGS if name != "sample_sentences"]


@pytest.mark.parametrize("name, arg", LOG_Z_ARGS, ids=[f"{name}-{arg}" for name, arg in LOG_Z_ARGS])
def test_one_bfloat16_potential_among_float32_is_accepted(name, arg):
    """bfloat16 is computed in float32, as in chains (it once ran as given, 8 mantissa bits for a log Z)."""
    terms = torch.randn(B, T, PT, generator=_g(3))

    def log_partition(built):
        return (built if name == "TreeDistribution" else TreeDistribution(built, terms)).log_partition

    assert_bfloat16_mixes(*_tree_builders()[name], arg, log_partition)


@pytest.mark.parametrize("name, arg", TREE_ARGS, ids=_ARG_IDS)
def test_a_float16_potential_is_refused_by_name(name, arg):
    """float16 is refused as in chains, with a TypeError naming the tensor and its dtype: the bundled
    rank-space PCFGs once ran their inside in float16 (0.2 nats off a PTB sentence, -inf for a batch)."""
    build, args = _tree_builders()[name]
    with pytest.raises(TypeError, match=rf"{arg} has dtype float16.*pass float32"):
        build(**dict(args, **{arg: args[arg].half()}))


@pytest.mark.parametrize("name, arg", TREE_ARGS, ids=_ARG_IDS)
def test_one_potential_on_another_device_is_refused(name, arg):
    assert_other_device_refused(*_tree_builders()[name], name.split(".")[0], arg)


# --------------------------------------------------------------------------- a sentence with no tree
NO_TREE_OPS = {
    "log_partition": lambda d: d.log_partition,
    "span_marginals": lambda d: d.span_marginals,
    "marginals": lambda d: d.marginals,
    "preterminal_marginals": lambda d: d.preterminal_marginals,
    "entropy": lambda d: d.entropy,
    "argmax": lambda d: d.argmax,
    "max_score": lambda d: d.max_score,
    "mbr": lambda d: d.mbr(),
    "sample": lambda d: d.sample(2, generator=_g(0)),
    "log_prob": lambda d: d.log_prob(torch.tensor(GOOD[0]).expand(B, -1, -1)),
}


@pytest.mark.parametrize("grammar", [dense, low_rank, rank_space])
@pytest.mark.parametrize("op", NO_TREE_OPS)
def test_every_operation_on_a_sentence_without_a_tree_raises(grammar, op):
    """Word 1 of sentence 1 can be emitted by no preterminal: every exact operation raises
    log_partition's error (entropy was 0, samples and MBR trees of probability 0, marginals 0, argmax a
    TypeError from its backtrack). Rank-space has no Viterbi (its own error)."""
    if grammar is rank_space and op in ("argmax", "max_score"):
        pytest.skip("the rank-space backend has no Viterbi")
    terms = terms_().clone()
    terms[1, 1] = -INF
    dist = TreeDistribution(grammar(), terms)
    with pytest.raises(ValueError, match=r"no tree of batch elements \[1\] \(lengths \[3\]\)"):
        NO_TREE_OPS[op](dist)


def test_the_randomized_estimate_of_a_sentence_without_a_tree_is_minus_infinity():
    terms = terms_().clone()
    terms[1, 1] = -INF
    log_z = TreeDistribution(dense(), terms, backend="randomized", options=RDPOptions(1, 1)).log_partition
    assert torch.isfinite(log_z[0]) and torch.isneginf(log_z[1])


def test_a_rules_shape_error_names_where_its_nonterminal_count_comes_from():
    """A root of 3 nonterminals with rules of 2 blamed rules alone (audit)."""
    with pytest.raises(ValueError, match=r"rules must have shape NT x S x S \(NT from root\)"):
        DenseGrammar(torch.randn(3), torch.randn(2, 5, 5))
