"""``TreeDistribution``: the distribution-style surface of the tree engine, for every backend."""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.checks import (
    as_dp_tensor,
    check_finite,
    check_lengths,
    check_same_dtype,
    check_sample_count,
    check_shape,
)
from zoo.inference.distribution import StructuredDistribution
from zoo.inference.inference_mode import autograd_ready
from zoo.inference.numerics import needs_grad
from zoo.inference.tree import divergence, engine, low_rank, randomized, rank_space  # noqa: F401  (register the engines)
from zoo.inference.tree.chart import mask_terms, mbr_tree
from zoo.inference.tree.factors import GrammarFactors
from zoo.inference.tree.trees import tree_score


class TreeDistribution(StructuredDistribution):
    """A distribution over the binary trees of a batch of sentences under a CNF grammar.

    Args:
        grammar: a DenseGrammar, LowRankGrammar or RankSpaceGrammar (batched or shared).
        terms: B x T x PT terminal log-scores (``terminal_scores(emission, words)`` for a PCFG).
        lengths: (B,) sentence lengths in 2..T; None means every sentence has length T.
        backend: "exact", "low-rank", "rank-space" or "randomized"; None picks the grammar's own.
            "exact" accepts every grammar (it materializes the rules).
        options: ``RDPOptions`` for "randomized"; "state-space" for "rank-space" (optional).
        node_scores: optional B x T x (T+1) x NT log-scores added to the score of a tree for each
            of its nodes: [b, i, k, A] scores span [i, k) labelled A (a tree CRF's span scores;
            Alg. 2's node potentials). Entries of width < 2 are ignored (but must be finite or -inf).

    Shapes and formats are fixed in docs/tree-api.md: ``log_partition`` (B,), ``span_marginals``
    (B x T x (T+1)), ``marginals`` (B x T x (T+1) x NT), ``preterminal_marginals`` (B x T x PT),
    ``entropy`` (B,), ``argmax`` (B x (2T-1) x 3), ``mbr()`` (B x (2T-1) x 2), ``sample(n)``
    (n x B x (2T-1) x 3), ``log_prob(trees)``.
    """

    structure = "tree"
    factors_argument = "grammar"
    factor_type = GrammarFactors
    accepted = "a DenseGrammar, LowRankGrammar or RankSpaceGrammar"

    def __init__(
        self,
        grammar: GrammarFactors,
        terms: Tensor,
        lengths: Tensor | None = None,
        backend: str | Backend | None = None,
        options=None,
        node_scores: Tensor | None = None,
    ):
        self._check_factors(grammar)  # before its attributes are read below
        terms = as_dp_tensor("terms", terms)
        node_scores = None if node_scores is None else as_dp_tensor("node_scores", node_scores)
        check_same_dtype(
            type(self).__name__, **{"the grammar": grammar.root}, terms=terms, node_scores=node_scores
        )
        if terms.dim() != 3 or terms.shape[-1] != grammar.num_preterminals or 0 in terms.shape:
            raise ValueError(
                f"terms must have shape B x T x PT with PT = {grammar.num_preterminals} preterminals, "
                f"got {tuple(terms.shape)}"
            )
        B, T, _ = terms.shape
        if grammar.grammar_batch not in (1, B):
            raise ValueError(
                f"the grammar has batch size {grammar.grammar_batch} but terms has B = {B}"
            )
        if T < 2:
            raise ValueError(
                f"sentences need at least 2 words (a CNF tree's root is a nonterminal), got T = {T}"
            )
        check_finite("terms", terms)
        why = " (sentences need at least 2 words: a CNF tree's root is a nonterminal)"
        self.lengths = check_lengths(lengths, B, T, terms.device, shortest=2, why=why)
        self._choose_engine(grammar, backend, options)
        self.grammar = self.engine.prepare(grammar)
        self._given_terms = terms
        if node_scores is not None:
            NT = grammar.num_nonterminals
            check_shape("node_scores", node_scores, (B, T, T + 1, NT), "B x T x (T+1) x NT")
            check_finite("node_scores", node_scores)
        self.node_scores = node_scores

    @property
    def terms(self) -> Tensor:
        """The terms, zero past each length: B x T x PT. Masked again for every operation, so that each
        has a graph of its own (a ``backward`` of one freed what the next would need)."""
        return mask_terms(self._given_terms, self.lengths)

    @property
    def _args(self):
        return self.grammar, self.terms, self.lengths

    def _potentials(self) -> list:
        return [*self.grammar.tensors(), self.terms, self.node_scores]

    @cached_property
    @autograd_ready
    def log_partition(self) -> Tensor:
        """log Z: (B,). For the randomized backend, log of the unbiased estimate Z_hat (which may be
        -inf when every kept state dies); the other backends raise where no tree has a non-zero score."""
        log_z = self.engine.log_partition(*self._args, label_scores=self.node_scores)
        return self.engine.checked(log_z, self.lengths)

    @cached_property
    @autograd_ready
    def span_marginals(self) -> Tensor:
        """p(span [i, k) is a constituent) at [b, i, k]: B x T x (T+1)."""
        return self.engine.span_marginals(*self._args, self.node_scores)

    @cached_property
    @autograd_ready
    def marginals(self) -> Tensor:
        """p(span [i, k) is a node labelled A) at [b, i, k, A]: B x T x (T+1) x NT."""
        return self.engine.marginals(*self._args, self.node_scores)

    @cached_property
    @autograd_ready
    def preterminal_marginals(self) -> Tensor:
        """p(leaf t is labelled P) at [b, t, P]: B x T x PT."""
        return self.engine.preterminal_marginals(*self._args, self.node_scores)

    @cached_property
    @autograd_ready
    def entropy(self) -> Tensor:
        """Entropy of the distribution over trees: (B,)."""
        return self.engine.entropy(*self._args, self.node_scores)

    @cached_property
    @autograd_ready
    def _viterbi(self) -> tuple[Tensor, Tensor]:
        score, tree = self.engine.argmax(*self._args, self.node_scores)
        if needs_grad(*self._potentials()):
            # the best tree's score summed from the potentials: its gradient is the tree's indicator
            score = tree_score(*self._args, tree, self.node_scores)
        return score, tree

    @autograd_ready
    def mbr(self) -> Tensor:
        """Minimum Bayes risk tree (CKY over span marginals): B x (2T-1) x 2 long (start, end). From
        ``span_marginals`` where they were computed already (the engine computes them otherwise)."""
        known = self.__dict__.get("span_marginals")
        if known is None:
            return self.engine.mbr(*self._args, self.node_scores)
        with torch.no_grad():
            return mbr_tree(known, self.lengths)

    @autograd_ready
    def log_prob(self, trees: Tensor) -> Tensor:
        """log p(trees): trees B x (2T-1) x 3 or S x B x (2T-1) x 3 -> (B,) or (S, B)."""
        return self.engine.log_prob(*self._args, trees, self.node_scores, self._known_log_partition())

    @autograd_ready
    def cross_entropy(self, other: TreeDistribution) -> Tensor:
        """H(p, q) = -E_p[log q(tree)], p this distribution and q ``other`` (the same B, T, NT, PT and
        lengths; any grammars and backends): (B,), +inf where p gives mass to a tree q forbids.
        Differentiable in both; exact, on the dense grammars (``tree.divergence``)."""
        return divergence.cross_entropy(self, other)

    @autograd_ready
    def kl(self, other: TreeDistribution) -> Tensor:
        """KL(p || q) = H(p, q) - H(p), p this distribution and q ``other``: (B,) (as ``cross_entropy``)."""
        return divergence.kl(self, other)

    @autograd_ready
    def sample(self, n: int = 1, generator: torch.Generator | None = None) -> Tensor:
        """n exact samples of p(tree | sentence): n x B x (2T-1) x 3."""
        check_sample_count(n)
        return self.engine.sample(*self._args, n, generator, self.node_scores)
