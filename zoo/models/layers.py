"""Building blocks of the neural parameterizations: residual MLPs and the LHMM feature map.

Shapes: D embedding size, H hidden width of a residual block, R number of features (rank).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def embedding_table(rows: int, dim: int) -> nn.Parameter:
    """A rows x dim table of learned embeddings (symbols, states, ranks), Xavier-normal initialized."""
    return nn.Parameter(nn.init.xavier_normal_(torch.empty(rows, dim)))


class ResidualBlock(nn.Module):
    """g(y) = y + ReLU(V ReLU(U y)) (Kim et al. 2019; Yang et al. 2022, App. A-B): ... x D -> ... x D.

    Args:
        dim: D, the input and output size.
        hidden_dim: H, the inner width.
        dropout: dropout on the inner activations and on the residual branch.
    """

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0):
        super().__init__()
        self.inner = nn.Linear(dim, hidden_dim)
        self.outer = nn.Linear(hidden_dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, y: Tensor) -> Tensor:
        h = self.dropout(torch.relu(self.inner(y)))
        return y + self.dropout(torch.relu(self.outer(h)))


class ResidualMLP(nn.Module):
    """h(x) = g(...g(W x)) with ``num_blocks`` residual blocks g: ... x D -> ... x D.

    Args:
        dim: D, the input and output size.
        hidden_dim: H, the inner width of each block.
        num_blocks: number of residual blocks (2 in the papers).
        dropout: dropout inside the blocks.
    """

    def __init__(self, dim: int, hidden_dim: int, num_blocks: int = 2, dropout: float = 0.0):
        super().__init__()
        self.project = nn.Linear(dim, dim)
        self.blocks = nn.Sequential(*(ResidualBlock(dim, hidden_dim, dropout) for _ in range(num_blocks)))

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.project(x))


def orthogonal_random_features(rows: int, dim: int, generator: torch.Generator | None = None) -> Tensor:
    """rows x dim matrix of orthogonal random features (Choromanski et al. 2020): blocks of D
    orthonormal rows, each row rescaled to the norm of a D-dimensional standard Gaussian vector."""
    blocks = []
    for _ in range(math.ceil(rows / dim)):
        q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=generator))
        blocks.append(q.T)
    w = torch.cat(blocks)[:rows]
    norms = torch.randn(rows, dim, generator=generator).norm(dim=-1, keepdim=True)
    return w * norms


class ExpFeatureMap(nn.Module):
    """The LHMM feature map phi(x) = exp(W x) (Chiu et al. 2021, Sec. 4): ... x D -> ... x R, positive.

    W (R x D) starts as orthogonal random features scaled by D^(-1/2) and is trained. A constant
    shift (detached) keeps exp in range: per row (``shift="row"``, for features that a row
    normalization cancels: phi(u_i) of the previous state) or one global shift (``shift="global"``,
    for phi(v_j), where only a constant common to all rows cancels). Either way the transition
    p(j | i) = phi(u_i) . phi(v_j) / sum_k phi(u_i) . phi(v_k) is unchanged.

    Args:
        dim: D, the input size.
        num_features: R, the feature size (the rank of the transition matrix).
    """

    def __init__(self, dim: int, num_features: int):
        super().__init__()
        self.weight = nn.Parameter(orthogonal_random_features(num_features, dim) / math.sqrt(dim))

    def forward(self, x: Tensor, shift: str = "row") -> Tensor:
        logits = x @ self.weight.T
        if shift == "row":
            m = logits.detach().amax(-1, keepdim=True)
        elif shift == "global":
            m = logits.detach().amax()
        else:
            raise ValueError(f"shift must be 'row' or 'global', got {shift!r}")
        return (logits - m).exp()
