"""The LPCFG inside (Chiu et al. 2021, Eq. 7): the nonterminal-nonterminal productions in low rank.

For two nonterminal children the summed outer products X (B x n x NT x NT, ``outer_sum``) meet the
rules through the features, X . children (NT^2 x R) then head^T (R x NT): O(T^3 NT^2 + T^2 NT^2 R)
instead of the dense O(T^2 NT^3). Productions with a preterminal child use the dense rules.
"""

from __future__ import annotations

from zoo.inference.engines import register_engine
from zoo.inference.kinds import FALLBACK, NATIVE
from zoo.inference.tree import exact
from zoo.inference.tree.engine import TreeEngine
from zoo.inference.tree.factors import LowRankGrammar


def low_rank_rule_op(grammar: LowRankGrammar) -> exact.RuleOp:
    """The RuleOp of an LPCFG: features for the NT x NT block, dense rules for the rest."""
    dense = exact.dense_rule_op(grammar)
    children = grammar.children.flatten(1, 2)  # G x NT^2 x R
    head = grammar.head.transpose(1, 2)  # G x R x NT

    def op(left_nt, right_nt, X):
        if not (left_nt and right_nt):
            return dense(left_nt, right_nt, X)
        features = exact.grammar_matmul(X.flatten(2), children)
        return X.new_zeros(()), exact.grammar_matmul(features, head)

    return op


@register_engine("tree", "low-rank")
class LowRankEngine(TreeEngine):
    """LPCFG inference: log Z and marginals in O(T^3 NT^2 + T^2 NT^2 R); Viterbi, entropy and
    sampling need psi(A, B, C) itself and run on the materialized rules."""

    name = "low-rank"
    factor_types = (LowRankGrammar,)
    capabilities = {
        "log_partition": (NATIVE, "inside with the NT x NT block through the features"),
        "span_marginals": (NATIVE, "autograd of log Z"),
        "marginals": (NATIVE, "autograd of log Z"),
        "entropy": (FALLBACK, "materializes NT x S x S"),
        "log_prob": (NATIVE, "rule entries from the features"),
        "argmax": (FALLBACK, "Viterbi on the materialized NT x S x S"),
        "mbr": (NATIVE, "CKY over span marginals"),
        "sample": (FALLBACK, "top-down on the materialized NT x S x S"),
    }

    def log_partition(self, grammar, terms, lengths, span_scores=None, label_scores=None):
        log_partition = exact.guarded_log_partition(low_rank_rule_op)
        return log_partition(grammar, terms, lengths, span_scores, label_scores)
