"""``InputProjection``: the fitted linear map from raw frame features to the model's features, kept in
the model's state dict so that a trained model scores new raw sequences (e.g. 3200-dimensional CrossTask
video features -> 200 PCA dimensions) exactly as its training data were scored.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class InputProjection(nn.Module):
    """y = (x - mean) @ matrix: ... x F_in -> ... x F_out, with ``mean`` (F_in) and ``matrix``
    (F_in x F_out) buffers fitted on the training data (``zoo.data.features.fit_feature_transform``)
    and set with ``set``. Until then ``fitted`` is False and ``forward`` raises.

    Args:
        input_dim: F_in, the raw feature size.
        output_dim: F_out, the model's feature size.
    """

    def __init__(self, input_dim: int, output_dim: int):
        super().__init__()
        self.input_dim, self.output_dim = input_dim, output_dim
        self.register_buffer("mean", torch.zeros(input_dim))
        self.register_buffer("matrix", torch.zeros(input_dim, output_dim))
        self.register_buffer("is_fitted", torch.tensor(False))

    @property
    def fitted(self) -> bool:
        return bool(self.is_fitted)

    @torch.no_grad()
    def set(self, mean: Tensor, matrix: Tensor) -> None:
        """Install a fitted transform: mean F_in, matrix F_in x F_out (finite)."""
        mean, matrix = torch.as_tensor(mean), torch.as_tensor(matrix)
        if tuple(mean.shape) != (self.input_dim,) or tuple(matrix.shape) != (self.input_dim, self.output_dim):
            raise ValueError(
                f"an input projection for this model needs mean ({self.input_dim},) and matrix "
                f"({self.input_dim}, {self.output_dim}), got {tuple(mean.shape)} and {tuple(matrix.shape)}"
            )
        if not (torch.isfinite(mean).all() and torch.isfinite(matrix).all()):
            raise ValueError("the input projection's mean and matrix must be finite")
        self.mean.copy_(mean)
        self.matrix.copy_(matrix)
        self.is_fitted.fill_(True)

    def forward(self, features: Tensor) -> Tensor:
        if not self.fitted:
            raise RuntimeError(
                f"the model's input projection ({self.input_dim} -> {self.output_dim} features) has not been "
                "fitted: train with a data module that fits one on its training split (zoo fit does this), "
                "load a trained checkpoint, or call model.input_projection.set(mean, matrix)"
            )
        if features.shape[-1] != self.input_dim:
            raise ValueError(
                f"features must have {self.input_dim} dimensions (the model's input_dim) in the last axis, "
                f"got shape {tuple(features.shape)}"
            )
        return (features.to(self.matrix.dtype) - self.mean) @ self.matrix

    def extra_repr(self) -> str:
        return f"{self.input_dim} -> {self.output_dim}, fitted={self.fitted}"
