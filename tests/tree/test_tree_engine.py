"""Every tree operation of docs/tree-api.md against brute-force enumeration (tests/tree_bruteforce.py).

Grammar kinds x backends (``tree_testlib.COMBOS``): each container under its own backend and under
"exact" (which materializes the rules), rank-space also with ``options="state-space"``, and
"randomized" with K1 = NT, K2 = 0 (which must reproduce exact). Operations: log_partition,
span_marginals, marginals, preterminal_marginals, entropy, max_score / argmax (where supported),
mbr, sample and log_prob. Tiny sizes (T <= 5, a few symbols), ragged batches with B >= 2, shared
and batched grammar tensors, forbidden (-inf) rules, float64.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import tree_bruteforce as tb
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_strategies import tree_specs
from tree_testlib import (
    ATOL,
    COMBOS,
    DTYPE,
    build_dist,
    cached_bruteforce,
    close,
    combo_id,
    grammar_of,
    one_thread,
    per_element,
    random_tree_spec,
    resolve_options,
    score_table,
    supports_argmax,
)

from zoo.inference.tree import TreeDistribution

# ZOO_TEST_EXAMPLES=200 for a longer hunt (the default keeps this file within about 15 s)
FAST = settings(max_examples=int(os.environ.get("ZOO_TEST_EXAMPLES", 10)), deadline=None)
MAX_TREES = 1500  # tree_strategies' cap on labelled trees per sentence (keeps the enumeration fast)
SAMPLES = 24

combos = pytest.mark.parametrize("combo", COMBOS, ids=combo_id)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():
        yield


def check_padding(trees: torch.Tensor, spec: tb.TreeSpec, what: str) -> None:
    """Rows past 2n - 1 are all -1, rows before are non-negative."""
    for b in range(spec.batch):
        rows = 2 * spec.length(b) - 1
        body, pad = trees[..., b, :rows, :], trees[..., b, rows:, :]
        assert (body >= 0).all(), f"{what}: negative entry within the {rows} rows of element {b}"
        assert (pad == -1).all(), f"{what}: padding rows of element {b} are not -1"


PARTS = ("inside", "viterbi", "mbr", "sample")


def check_every_operation(
    spec: tb.TreeSpec, dist: TreeDistribution, combo, seed: int = 0, parts=PARTS
) -> None:
    """Every operation of ``dist`` (those of ``parts``) against the brute force of ``spec``.

    inside: log_partition, the three marginals, entropy; viterbi: max_score and argmax (or the
    ValueError naming mbr on rank-space); mbr; sample: samples and log_prob.
    """
    if "inside" in parts:
        _check_inside(spec, dist)
    if "viterbi" in parts:
        _check_viterbi(spec, dist, combo)
    if "mbr" in parts:
        _check_mbr(spec, dist)
    if "sample" in parts:
        _check_samples(spec, dist, seed)


def _check_inside(spec, dist):
    close(dist.log_partition, per_element(spec, tb.log_partition), "log_partition")
    close(dist.span_marginals, per_element(spec, tb.span_marginals), "span_marginals")
    close(dist.marginals, per_element(spec, tb.marginals), "marginals")
    close(dist.preterminal_marginals, per_element(spec, tb.preterminal_marginals), "preterminal_marginals")
    close(dist.entropy, per_element(spec, tb.entropy), "entropy", atol=1e-9)


def _check_viterbi(spec, dist, combo):
    B, T = spec.batch, spec.T
    # Viterbi: the best score, and a tree that attains it (any of the tied ones)
    if supports_argmax(combo):
        close(dist.max_score, per_element(spec, tb.max_score), "max_score")
        argmax = dist.argmax
        assert argmax.shape == (B, 2 * T - 1, 3) and argmax.dtype == torch.long, argmax.shape
        check_padding(argmax, spec, "argmax")
        for b, tree in enumerate(tb.from_tensor_trees(argmax)):
            assert tree in tb.best(spec, b)[1], f"argmax of element {b} is not a best tree: {tree}"
    else:
        with pytest.raises(ValueError, match="mbr"):
            _ = dist.argmax


def _check_mbr(spec, dist):
    B, T = spec.batch, spec.T
    # MBR: a tree maximizing the summed span marginals of the brute force
    mbr = dist.mbr()
    assert mbr.shape == (B, 2 * T - 1, 2) and mbr.dtype == torch.long, mbr.shape
    check_padding(mbr, spec, "mbr")
    for b, tree in enumerate(tb.from_tensor_trees(mbr)):
        n = spec.length(b)
        assert tree in tb.mbr_trees(tb.span_marginals(spec, b), n), f"mbr of element {b}: {tree}"


def _check_samples(spec, dist, seed):
    B, T = spec.batch, spec.T
    # samples: valid trees of positive probability; log_prob of them (S x B) and of one (B,)
    samples = dist.sample(SAMPLES, torch.Generator().manual_seed(seed))
    assert samples.shape == (SAMPLES, B, 2 * T - 1, 3) and samples.dtype == torch.long, samples.shape
    check_padding(samples, spec, "sample")
    trees = tb.from_tensor_trees(samples)
    expected = torch.zeros(SAMPLES, B, dtype=DTYPE)
    for s in range(SAMPLES):
        for b in range(B):
            tree = trees[s][b]
            valid = tb.is_valid_tree(tree, spec.length(b), spec.NT, spec.PT)
            assert valid, f"sample {s}, element {b}: {tree}"
            expected[s, b] = score_table(spec, b)[tree] - tb.log_partition(spec, b)
            assert math.isfinite(expected[s, b]), f"sample {s}, element {b} has probability 0: {tree}"
    close(dist.log_prob(samples), expected, "log_prob of n x B samples")
    close(dist.log_prob(samples[0]), expected[0], "log_prob of B trees")


def _draw_spec(data, combo):
    kind, _, options = combo
    # every grammar tensor shared, or every one batched: see test_mixed_batching_* for mixtures
    batching = data.draw(st.sampled_from(["shared", "batched"]), label="batching")
    spec = data.draw(
        tree_specs(kind, forbid=kind != "rankspace", min_b=2, max_trees=MAX_TREES, batching=batching),
        label="spec",
    )
    return spec


@combos
@FAST
@given(data=st.data())
def test_every_operation_matches_bruteforce(combo, data):
    spec = _draw_spec(data, combo)
    with cached_bruteforce():
        check_every_operation(spec, build_dist(spec, combo[1], combo[2]), combo)


# --------------------------------------------------------------------------- deterministic cases
def _singleton_batch(spec: tb.TreeSpec) -> TreeDistribution:
    """The zoo grammar of a shared spec with every grammar tensor given a batch axis of size 1."""
    kind_args = {k: v.unsqueeze(0) for k, v in spec.args.items() if k != "terms"}
    singleton = tb.TreeSpec(spec.kind, {**kind_args, "terms": spec.args["terms"]}, spec.lengths)
    return grammar_of(singleton)


@combos
@pytest.mark.parametrize("batching", ["shared", "batched", "batch-of-one"])
def test_shared_and_batched_grammars(combo, batching):
    kind, backend, options = combo
    spec = random_tree_spec(
        kind, B=3, T=4, NT=2, PT=2, rank=3, lengths=[4, 2, 3], seed=7, shared_grammar=batching != "batched"
    )
    if batching == "batch-of-one":
        options = resolve_options(options, spec.NT)
        dist = TreeDistribution(_singleton_batch(spec), spec.args["terms"], spec.lengths, backend, options)
    else:
        dist = build_dist(spec, backend, options)
    with cached_bruteforce():
        check_every_operation(spec, dist, combo)


def _forbidden_spec(kind: str, seed: int) -> tb.TreeSpec:
    """Some rules impossible: -inf entries (dense, lowrank) or zero features (lowrank, rankspace)."""
    spec = random_tree_spec(kind, B=3, T=4, NT=2, PT=2, rank=2, lengths=[4, 3, 2], seed=seed, forbid=0.4)
    a = spec.args
    if kind == "lowrank":
        a["children"][:, 1, 0] = 0.0  # A -> N1 N0 impossible for every A
    if kind == "rankspace":
        a["V"][:, spec.NT + 1] = 0.0  # preterminal 1 is never a left child
        a["U"][:, 1, 0] = 0.0  # nonterminal 1 avoids the first rank component
    return spec


@combos
def test_forbidden_rules(combo):
    kind, backend, options = combo
    spec = _forbidden_spec(kind, seed=11)
    dist = build_dist(spec, backend, options)
    with cached_bruteforce():
        check_every_operation(spec, dist, combo)
        # a tree through a forbidden rule has log_prob -inf; its spans get no mass from it
        forbidden = [
            [t for t, s in tb.tree_scores(spec, b) if s == -math.inf][:1] for b in range(spec.batch)
        ]
    assert all(forbidden), "the spec should have forbidden trees in every element"
    log_p = dist.log_prob(tb.to_tensor_trees([f[0] for f in forbidden], spec.T))
    assert (log_p == -math.inf).all(), log_p


@combos
def test_terms_past_the_length_are_ignored(combo):
    kind, backend, options = combo
    spec = random_tree_spec(kind, B=3, T=5, NT=2, PT=2, lengths=[5, 2, 3], seed=3)
    garbage = random_tree_spec(kind, B=3, T=5, NT=2, PT=2, lengths=[5, 2, 3], seed=3)
    garbage.args["terms"] = spec.args["terms"].clone()
    for b in range(spec.batch):
        garbage.args["terms"][b, spec.length(b) :] = 50.0 * (b + 1)
    one, two = build_dist(spec, backend, options), build_dist(garbage, backend, options)
    for op in ("log_partition", "span_marginals", "marginals", "preterminal_marginals", "entropy"):
        close(getattr(two, op), getattr(one, op), op, atol=ATOL)
    close(two.log_prob(one.sample(4, torch.Generator().manual_seed(0))),
          one.log_prob(one.sample(4, torch.Generator().manual_seed(0))), "log_prob")


@combos
def test_unnormalized_potentials_shift_log_z_only(combo):
    """Adding c to the root and d to every term shifts log Z by c + n d and changes nothing else."""
    kind, backend, options = combo
    spec = random_tree_spec(kind, B=2, T=4, NT=2, PT=2, lengths=[4, 3], seed=5)
    shifted = random_tree_spec(kind, B=2, T=4, NT=2, PT=2, lengths=[4, 3], seed=5)
    shifted.args["root"] = spec.args["root"] + 3.0
    shifted.args["terms"] = spec.args["terms"] - 2.0
    one, two = build_dist(spec, backend, options), build_dist(shifted, backend, options)
    lengths = spec.lengths.to(DTYPE)
    close(two.log_partition, one.log_partition + 3.0 - 2.0 * lengths, "log_partition")
    for op in ("span_marginals", "marginals", "preterminal_marginals", "entropy"):
        close(getattr(two, op), getattr(one, op), op, atol=1e-9)


# --------------------------------------------------------------------------- mixed batching
def _mixed_spec(kind: str, which: str) -> tb.TreeSpec:
    """Batched grammar tensors except the root ("root shared") or except all but the root."""
    spec = random_tree_spec(kind, B=3, T=4, NT=2, PT=2, rank=2, lengths=[4, 2, 3], seed=13)
    for name in tb.GRAMMAR_ARGS[kind]:
        if (name == "root") == (which == "root shared"):
            spec.args[name] = spec.args[name][0].clone()
    return spec


MIXES = ["root shared", "root batched"]


@combos
@pytest.mark.parametrize("which", MIXES)
def test_mixed_batching_inside_viterbi_mbr(combo, which):
    spec = _mixed_spec(combo[0], which)
    with cached_bruteforce():
        dist = build_dist(spec, combo[1], combo[2])
        check_every_operation(spec, dist, combo, parts=("inside", "viterbi", "mbr"))


@combos
@pytest.mark.parametrize("which", MIXES)
def test_mixed_batching_samples_and_log_prob(combo, which):
    spec = _mixed_spec(combo[0], which)
    with cached_bruteforce():
        check_every_operation(spec, build_dist(spec, combo[1], combo[2]), combo, parts=("sample",))


# --------------------------------------------------------------------------- tree shapes
@combos
def test_trees_have_2T_minus_1_rows_when_every_length_is_short(combo):
    kind, backend, options = combo
    spec = random_tree_spec(kind, B=2, T=4, NT=2, PT=2, lengths=[3, 2], seed=17)
    dist = build_dist(spec, backend, options)
    B, M = 2, 2 * spec.T - 1
    samples = dist.sample(3, torch.Generator().manual_seed(0))
    assert samples.shape == (3, B, M, 3), samples.shape
    assert dist.mbr().shape == (B, M, 2), dist.mbr().shape
    if supports_argmax(combo):
        assert dist.argmax.shape == (B, M, 3), dist.argmax.shape
    with cached_bruteforce():
        check_every_operation(spec, dist, combo)
