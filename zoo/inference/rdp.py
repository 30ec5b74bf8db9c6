"""Randomized dynamic programming on plain tensors, for every structure (Fu, Cunningham, Lapata 2022):
the options of the randomized backend and the choice of kept states. At each position (a chain's
position, a tree's span) a proposal q over its N states keeps the top K1 (summed exactly) and K2
states drawn i.i.d. from q restricted to the rest, renormalized, weighted by 1 / (K2 q_tail) (Eq. 4-8).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

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
            (their average, Eq. 34), or a B x T x N tensor of non-negative proposal weights.
            Trees take "uniform", "local" (leaves by their terms) or a span tensor: see
            ``zoo.inference.tree.randomized``.
        generator: a torch.Generator for the index draws and Gumbel noise (reproducible runs).
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
                f"unknown proposal {self.proposal!r}; expected one of {PROPOSALS} or a B x T x N tensor"
            )


@dataclass
class KeptStates:
    """The states the randomized DP keeps: indices B x T x K and log weights B x T x K
    (0 for the top-K1, -log(K2 q_tail) for the sampled)."""

    index: Tensor
    log_weights: Tensor


def select_states(
    q: Tensor, k1: int, k2: int, generator: torch.Generator | None = None
) -> KeptStates:
    """Top-K1 of q plus K2 i.i.d. draws from q's renormalized tail (Eq. 5-7), per position.

    ``q`` (B x T x N) is overwritten (it becomes the tail proposal), to keep the memory at one
    B x T x N buffer.
    """
    B, T, N = q.shape
    if k1 + k2 > N:
        raise ValueError(f"k1 + k2 must be at most N = {N} states, got k1={k1}, k2={k2}")
    top = q.topk(k1, -1).indices if k1 > 0 else q.new_zeros(B, T, 0, dtype=torch.long)
    index, log_w = [top], [q.new_zeros(B, T, k1)]
    if k2 > 0:
        tail = q.scatter_(-1, top, 0.0)
        mass = tail.sum(-1, keepdim=True)
        if (mass <= 0).any():
            raise ValueError(
                "the proposal gives no mass to the states outside its top k1; "
                "use a proposal with full support or k2 = 0"
            )
        tail.div_(mass)
        rows = tail.view(-1, N).split(SAMPLING_ROWS)  # multinomial copies its input: bound it
        drawn = [torch.multinomial(r, k2, replacement=True, generator=generator) for r in rows]
        drawn = torch.cat(drawn).view(B, T, k2)
        index.append(drawn)
        log_w.append(-(k2 * tail.gather(-1, drawn)).log())
    return KeptStates(torch.cat(index, -1), torch.cat(log_w, -1))
