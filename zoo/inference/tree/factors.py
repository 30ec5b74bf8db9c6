"""Containers for the rules of a CNF grammar, one per parameterization (see docs/tree-api.md).

A grammar has NT nonterminals and PT preterminals (S = NT + PT symbols, nonterminals first on
every symbol axis). It scores a tree by ``root[A] + sum log psi(A, b, c) + sum terms[t, P]``; the
containers differ in how psi, the binary rule potential, is given:

* ``DenseGrammar``: log psi as a dense NT x S x S tensor (N-PCFG, Kim et al. 2019).
* ``LowRankGrammar``: psi = head . children for productions whose children are both nonterminals,
  dense otherwise (LPCFG, Chiu et al. 2021 Eq. 7).
* ``RankSpaceGrammar``: psi(A, b, c) = sum_r U[A, r] V[b, r] W[c, r] (the TD-PCFG CPD; Yang et al.
  2021b, 2022).

Every grammar tensor may carry a leading batch axis or none (shared by the batch). The terminal
scores of a sentence (``terms``, B x T x PT) are not part of the grammar: they come with the
sentence (``TreeDistribution``), so one grammar serves parsing and generation alike.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.checks import (
    as_dp_tensor,
    check_finite,
    check_lengths,
    check_nonnegative,
    check_same_dtype,
    check_shape,
)
from zoo.inference.numerics import finite_or_zero, safe_log, underflow_safe_exp

#: the most entries a dense NT x S x S rule tensor may have when materialized for an exact fallback
MAX_DENSE_RULES = 1 << 27


def _grammar_tensor(name: str, value: Tensor, shape: tuple, names: str) -> Tensor:
    """Check a (B x) ``shape`` tensor; return it with a batch axis (of size 1 when shared)."""
    value = as_dp_tensor(name, value)
    if value.dim() == len(shape):
        check_shape(name, value, shape, names)
        return value.unsqueeze(0)
    check_shape(name, value, (None, *shape), "B x " + names)
    if value.shape[0] == 0:
        raise ValueError(f"{name} has an empty batch axis: {tuple(value.shape)}")
    return value


class GrammarFactors:
    """Base class: the root log-potentials and the symbol counts every grammar carries.

    Attributes:
        root: G x NT log-potentials of the root label (G = B, or 1 when shared).
    """

    root: Tensor

    @property
    def num_nonterminals(self) -> int:
        return self.root.shape[-1]

    @property
    def num_preterminals(self) -> int:
        raise NotImplementedError

    @property
    def num_symbols(self) -> int:
        return self.num_nonterminals + self.num_preterminals

    @property
    def grammar_batch(self) -> int:
        """G: the batch size of the grammar tensors (1 when one grammar serves every sentence)."""
        return self.root.shape[0]

    def tensors(self) -> list[Tensor]:
        """The grammar's tensors in the order of its constructor's arguments (each subclass sets them
        in that order)."""
        return [t for t in vars(self).values() if isinstance(t, Tensor)]

    def rows(self, rows: Tensor | None, dtype: torch.dtype) -> GrammarFactors:
        """The grammar of the batch rows ``rows`` (None: every row; a shared grammar as it is), in
        ``dtype``."""
        return type(self)(*(self._pick(t, rows).to(dtype) for t in self.tensors()))

    def _pick(self, t: Tensor, rows: Tensor | None) -> Tensor:
        return t if rows is None or self.grammar_batch == 1 else t[rows]

    def _check_root(self, root: Tensor) -> Tensor:
        root = _grammar_tensor("root", root, (None,), "NT")
        if root.shape[-1] == 0:
            raise ValueError("root must have at least one nonterminal, got NT = 0")
        check_finite("root", root)
        return root

    def _common_batch(self, **tensors: Tensor) -> None:
        """Check the grammar tensors' batch sizes (each 1 or one common G) and set every one of them
        as an attribute expanded to G (a view), so that ``grammar_batch`` indexes all alike."""
        sizes = {name: t.shape[0] for name, t in tensors.items()}
        batched = {s for s in sizes.values() if s != 1}
        if len(batched) > 1:
            raise ValueError(f"grammar tensors disagree on the batch size: {sizes}")
        G = batched.pop() if batched else 1
        for name, t in tensors.items():
            setattr(self, name, t.expand(G, *t.shape[1:]))

    def rule_entries(self, g: Tensor, parent: Tensor, left: Tensor, right: Tensor) -> Tensor:
        """log psi(parent, left, right) for broadcastable long index tensors.

        ``g`` indexes the grammar batch (all 0 when the grammar is shared); ``left`` and ``right``
        are symbol indices (0..S-1, nonterminals first).
        """
        raise NotImplementedError

    def rules_block(self, left_nt: bool, right_nt: bool) -> Tensor:
        """G x NT x Sl x Sr log psi over one block of children (nonterminal or preterminal each).

        Used by the exact inside for the blocks with a preterminal child, and by the fallbacks.
        """
        NT = self.num_nonterminals
        rules = self.dense_rules()
        rows = slice(0, NT) if left_nt else slice(NT, None)
        cols = slice(0, NT) if right_nt else slice(NT, None)
        return rules[:, :, rows, cols]

    def dense_rules(self) -> Tensor:
        """G x NT x S x S log psi, materialized (exact fallbacks, cross-backend tests)."""
        raise NotImplementedError

    def dense(self) -> DenseGrammar:
        """The same grammar with its rules materialized densely.

        Raises a ValueError naming the size when NT x S x S exceeds ``MAX_DENSE_RULES`` entries.
        """
        NT, S = self.num_nonterminals, self.num_symbols
        if NT * S * S > MAX_DENSE_RULES:
            raise ValueError(
                f"materializing the NT x S x S = {NT} x {S} x {S} rule tensor "
                f"({NT * S * S:,} entries) exceeds the limit of {MAX_DENSE_RULES:,}"
            )
        return DenseGrammar(self.root, self.dense_rules())


class DenseGrammar(GrammarFactors):
    """Dense rule log-potentials (N-PCFG).

    Args:
        root: (B x) NT log-potentials of the root label (log p(S -> A) for a PCFG).
        rules: (B x) NT x S x S log-potentials of A -> b c (S = NT + PT, nonterminals first).
    Entries may be -inf (a forbidden rule); NaN and +inf are rejected.
    """

    native_backend = Backend.EXACT

    def __init__(self, root: Tensor, rules: Tensor):
        root, rules = as_dp_tensor("root", root), as_dp_tensor("rules", rules)
        check_same_dtype(type(self).__name__, root=root, rules=rules)
        self.root = self._check_root(root)
        NT = self.root.shape[-1]
        rules = _grammar_tensor("rules", rules, (NT, None, None), "NT x S x S (NT from root)")
        S = rules.shape[-1]
        if rules.shape[-2] != S or S <= NT:
            raise ValueError(
                f"rules must have shape (B x) NT x S x S with S = NT + PT > NT = {NT}, "
                f"got {tuple(rules.shape[1:])}"
            )
        check_finite("rules", rules)
        self._common_batch(root=self.root, rules=rules)

    @property
    def num_preterminals(self) -> int:
        return self.rules.shape[-1] - self.num_nonterminals

    def rule_entries(self, g, parent, left, right):
        return self.rules[g, parent, left, right]

    def dense_rules(self) -> Tensor:
        return self.rules

    def dense(self) -> DenseGrammar:
        return self


class LowRankGrammar(GrammarFactors):
    """LPCFG rules (Chiu et al. 2021, Eq. 7): low rank where both children are nonterminals.

    Args:
        root: (B x) NT log-potentials of the root label.
        rules: (B x) NT x S x S log-potentials, used for the productions with a preterminal child
            (its NT x NT block of two nonterminal children is ignored).
        head: (B x) NT x R non-negative features of the parent, phi(u_A).
        children: (B x) NT x NT x R non-negative features of the child pair, phi(v_BC).
    psi(A, B, C) = sum_r head[A, r] children[B, C, r] for nonterminals B, C.
    """

    native_backend = Backend.LOW_RANK

    def __init__(self, root: Tensor, rules: Tensor, head: Tensor, children: Tensor):
        root, rules = as_dp_tensor("root", root), as_dp_tensor("rules", rules)
        head, children = as_dp_tensor("head", head), as_dp_tensor("children", children)
        check_same_dtype(type(self).__name__, root=root, rules=rules, head=head, children=children)
        dense = DenseGrammar(root, rules)
        self.root, self.rules = dense.root, dense.rules
        NT = self.num_nonterminals
        self.head = _grammar_tensor("head", head, (NT, None), "NT x R")
        R = self.head.shape[-1]
        self.children = _grammar_tensor("children", children, (NT, NT, R), "NT x NT x R")
        if R == 0:
            raise ValueError("head and children need a feature dimension R >= 1, got 0")
        check_nonnegative("head", self.head)
        check_nonnegative("children", self.children)
        self._common_batch(root=self.root, rules=self.rules, head=self.head, children=self.children)

    @property
    def num_preterminals(self) -> int:
        return self.rules.shape[-1] - self.num_nonterminals

    @property
    def rank(self) -> int:
        return self.head.shape[-1]

    def rule_entries(self, g, parent, left, right):
        NT = self.num_nonterminals
        both = (left < NT) & (right < NT)
        lo, ro = left.clamp_max(NT - 1), right.clamp_max(NT - 1)
        low_rank = log_of_sum("...r,...r->...", self.head[g, parent], self.children[g, lo, ro])
        return torch.where(both, low_rank, self.rules[g, parent, left, right])

    def dense_rules(self) -> Tensor:
        NT = self.num_nonterminals
        low_rank = log_of_sum("gar,gbcr->gabc", self.head, self.children)
        rules = self.rules.clone()
        rules[:, :, :NT, :NT] = low_rank.expand(rules.shape[0], -1, -1, -1)
        return rules


class RankSpaceGrammar(GrammarFactors):
    """The CPD of the binary rule tensor (TD-PCFG; Yang et al. 2021b, 2022).

    Args:
        root: (B x) NT log-potentials of the root label (log s).
        U: (B x) NT x r non-negative parent factors.
        V: (B x) S x r non-negative left-child factors.
        W: (B x) S x r non-negative right-child factors.
    psi(A, b, c) = sum_r U[A, r] V[b, r] W[c, r]. For a PCFG, Yang et al. normalize U's rows and
    the columns of V and W, which makes every psi(A, ., .) a distribution.
    """

    native_backend = Backend.RANK_SPACE

    def __init__(self, root: Tensor, U: Tensor, V: Tensor, W: Tensor):
        root, U = as_dp_tensor("root", root), as_dp_tensor("U", U)
        V, W = as_dp_tensor("V", V), as_dp_tensor("W", W)
        check_same_dtype(type(self).__name__, root=root, U=U, V=V, W=W)
        self.root = self._check_root(root)
        NT = self.num_nonterminals
        self.U = _grammar_tensor("U", U, (NT, None), "NT x r")
        r = self.U.shape[-1]
        self.V = _grammar_tensor("V", V, (None, r), "S x r")
        S = self.V.shape[-2]
        self.W = _grammar_tensor("W", W, (None, r), "S x r")
        if self.W.shape[-2] != S:  # neither names S: which one is off, the caller knows
            raise ValueError(
                "V and W must have the same number of rows S = NT + PT (the children: nonterminals, then "
                f"preterminals), got {S} rows in V and {self.W.shape[-2]} in W"
            )
        if r == 0 or S <= NT:
            raise ValueError(
                f"U, V, W need rank r >= 1 and S = NT + PT > NT = {NT} rows in V and W, "
                f"got r = {r}, S = {S}"
            )
        for name in ("U", "V", "W"):
            check_nonnegative(name, getattr(self, name))
        self._common_batch(root=self.root, U=self.U, V=self.V, W=self.W)
        self.logs: tuple[Tensor, Tensor, Tensor] | None = None  # log U, V, W when built from them

    @classmethod
    def from_logs(cls, root: Tensor, log_U: Tensor, log_V: Tensor, log_W: Tensor) -> RankSpaceGrammar:
        """The grammar of U = exp(log_U), V = exp(log_V), W = exp(log_W) (shapes as U, V, W), which
        keeps the logs. Where the float32 guard computes a sentence again in float64
        (``guard.guarded``), the factors are exponentiated in float64: an entry below float32's range
        (a softmax's tail) keeps its value there, and the gradient with respect to its log (its expected
        count in the tree) stays finite where the gradient with respect to the entry overflows."""
        root, log_U = as_dp_tensor("root", root), as_dp_tensor("log_U", log_U)
        log_V, log_W = as_dp_tensor("log_V", log_V), as_dp_tensor("log_W", log_W)
        check_same_dtype(cls.__name__, root=root, log_U=log_U, log_V=log_V, log_W=log_W)
        grammar = cls(root, *(underflow_safe_exp(x) for x in (log_U, log_V, log_W)))
        G = grammar.grammar_batch
        grammar.logs = tuple(x.expand(G, *x.shape[-2:]) for x in (log_U, log_V, log_W))
        return grammar

    def rows(self, rows: Tensor | None, dtype: torch.dtype) -> RankSpaceGrammar:
        if self.logs is None:
            return super().rows(rows, dtype)
        return type(self).from_logs(*(self._pick(t, rows).to(dtype) for t in (self.root, *self.logs)))

    @property
    def num_preterminals(self) -> int:
        return self.V.shape[-2] - self.num_nonterminals

    @property
    def rank(self) -> int:
        return self.U.shape[-1]

    def rule_entries(self, g, parent, left, right):
        if self.logs is not None:  # from the logs: an entry whose factors float32 flushes keeps its value
            log_U, log_V, log_W = (x.to(torch.float64) for x in self.logs)
            entries = torch.logsumexp(log_U[g, parent] + log_V[g, left] + log_W[g, right], -1)
            return entries.to(self.U.dtype)
        return log_of_sum("...r,...r,...r->...", self.U[g, parent], self.V[g, left], self.W[g, right])

    def dense_rules(self) -> Tensor:
        if self.logs is None:
            return log_of_sum("gar,gbr,gcr->gabc", self.U, self.V, self.W)
        # from the logs, each row shifted to its maximum: rows below float32's (or float64's) range
        # keep their values, where U, V, W hold zeros
        (U, shift_U), (V, shift_V), (W, shift_W) = (_row_shifted_exp(x) for x in self.logs)
        rules = safe_log(torch.einsum("gar,gbr,gcr->gabc", U, V, W))
        rules = rules + shift_U[:, :, None, None] + shift_V[:, None, :, None] + shift_W[:, None, None, :]
        return rules.to(self.U.dtype)


def _row_shifted_exp(logs: Tensor) -> tuple[Tensor, Tensor]:
    """exp(logs - m) in float64 and the rows' maxima m (G x K x r -> G x K x r, G x K); a row of
    -inf keeps m = 0."""
    logs = logs.to(torch.float64)
    m = finite_or_zero(logs.detach().amax(-1))
    return (logs - m.unsqueeze(-1)).exp(), m


def log_of_sum(equation: str, *factors: Tensor) -> Tensor:
    """log of ``einsum(equation, *factors)`` (non-negative factors), the sum formed in float64 and the
    log returned in the factors' dtype: a product of entries each far below 1 (a softmax's tail)
    underflows float32 (1e-21 squared; log -96.7) where its log does not."""
    dtype = factors[0].dtype
    return safe_log(torch.einsum(equation, *(f.to(torch.float64) for f in factors))).to(dtype)


def terminal_scores(emission: Tensor, words: Tensor, lengths: Tensor | None = None) -> Tensor:
    """terms[b, t, P] = emission[(b,) P, words[b, t]]: the B x T x PT terminal log-scores.

    Args:
        emission: (B x) PT x V log-probabilities of each preterminal emitting each word.
        words: B x T long word ids in 0..V-1; -1 marks padding, only after a sentence's last word
            (its rows of ``terms`` are 0).
        lengths: optional (B,) sentence lengths: then every word inside a length must be a word id.
    """
    emission = as_dp_tensor("emission", emission)
    if not isinstance(words, Tensor) or words.is_floating_point() or words.dim() != 2:
        raise TypeError(f"words must be a B x T integer tensor, got {_describe(words)}")
    if emission.dim() not in (2, 3):
        raise ValueError(f"emission must have shape (B x) PT x V, got {tuple(emission.shape)}")
    B, T = words.shape
    V = emission.shape[-1]
    if emission.dim() == 3 and emission.shape[0] not in (1, B):
        raise ValueError(
            f"emission has batch size {emission.shape[0]} but words has B = {B}"
        )
    bad = (words >= V) | (words < -1)
    if bad.any():
        raise ValueError(
            f"word ids must lie in 0..V-1 = 0..{V - 1} (or -1 as padding), got {words[bad][:5].tolist()}"
        )
    pad = words < 0
    inside = (~pad).flip(-1).int().cummax(-1).values.flip(-1).bool()  # at or before a row's last word
    if lengths is not None:
        lengths = check_lengths(lengths, B, T, words.device).view(B, 1)  # CPU lengths are common
        inside = inside | (torch.arange(T, device=words.device) < lengths)
    if bool((pad & inside).any()):
        b, t = (pad & inside).nonzero()[0].tolist()
        raise ValueError(
            f"word id -1 (padding) at position {t} of sentence {b}, inside the sentence; -1 may only pad "
            "the end of a sentence"
        )
    ids = words.clamp_min(0)
    if emission.dim() == 3 and emission.shape[0] == 1:
        emission = emission[0]
    # the words' columns, read along the rows of PT x V: indexing rows of emission.t() made a transposed
    # copy of the whole table, and one of its gradient (2 x 80 MB a step at PT = 2000, V = 10000)
    if emission.dim() == 2:
        terms = emission.index_select(1, ids.flatten()).t().view(B, T, -1)
    else:
        terms = emission.gather(2, ids.unsqueeze(1).expand(B, emission.shape[1], T)).transpose(1, 2)
    return torch.where(pad.unsqueeze(-1), 0.0, terms)


def _describe(x) -> str:
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__
