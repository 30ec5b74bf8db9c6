"""Neural PCFGs with the inference backend as a constructor argument.

``PCFG(vocab_size, num_nonterminals, num_preterminals, backend, rank, ...)`` is a probabilistic
context-free grammar in Chomsky normal form over words (NT nonterminals, PT preterminals,
S = NT + PT symbols, nonterminals first on every symbol axis; docs/tree-api.md). Every distribution
comes from symbol embeddings (size D) through residual MLPs h (``zoo.models.layers``):

* ``exact``: the N-PCFG (Kim et al. 2019; Chiu et al. 2021 App. F; Yang et al. 2022 App. A).
  p(S -> A) = softmax_A(w_root . h_root(e_S)), p(A -> b c) = softmax_bc(W_rule e_A) over all S^2
  child pairs, p(w | P) = softmax_w(W_term h_term(e_P)); every weight matrix and embedding starts
  Xavier-uniform, as in Kim et al.'s code. Inference: the exact inside over a ``DenseGrammar``,
  O(T^3 NT S^2).
* ``low-rank``: the LPCFG (Chiu et al. 2021, Eq. 7). For two nonterminal children
  p(A -> B C) is proportional to phi(u_A) . phi(v_BC) with phi(x) = exp(W x - |x|^2 / 2)
  (R features, W R x D; orthogonal random features at init, trained; x scaled by D^(-1/4) as in
  Performer's softmax kernel), u_A = h_head(e_A) and v_BC = h_pair([e_B; e_C]); the productions
  with a preterminal child keep the N-PCFG's logits; each parent's row is normalized over both
  parts. Inference: ``LowRankGrammar``.
* ``rank-space``: the TD-PCFG / rank-space PCFG (Yang et al. 2021b; 2022 App. A):
  p(A -> b c) = sum_r U[A, r] V[b, r] W[c, r] with shared symbol embeddings E (S x D) and rank
  embeddings g_r (r x D): U = softmax_r(h_U(E_A) . g_r) (rows sum to 1), V = softmax_b(h_V(E_b) .
  g_r) and W = softmax_c(h_W(E_c) . g_r) (columns sum to 1), so every p(A -> . .) sums to 1.
  Inference: ``RankSpaceGrammar`` with the rank-space inside, O(T^3 r + T^2 r^2); NT x S x S is
  never built (NT = 4500, PT = 9000 in the paper).
* ``randomized``: the N-PCFG's dense rules (and initialization) trained with the randomized
  inside (Fu et al. 2022, Alg. 2): each span keeps K1 top + K2 sampled nonterminals of the
  proposal. In eval mode the exact inside runs whenever NT <= ``exact_max_nonterminals`` (see
  ``evaluation_is_exact``).

Sentences are the ``tokens`` of a text batch (docs/training-api.md) with ``<eos>`` last: the
grammar generates the words without it (length n = lengths - 1 >= 2), while ``num_events`` counts
``lengths`` = n + 1, so that the task's perplexity exp(-sum log p / sum events) is Kim et al. 2019's
PCFG perplexity exp(-sum log Z / (sum n + number of sentences)) (Kim et al. 2019).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.inference import Backend, TreeDistribution, sample_sentences, terminal_scores
from zoo.inference.tree.factors import GrammarFactors
from zoo.inference.tree.randomized import TREE_PROPOSALS
from zoo.models.arguments import check_int, check_positive, check_probability, check_randomized, check_rank
from zoo.models.base import ZooModel, decoding, evaluating, gradients_in_evaluation, renamed, scoring
from zoo.models.evaluation import RandomizedEvaluation
from zoo.models.inputs import batch_inputs, token_ids
from zoo.models.layers import ResidualMLP
from zoo.models.pcfg.rules import RULE_HEADS, RULE_LEGACY_KEYS


class PCFG(RandomizedEvaluation, ZooModel):
    """A neural PCFG over words; batch key ``tokens`` (B x T long, ``<eos>`` last, counted in
    ``lengths``).

    Args:
        vocab_size: V (including ``<eos>`` and ``<unk>``: the emission covers every id, and training
            drives the mass of ``<eos>``, which no sentence holds among its words, towards 0).
        num_nonterminals: NT.
        num_preterminals: PT.
        backend: "exact", "low-rank", "rank-space" or "randomized" (module docstring).
        rank: R, the LPCFG's number of features (low-rank) or the CPD rank (rank-space); required by
            those two backends, rejected by the others.
        embedding_dim: D, the size of every symbol embedding.
        hidden_dim: inner width of the residual blocks.
        num_blocks: residual blocks per MLP (2 in the papers).
        dropout: dropout inside the MLPs (training mode only).
        k1, k2: randomized only (required there): nonterminals kept exactly (top-K1 of the proposal)
            and sampled (K2) per span; 1 <= k1 + k2 <= NT.
        proposal: randomized only: "local" (leaves by their terms; the default) or "uniform".
        exact_max_nonterminals: randomized only: in eval mode the exact inside runs when
            NT <= this bound, else the randomized estimate.
        emission_init_scale: the word output layer's initial weights are multiplied by this (the
            first emission logits with them), so that the preterminals start further from uniform
            and from each other. At 1 they start nearly alike, and on the synthetic grammar no
            backend splits the word classes that only agreement tells apart; at 10, with more
            preterminals than classes, they split most of them (docs/pcfg.md).
    """

    card_task_type = "text-generation"

    exact_evaluation = ("num_nonterminals", "exact_max_nonterminals")
    legacy_keys = RULE_LEGACY_KEYS

    observation_key = "tokens"
    # Cost model: the inside pass (and the parse's backward) take time ~ B T^3 (NT + PT)^2 and memory
    # ~ B T^3 W (``eval_memory``); a 5,000-word line takes hours and far more memory than a machine
    # has. Evaluation refuses sentences over 300 words before it starts (``LikelihoodTask(
    # max_eval_length=...)`` sets another limit), and batches over its memory budget.
    max_eval_length = 300

    def eval_memory(self, batch_size: int, length: int) -> int:
        """The inside chart and its backward, 4.5 B T^3 W bytes (W: NT for exact and randomized, NT + 3 R
        for low-rank, R / 2 for rank-space), three float32 copies of the rule tensor (NT x S x S, or the
        rank factors) and of the PT x V word table; docs/training-api.md has the measured peaks beside
        it."""
        NT, PT, V = self.num_nonterminals, self.num_preterminals, self.vocab_size
        S, R = NT + PT, self.rank or 0
        width = self.rules.chart_width()
        rules = (NT + 2 * S) * R if R else NT * S * S  # rank factors, or the dense rule tensor
        return int(4.5 * batch_size * length**3 * width) + 12 * (rules + PT * V)

    def __init__(
        self,
        vocab_size: int,
        num_nonterminals: int = 30,
        num_preterminals: int = 60,
        backend: str = "exact",
        rank: int | None = None,
        embedding_dim: int = 256,
        hidden_dim: int = 256,
        num_blocks: int = 2,
        dropout: float = 0.0,
        k1: int | None = None,
        k2: int | None = None,
        proposal: str = "local",
        exact_max_nonterminals: int = 256,
        emission_init_scale: float = 1.0,
    ):
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("num_nonterminals", num_nonterminals),
            ("num_preterminals", num_preterminals),
            ("embedding_dim", embedding_dim),
            ("hidden_dim", hidden_dim),
            ("exact_max_nonterminals", exact_max_nonterminals),
        ):
            check_int(name, value)
        check_int("num_blocks", num_blocks, low=0)
        check_probability("dropout", dropout)
        check_positive("emission_init_scale", emission_init_scale)
        parsed = Backend.parse(backend)
        check_rank(parsed, rank, "the LPCFG's features / the CPD rank")
        check_randomized(
            parsed,
            k1,
            k2,
            proposal,
            proposals=TREE_PROPOSALS,
            uniform=TREE_PROPOSALS,  # both uniform over span labels
            size_name="num_nonterminals",
            limit=num_nonterminals,
            unit="per span",
            example="k1 = k2 = num_nonterminals // 4",
        )

        self.vocab_size = vocab_size
        self.num_nonterminals = NT = num_nonterminals
        self.num_preterminals = PT = num_preterminals
        self.backend = parsed.value
        self.rank = rank
        self.k1, self.k2, self.proposal = k1, k2, proposal
        self.exact_max_nonterminals = exact_max_nonterminals
        D = embedding_dim

        def mlp() -> ResidualMLP:
            return ResidualMLP(D, hidden_dim, num_blocks, dropout)

        self.root_emb = nn.Parameter(torch.randn(D) / math.sqrt(D))  # e_S, the start symbol
        self.root_mlp = mlp()
        self.term_mlp = mlp()
        self.term_out = nn.Linear(D, vocab_size)
        # the backend's rules: dense, low-rank or rank-space (zoo.models.pcfg.rules); the root's and the
        # symbols' parameters with them
        self.rules = RULE_HEADS[parsed](NT, PT, D, mlp, rank)
        if self.rules.xavier_init:
            self._xavier_init()
        with torch.no_grad():
            self.term_out.weight.mul_(emission_init_scale)

    def _xavier_init(self) -> None:
        """Kim et al. 2019's initialization of the N-PCFG: Xavier-uniform for every weight matrix and
        embedding (the start symbol's as a 1 x D row); biases keep PyTorch's default."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        nn.init.xavier_uniform_(self.root_emb.data.view(1, -1))

    # --- parameters -------------------------------------------------------------------------
    def root_log_probs(self) -> Tensor:
        """log p(S -> A): NT."""
        return self.rules.root_log_probs(self.root_mlp(self.root_emb))

    def emission(self) -> Tensor:
        """log p(w | P): PT x V (rows sum to 1 in probability)."""
        _, pt = self.rules.symbols()
        return torch.log_softmax(self.term_out(self.term_mlp(pt)), -1)

    def grammar(self) -> GrammarFactors:
        """The grammar's rules as an engine container, shared by the batch (no batch axis):
        ``DenseGrammar`` (exact, randomized), ``LowRankGrammar`` (low-rank) or ``RankSpaceGrammar``
        (rank-space). Every p(A -> . .) and p(S -> .) is normalized; ``emission()`` gives the terms."""
        return self.rules.grammar(self.root_log_probs())

    # --- inference --------------------------------------------------------------------------
    def sentences(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The words (B x (T-1) long, 0 past each sentence's words; ``<eos>`` is masked by the engine)
        and their lengths n = lengths - 1 (B,) of a text batch. Ids past each length are padding and
        may hold anything (-1 included); those within it must be word ids (``zoo.models.inputs``)."""
        tokens, lengths = token_ids(*batch_inputs(self, batch, self.observation_key), self.vocab_size)
        self._check_eos(tokens, lengths)
        n = lengths - 1  # <eos> is the last token: the grammar generates the words before it
        if (n < 2).any():
            raise ValueError(
                "a PCFG sentence needs at least 2 words before <eos> (a CNF tree's root is a "
                f"nonterminal), got word counts {n.tolist()}: drop shorter sentences "
                "(zoo.data.PCFGDataModule does, as Kim et al. 2019)"
            )
        return tokens[:, : int(n.max())], n

    def _check_eos(self, tokens: Tensor, lengths: Tensor) -> None:
        """With a vocabulary, a ValueError where a sentence's last token is not its ``<eos>`` (the
        grammar generates the words before it: without one, the last word was dropped unseen)."""
        if self.vocab is None:
            return
        last = tokens.gather(1, (lengths.to(tokens.device) - 1).unsqueeze(1)).squeeze(1)
        wrong = (last != self.vocab.eos_id).nonzero().flatten().tolist()
        if wrong:
            raise ValueError(
                f"a PCFG sentence must end with {self.vocab.eos} (id {self.vocab.eos_id}), and sentences "
                f"{wrong[:5]} end with ids {last[wrong[:5]].tolist()} (the grammar generates the words "
                "before the end token: without it, the last word would be dropped unseen). "
                "Encode them with vocab.encode(text, add_eos=True)"
            )

    distribution = renamed("distribution", "posterior")

    def posterior(self, batch: dict, generator: torch.Generator | None = None) -> TreeDistribution:
        """p(tree | sentence) of the batch as a ``TreeDistribution`` over its words (``<eos>`` dropped):
        ``log_partition`` (B,) is log p(words); ``mbr()``, ``argmax``, ``span_marginals`` parse.
        ``generator`` seeds the randomized backend's draws."""
        words, n = self.sentences(batch)
        terms = terminal_scores(self.emission(), words, n)  # B x T x PT
        return TreeDistribution(self.grammar(), terms, n, *self.engine_backend(generator))

    @scoring
    def log_likelihood(self, batch: dict, generator: torch.Generator | None = None) -> Tensor:
        """log p(words) = log Z of each sentence without ``<eos>``: (B,). Differentiable in training
        mode; in eval mode only with ``requires_grad=True`` (else it runs under no_grad:
        ``zoo.models.base.scoring``). For ``randomized`` in training (or in eval when not
        ``evaluation_is_exact()``), the log of the unbiased estimate of p(words)."""
        return self.posterior(batch, generator).log_partition

    def forward(self, batch: dict) -> Tensor:
        """Same as ``log_likelihood``: (B,)."""
        return self.log_likelihood(batch)

    def parse(self, batch: dict, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """MBR trees (CKY over span marginals) of the batch: B x (2T-1) x 2 long (start, end) rows in
        pre-order (-1 padding), and the word counts n (B,). ``generator`` seeds the randomized
        backend's draws (its marginals are estimates). Runs in eval mode (no dropout)."""
        # span marginals are the gradient of log Z
        with evaluating(self), gradients_in_evaluation(batch) as batch:
            dist = self.posterior(batch, generator)
            return dist.mbr().detach(), dist.lengths.detach()

    @decoding
    def sample(
        self, lengths: Tensor | list[int], n: int = 1, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """Sentences drawn from the grammar, ``n`` of each length in ``lengths`` (each >= 2 words):
        words n x B x T long (-1 past each length) and trees n x B x (2T-1) x 3 (start, end, label)."""
        return sample_sentences(self.grammar(), self.emission(), torch.as_tensor(lengths), n, generator)

    def extra_repr(self) -> str:
        extra = f", rank={self.rank}" if self.rank is not None else ""
        if self.k1 is not None:  # randomized
            extra += f", k1={self.k1}, k2={self.k2}, proposal={self.proposal!r}"
        return (
            f"vocab_size={self.vocab_size}, num_nonterminals={self.num_nonterminals}, "
            f"num_preterminals={self.num_preterminals}, backend={self.backend!r}{extra}"
        )
