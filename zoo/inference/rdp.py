"""Randomized dynamic programming on plain tensors, for every structure (Fu, Cunningham, Lapata 2022):
the options of the randomized backend, the proposals of sequences of positions, the choice of kept
states and the engines' lifecycle. At each position (a chain's position, a semi-Markov boundary, a
tree's span) a proposal q over its N states keeps the top K1 (summed exactly) and K2 states drawn
i.i.d. from q restricted to the rest, renormalized, weighted by 1 / (K2 q_tail) (Eq. 4-8).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.inference.checks import check_shape, first_index

# the chains' named proposals (trees name theirs in zoo.inference.tree.randomized)
PROPOSALS = ("uniform", "local", "global", "local+global")
SAMPLING_ROWS = 64  # positions sampled at a time


@dataclass(frozen=True)
class RDPOptions:
    """Options of the randomized backend.

    Args:
        k1: states summed exactly at each position (the proposal's top K1).
        k2: states sampled at each position from the proposal's tail (0: the top-K baseline).
        proposal: None for the structure's default ("local+global" for chains, "local" for
            trees); "uniform" (its top K1 is then an arbitrary fixed set of states: prefer k1 = 0),
            "local" (softmax of the unary), "global" (each state's incoming transition mass;
            the normalized L1 norm of the state embeddings for an EmbeddingChain), "local+global"
            (their average, Eq. 34), or a B x T x N tensor of positive proposal weights.
            Trees take "uniform", "local" (leaves by their terms) or a span tensor: see
            ``zoo.inference.tree.randomized``.
        generator: a torch.Generator for the index draws and the randomized relaxed samples' Gumbel
            noise (a chain's ``rsample``, Alg. 4), for reproducible runs. The exact fallbacks (``sample``,
            a semi-Markov chain's ``rsample``) draw from their own ``generator`` argument.
    """

    k1: int
    k2: int
    proposal: str | Tensor | None = None
    generator: torch.Generator | None = None

    def __post_init__(self):
        for name in ("k1", "k2"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if self.k1 + self.k2 < 1:
            raise ValueError(f"k1 + k2 must be at least 1, got k1={self.k1}, k2={self.k2}")
        if isinstance(self.proposal, str) and self.proposal not in PROPOSALS:
            raise ValueError(
                f"unknown proposal {self.proposal!r}; expected one of {PROPOSALS} or a tensor of proposal "
                "weights (chains: B x T x N; trees take 'uniform', 'local' or a span tensor)"
            )
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(self.generator).__name__} "
                f"{self.generator!r} (a seed: torch.Generator().manual_seed(seed))"
            )


def check_top_k_proposal(options: RDPOptions, states: int, uniform: tuple[str, ...] = ("uniform",)) -> None:
    """ValueError for the top-K1 baseline (k2 = 0) of fewer than all ``states`` under a proposal that
    is uniform over them (``uniform`` names those; None is the default proposal): it ranks none above
    another, so the K1 kept would be an arbitrary fixed set (silently: Z_hat / Z = 0.03 for a VAE's q,
    7.5e-3 for a tree's default proposal; audits)."""
    o = options
    if o.k2 == 0 and o.k1 < states and (o.proposal is None or isinstance(o.proposal, str)):
        name = "local" if o.proposal is None and "local" in uniform else o.proposal
        if name in uniform:
            raise ValueError(
                f"k2 = 0 (the top-K1 baseline) keeps the proposal's {o.k1} best of {states} states, and the "
                f"{name!r} proposal ranks none above another here (an arbitrary fixed set): give an "
                "informative proposal (a tensor), k2 > 0, or k1 = all states"
            )


@dataclass
class KeptStates:
    """The states the randomized DP keeps: indices B x T x K and log weights B x T x K
    (0 for the top-K1, -log(K2 q_tail) for the sampled)."""

    index: Tensor
    log_weights: Tensor


def select_states(
    log_q: Tensor, k1: int, k2: int, generator: torch.Generator | None = None
) -> KeptStates:
    """Top-K1 of q plus K2 i.i.d. draws from q's renormalized tail (Eq. 5-7), per position.

    ``log_q`` (B x T x N): log-weights of q, unnormalized, -inf for states never kept; in log space so
    that the tail, renormalized against its own largest weight, keeps every state of finite weight
    drawable and the top K1 ordered however far below the kept ones the others lie (probabilities
    underflowed to 0 in float32 for states 104 nats below a position's best: they were never drawn,
    a biased estimate, and the top K1 among such zeros arbitrary). It is overwritten (it becomes the
    tail's log-proposal), to keep the memory at one B x T x N buffer. Where the tail has no state of
    finite weight, the K2 draws there are placeholders of weight 0 (log weight -inf): the tail's
    estimate is 0, exact as its states contribute 0.
    """
    B, T, N = log_q.shape
    if k1 + k2 > N:
        raise ValueError(f"k1 + k2 must be at most N = {N} states, got k1={k1}, k2={k2}")
    top = log_q.topk(k1, -1).indices if k1 > 0 else log_q.new_zeros(B, T, 0, dtype=torch.long)
    index, log_w = [top], [log_q.new_zeros(B, T, k1)]
    if k2 > 0:
        tail = log_q.scatter_(-1, top, float("-inf"))
        empty = torch.isneginf(tail.amax(-1, keepdim=True))
        tail.masked_fill_(empty, 0.0)  # placeholders: uniform
        tail.sub_(tail.logsumexp(-1, keepdim=True))  # log of the renormalized tail
        rows = tail.view(-1, N).split(SAMPLING_ROWS)  # multinomial copies its input: bound it
        drawn = [torch.multinomial(r.exp(), k2, replacement=True, generator=generator) for r in rows]
        drawn = torch.cat(drawn).view(B, T, k2)
        index.append(drawn)
        log_w.append((-math.log(k2) - tail.gather(-1, drawn)).masked_fill_(empty, float("-inf")))
    return KeptStates(torch.cat(index, -1), torch.cat(log_w, -1))


def proposal_weights(
    unary: Tensor,
    init: Tensor,
    state_prior: Callable[[], Tensor],
    proposal: str | Tensor | None,
    first_rows: int = 1,
) -> Tensor:
    """log q_t(i) of a sequence of positions (a chain's, a semi-Markov chain's boundaries): B x T x N
    log-weights, each row unnormalized (None: "local+global"). unary: B x T x N log-potentials; init:
    the first position's log-potentials ((N,) or B x N); state_prior: the global log-prior (N,),
    called only by the proposals that use it. first_rows: the rows whose state can be the sequence's
    first (1 for a chain; D for a semi-Markov chain, whose row t-1 holds the segments ending at frame
    t): "global" adds init's mass there (init alone at row 0), since a state that no transition enters
    can still start a sequence. A position with no state of finite weight is uniform."""
    B, T, N = unary.shape
    proposal = "local+global" if proposal is None else proposal
    if isinstance(proposal, Tensor):
        return log_proposal_tensor(proposal, (B, T, N), "B x T x N", unary)
    if proposal == "uniform":
        return unary.new_zeros(B, T, N)
    if proposal == "global":
        log_q = state_prior().unsqueeze(1).expand(B, T, N).clone()
        log_q[:, 1:first_rows] = torch.logaddexp(log_q[:, 1:first_rows], init.view(-1, 1, N))
        log_q[:, 0] = init
        return uniform_where_empty(log_q)
    log_q = unary.clone()
    log_q[:, 0] += init
    uniform_where_empty(log_q)
    if proposal == "local+global":  # Eq. 34: the average of the two distributions, in log space
        log_prior = uniform_where_empty(state_prior().clone()).log_softmax(-1).unsqueeze(1)
        log_q = torch.logaddexp(log_q.log_softmax(-1), log_prior)
    return log_q


def log_proposal_tensor(proposal: Tensor, shape: tuple, layout: str, like: Tensor) -> Tensor:
    """log q of a caller's proposal: weights of ``shape`` (``layout`` names it), of any dtype (counts
    too), finite and positive everywhere: a state of weight 0 would never be drawn beyond the top K1, so
    Z_hat would miss its mass (biased). Detached, in ``like``'s dtype and device."""
    check_shape("proposal", proposal, shape, layout)
    q = proposal.detach().to(dtype=like.dtype, device=like.device)
    if not bool(torch.isfinite(q).all()):
        raise ValueError(f"proposal weights must be finite, got NaN or inf{first_index(~torch.isfinite(q))}")
    if bool((q <= 0).any()):
        raise ValueError(
            f"proposal weights must be positive, got {q.min().item():.4g}{first_index(q <= 0)}: a state of "
            "weight 0 is never drawn beyond the top K1 and its mass would be missing from the estimate "
            "(give a state you know is impossible a small weight instead)"
        )
    return q.log()


def check_nonzero_estimate(log_z: Tensor, what: str) -> Tensor:
    """``log_z`` (B,), the log of a randomized estimate, or a ValueError where the estimate is 0 (log -inf):
    ``what`` is derived from it (marginals, an entropy) and is undefined there."""
    dead = torch.isneginf(log_z.detach())
    if bool(dead.any()):
        raise ValueError(
            f"the randomized estimate Z_hat is 0 for batch elements {dead.nonzero().flatten().tolist()} "
            f"(every state kept there died, or the structure has no non-zero path): its {what} undefined; "
            "keep more states (k1, k2), use an informative proposal, or the exact backend"
        )
    return log_z


def uniform_where_empty(log_q: Tensor) -> Tensor:
    """``log_q`` with every row that has no finite entry (a position no state can take: the structure
    has zero probability there) set to zeros, uniform, so that states are still drawn; in place."""
    return log_q.masked_fill_(torch.isneginf(log_q.amax(-1, keepdim=True)), 0.0)


class RandomizedLifecycle:
    """What every structure's randomized engine shares: its ``RDPOptions`` and its kept states, drawn
    once per engine (``draw``, under ``no_grad``) so that all estimates of one distribution share one DP
    graph and one draw."""

    def __init__(self, options: RDPOptions):
        self.options = options
        self._kept: Any = None

    def kept_states(self, *inputs):
        """The engine's draw of kept states for ``inputs`` (the first call draws it)."""
        if self._kept is None:
            with torch.no_grad():
                self._kept = self.draw(*inputs)
        return self._kept

    def draw(self, *inputs):
        """The kept states of the structure's positions (a ``KeptStates`` or the structure's own)."""
        raise NotImplementedError


class SequenceLifecycle(RandomizedLifecycle):
    """The lifecycle of the randomized engines over sequences of positions (chains; semi-Markov
    boundaries): the kept states come from ``proposal_weights`` of the factors' unary, init and state
    prior (read inside each length), drawn when the engine prepares its factors."""

    def draw(self, factors, lengths: Tensor | None = None) -> KeptStates:
        """Index sets B x T x K (a semi-Markov chain's row t-1 is its boundary at frame t)."""
        o = self.options
        check_top_k_proposal(o, factors.unary.shape[-1])
        log_q = proposal_weights(
            factors.unary,
            factors.init,
            lambda: factors.state_prior(lengths),
            o.proposal,
            first_rows=getattr(factors, "max_duration", 1),  # a semi-Markov chain's first segment
        )
        return select_states(log_q, o.k1, o.k2, o.generator)

    def prepare(self, factors, lengths=None):
        factors = super().prepare(factors, lengths)
        self.kept_states(factors, lengths)
        return factors
