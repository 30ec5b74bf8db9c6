"""What every tree backend shares: operations derived from log Z by autograd, and the fallbacks.

A backend (``TreeEngine`` subclass) supplies one primitive on its own grammar,
``log_partition(grammar, terms, lengths, span_scores=None, label_scores=None)``: ``label_scores``
(B x T x (T+1) x NT) are the user's node scores (a tree CRF) and, plus a zero probe, give the
labelled span marginals by autograd (Eisner 2016); ``span_scores`` is the unlabelled probe. Every
operation takes the user's node scores as ``nodes`` (None: none). From it the
base class derives span, labelled and preterminal marginals, MBR decoding and ``log_prob``; entropy,
Viterbi and exact sampling run on the dense grammar (``ExactEngine``), which a backend inherits as an
exact fallback or replaces. Each backend declares in ``capabilities`` how it computes every operation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.engines import Engine, register_engine
from zoo.inference.kinds import NATIVE
from zoo.inference.numerics import needs_grad
from zoo.inference.tree import exact, log_space
from zoo.inference.tree.chart import check_some_tree, mbr_tree
from zoo.inference.tree.entropy import entropy as tree_entropy
from zoo.inference.tree.factors import DenseGrammar, GrammarFactors
from zoo.inference.tree.guard import guarded
from zoo.inference.tree.sampling import sample_trees
from zoo.inference.tree.trees import tree_score
from zoo.inference.tree.viterbi import viterbi


def probe_gradient(log_partition, probe_shape, like: Tensor, differentiable: bool) -> Tensor:
    """d log Z / d probe at probe = 0, for ``log_partition(probe)`` -> (B,)."""
    with torch.enable_grad():
        probe = like.new_zeros(probe_shape, requires_grad=True)
        log_z = log_partition(probe)
        (grad,) = torch.autograd.grad(log_z.sum(), probe, create_graph=differentiable)
    return grad


class TreeEngine(Engine):
    """Base class of the tree backends; see the module docstring."""

    def log_partition(self, grammar, terms, lengths, span_scores=None, label_scores=None) -> Tensor:
        raise NotImplementedError

    def checked(self, log_z: Tensor, lengths: Tensor) -> Tensor:
        """``check_some_tree``: an exact backend raises where no tree has a non-zero score."""
        return check_some_tree(log_z, lengths)

    def _checked_log_partition(self, grammar, terms, lengths, **scores) -> Tensor:
        return self.checked(self.log_partition(grammar, terms, lengths, **scores), lengths)

    # --- marginals by autograd --------------------------------------------------------------
    def _differentiable(self, grammar, terms) -> bool:
        return needs_grad(terms, *grammar.tensors())

    def span_marginals(self, grammar, terms, lengths, nodes=None) -> Tensor:
        """p(span [i, k) is a constituent): B x T x (T+1); width-1 spans are 1 within the length."""
        B, T, _ = terms.shape
        grad = probe_gradient(
            lambda p: self._checked_log_partition(grammar, terms, lengths, span_scores=p, label_scores=nodes),
            (B, T, T + 1),
            terms,
            self._differentiable(grammar, terms),
        )
        i = torch.arange(T, device=terms.device)
        leaf = (i < lengths.unsqueeze(-1)).to(grad.dtype)  # B x T
        return grad + torch.diag_embed(leaf, offset=1)[:, :T]

    def marginals(self, grammar, terms, lengths, nodes=None) -> Tensor:
        """p(span [i, k) is a node labelled A): B x T x (T+1) x NT."""
        B, T, _ = terms.shape
        return probe_gradient(
            lambda p: self._checked_log_partition(
                grammar, terms, lengths, label_scores=p if nodes is None else nodes + p
            ),
            (B, T, T + 1, grammar.num_nonterminals),
            terms,
            self._differentiable(grammar, terms),
        )

    def preterminal_marginals(self, grammar, terms, lengths, nodes=None) -> Tensor:
        """p(leaf t is labelled P): B x T x PT."""
        return probe_gradient(
            lambda p: self._checked_log_partition(grammar, terms + p, lengths, label_scores=nodes),
            terms.shape,
            terms,
            self._differentiable(grammar, terms),
        )

    def mbr(self, grammar, terms, lengths, nodes=None) -> Tensor:
        """The unlabelled tree maximizing the expected number of correct spans: B x (2T-1) x 2."""
        with torch.no_grad():
            return mbr_tree(self.span_marginals(grammar, terms, lengths, nodes), lengths)

    def log_prob(self, grammar, terms, lengths, trees: Tensor, nodes=None, log_z=None) -> Tensor:
        """log p(tree) = score - log Z, clamped at 0: (B,) or (S, B); ``log_z``: this engine's (checked)
        log Z where it is known (computed here otherwise)."""
        score = tree_score(grammar, terms, lengths, trees, nodes)
        if log_z is None:
            log_z = self._checked_log_partition(grammar, terms, lengths, label_scores=nodes)
        return (score - log_z).clamp_max(0.0)

    # --- on the dense grammar ---------------------------------------------------------------
    def entropy(self, grammar, terms, lengths, nodes=None) -> Tensor:
        """H by the inside pass in the entropy semiring on the dense grammar, differentiable: (B,).
        In float64 and returned in the terms' dtype, as the semi-Markov entropy: each span's entropy is
        N / Y + log Y of terms of the size of its -log weights, and float32 lost up to 1.7e-4 nats
        over 24 words (tests/numerics/test_tree_float32.py). The sentences beyond float64's range
        (``guard.guarded``) get log Z - E[score] in log space (``log_space.entropy``)."""
        dense = grammar.dense()
        wide = DenseGrammar(dense.root.double(), dense.rules.double())
        nodes = None if nodes is None else nodes.double()

        def inside(grammar, terms, lengths, span_scores, guard, nodes):
            return tree_entropy(grammar, terms, lengths, nodes, guard)

        H = guarded(inside, wide, terms.double(), lengths, None, nodes, log_space=log_space.entropy)
        check_some_tree(torch.where(torch.isneginf(H.detach()), float("-inf"), 0.0), lengths)  # no tree: -inf
        return H.to(terms.dtype)

    def argmax(self, grammar, terms, lengths, nodes=None) -> tuple[Tensor, Tensor]:
        """Viterbi on the dense grammar: (best score (B,), tree B x (2T-1) x 3)."""
        dense = grammar.dense()
        return viterbi(dense.rules, dense.root, terms, lengths, nodes)

    def sample(self, grammar, terms, lengths, n: int, generator=None, nodes=None) -> Tensor:
        """n exact samples from p(tree | sentence): n x B x (2T-1) x 3."""
        return sample_trees(grammar.dense(), terms, lengths, n, generator, nodes)


@register_engine("tree", "exact")
class ExactEngine(TreeEngine):
    """The inside algorithm on dense rules; accepts every grammar by materializing it."""

    name = "exact"
    factor_types = (GrammarFactors,)
    capabilities = {
        "log_partition": (NATIVE, "width-batched inside, log-einsum-exp: O(T^3 S^2 + T^2 NT S^2)"),
        "span_marginals": (NATIVE, "autograd of log Z"),
        "marginals": (NATIVE, "autograd of log Z, B x T x (T+1) x NT"),
        "entropy": (NATIVE, "the inside pass in the entropy semiring, differentiable"),
        "log_prob": (NATIVE, "score - log Z"),
        "argmax": (NATIVE, "Viterbi (max-plus CKY)"),
        "mbr": (NATIVE, "CKY over span marginals"),
        "sample": (NATIVE, "top-down sampling from the inside chart"),
    }

    def prepare(self, grammar):
        return super().prepare(grammar).dense()

    def log_partition(self, grammar, terms, lengths, span_scores=None, label_scores=None):
        log_partition = exact.guarded_log_partition(exact.dense_rule_op)
        return log_partition(grammar, terms, lengths, span_scores, label_scores)

