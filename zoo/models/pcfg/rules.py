"""The PCFG's rules under each backend, one head a backend (``RULE_HEADS``; the model docstring has
the parameterizations).

A head owns the symbol embeddings and the rule parameters of its backend and builds the engine's
grammar container from the root's hidden vector h_root(e_S) (D): ``DenseRules`` (exact, randomized),
``LowRankRules`` (low-rank) and ``RankSpaceRules`` (rank-space). ``symbols()`` gives the NT x D and
PT x D embeddings the emission reads. A fifth backend is one more head here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from zoo.inference import Backend, DenseGrammar, LowRankGrammar, RankSpaceGrammar
from zoo.inference.tree.factors import GrammarFactors
from zoo.models.layers import ResidualMLP, embedding_table, orthogonal_random_features


class RuleHead(nn.Module):
    """The rules of one backend. Args: NT, PT, D, ``mlp`` (builds a residual MLP), R (None for dense)."""

    # Kim et al. 2019's initialization (Xavier-uniform for every matrix), which the model applies
    xavier_init = False

    def __init__(self, nonterminals: int, preterminals: int, dim: int, mlp: Callable[[], ResidualMLP], rank):
        super().__init__()
        self.nonterminals, self.preterminals, self.rank = nonterminals, preterminals, rank

    def symbols(self) -> tuple[Tensor, Tensor]:
        """NT x D and PT x D embeddings of the nonterminals and preterminals."""
        raise NotImplementedError

    def root_log_probs(self, root: Tensor) -> Tensor:
        """log p(S -> A): NT. root: D, the start symbol's hidden vector h_root(e_S)."""
        return torch.log_softmax(self.root_out(root), -1)

    def grammar(self, root: Tensor) -> GrammarFactors:
        """The engine's grammar (every p(A -> . .) and p(S -> .) normalized). root: log p(S -> A), NT."""
        raise NotImplementedError

    def chart_width(self) -> float:
        """The inside chart's width per span in the cost model (``PCFG.eval_memory``)."""
        return self.nonterminals


class DenseRules(RuleHead):
    """p(A -> b c) = softmax_bc(W_rule e_A) over all S^2 child pairs: the N-PCFG (exact, randomized)."""

    xavier_init = True

    def __init__(self, nonterminals, preterminals, dim, mlp, rank):
        super().__init__(nonterminals, preterminals, dim, mlp, rank)
        S = nonterminals + preterminals
        self.nt_emb = embedding_table(nonterminals, dim)
        self.pt_emb = embedding_table(preterminals, dim)
        self.root_out = nn.Linear(dim, nonterminals)
        self.rule_out = nn.Linear(dim, S * S)  # Kim et al.: p(A -> b c) = softmax(W_rule e_A)

    def symbols(self):
        return self.nt_emb, self.pt_emb

    def rule_logits(self) -> Tensor:
        """Unnormalized log-scores of A -> b c: NT x S x S."""
        S = self.nonterminals + self.preterminals
        return self.rule_out(self.nt_emb).view(self.nonterminals, S, S)

    def grammar(self, root):
        logits = self.rule_logits()
        return DenseGrammar(root, torch.log_softmax(logits.flatten(1), -1).view_as(logits))


class LowRankRules(DenseRules):
    """The LPCFG: two nonterminal children through phi(u_A) . phi(v_BC), the rest as the N-PCFG."""

    xavier_init = False

    def __init__(self, nonterminals, preterminals, dim, mlp, rank):
        super().__init__(nonterminals, preterminals, dim, mlp, rank)
        self.head_mlp = mlp()
        self.pair_in = nn.Linear(2 * dim, dim)
        self.pair_mlp = mlp()
        self.feature_weight = nn.Parameter(orthogonal_random_features(rank, dim))

    def log_features(self, x: Tensor) -> Tensor:
        """log phi(x) = W x - |x|^2 / 2 of the LPCFG feature map (x scaled by D^(-1/4)): ... x R."""
        x = x / x.shape[-1] ** 0.25
        return x @ self.feature_weight.T - 0.5 * (x * x).sum(-1, keepdim=True)

    def grammar(self, root):
        NT = self.nonterminals
        logits = self.rule_logits().clone()
        logits[:, :NT, :NT] = float("-inf")  # that block is carried by the features
        nt = self.nt_emb
        log_head = self.log_features(self.head_mlp(nt))  # NT x R
        pairs = torch.cat([nt.unsqueeze(1).expand(NT, NT, -1), nt.unsqueeze(0).expand(NT, NT, -1)], -1)
        log_children = self.log_features(self.pair_mlp(self.pair_in(pairs)))  # NT x NT x R
        # normalize each parent's row over the dense part and the low-rank part, in log space
        child_mass = torch.logsumexp(log_children.flatten(0, 1), 0)  # R
        low_rank_mass = torch.logsumexp(log_head + child_mass, -1)  # NT
        log_norm = torch.logaddexp(logits.flatten(1).logsumexp(-1), low_rank_mass)  # NT
        shift = log_children.detach().amax()
        head = (log_head - log_norm.unsqueeze(-1) + shift).exp()  # <= 1: the shift is the max child
        children = (log_children - shift).exp()  # <= 1
        rules = logits - log_norm.view(NT, 1, 1)
        return LowRankGrammar(root, rules, head, children)

    def chart_width(self):
        return self.nonterminals + 3 * self.rank


class RankSpaceRules(RuleHead):
    """The TD-PCFG / rank-space PCFG: p(A -> b c) = sum_r U[A, r] V[b, r] W[c, r]."""

    def __init__(self, nonterminals, preterminals, dim, mlp, rank):
        super().__init__(nonterminals, preterminals, dim, mlp, rank)
        # shared by every role (Yang et al. 2022, App. A); N(0, 1) as in the authors' TN-PCFG code
        # (Yang et al. 2022, App. D: Xavier-normal except embeddings): with Xavier-normal tables (std ~0.1)
        # U, V and W start almost uniform and NT 30 / PT 60, rank 32 stalled near unigram perplexity on PTB
        self.symbol_emb = nn.Parameter(torch.randn(nonterminals + preterminals, dim))
        self.rank_emb = nn.Parameter(torch.randn(rank, dim))
        self.root_out = nn.Linear(dim, nonterminals)
        self.u_mlp, self.v_mlp, self.w_mlp = mlp(), mlp(), mlp()

    def symbols(self):
        return self.symbol_emb[: self.nonterminals], self.symbol_emb[self.nonterminals :]

    def grammar(self, root):
        ranks = self.rank_emb.T  # D x r
        nt, _ = self.symbols()
        log_U = torch.log_softmax(self.u_mlp(nt) @ ranks, -1)  # NT x r, rows of U sum to 1
        log_V = torch.log_softmax(self.v_mlp(self.symbol_emb) @ ranks, 0)  # S x r, columns sum to 1
        log_W = torch.log_softmax(self.w_mlp(self.symbol_emb) @ ranks, 0)
        # from the logs: where float32 underflows U, V or W, the engine's float64 fallback does not
        return RankSpaceGrammar.from_logs(root, log_U, log_V, log_W)

    def chart_width(self):
        return self.rank / 2


RULE_HEADS: dict[Backend, type[RuleHead]] = {
    Backend.EXACT: DenseRules,
    Backend.RANDOMIZED: DenseRules,
    Backend.LOW_RANK: LowRankRules,
    Backend.RANK_SPACE: RankSpaceRules,
}
# the parameters the heads took over in checkpoint format 3, by their names before (``PCFG.legacy_keys``)
RULE_LEGACY_KEYS = {
    name: f"rules.{name}"
    for name in (
        "nt_emb", "pt_emb", "root_out", "rule_out", "head_mlp", "pair_in", "pair_mlp", "feature_weight",
        "symbol_emb", "rank_emb", "u_mlp", "v_mlp", "w_mlp",
    )
}  # fmt: skip
