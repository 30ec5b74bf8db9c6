"""``InputProjection``: the fitted linear map from raw frame features to the model's features, kept in
the model's state dict so that a trained model scores new raw sequences (e.g. 3200-dimensional CrossTask
video features -> 200 PCA dimensions) exactly as its training data were scored; optionally after
standardizing each sequence by its own statistics (``standardize_each``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def standardize_each(features: Tensor, lengths: Tensor | None = None) -> Tensor:
    """Each sequence minus its own mean, divided by its own standard deviation, per dimension over its
    frames before its length (a dimension constant within a sequence becomes 0; padding frames become
    0): B x T x F, or T x F for one whole sequence, in the features' dtype. lengths: B (None: every
    frame counts). The statistics are taken in float64 (float32 on MPS, which has no float64), and a
    constant dimension is found by comparing its frames, not by its std: the mean of a constant such as
    0.1 in float32 has a rounding error that dividing by its std would scale up to +-1."""
    x = features.unsqueeze(0) if features.dim() == 2 else features
    x = x.float() if x.device.type == "mps" else x.double()
    B, T, _ = x.shape
    if lengths is None:
        lengths = torch.full((B,), T, device=x.device)
    within = (torch.arange(T, device=x.device).view(1, T) < lengths.to(x.device).view(B, 1)).unsqueeze(-1)
    count = within.sum(1, keepdim=True).clamp(min=1)
    mean = (x * within).sum(1, keepdim=True) / count
    centered = (x - mean) * within
    std = (centered.square().sum(1, keepdim=True) / count).sqrt()
    highest = torch.where(within, x, -torch.inf).amax(1, keepdim=True)
    lowest = torch.where(within, x, torch.inf).amin(1, keepdim=True)
    varies = highest > lowest
    scaled = torch.where(varies, centered / torch.where(varies, std, 1.0), 0.0).to(features.dtype)
    return scaled.squeeze(0) if features.dim() == 2 else scaled


class InputProjection(nn.Module):
    """y = (x - mean) @ matrix: ... x F_in -> ... x F_out, with ``mean`` (F_in) and ``matrix``
    (F_in x F_out) buffers fitted on the training data (``zoo.data.features.fit_feature_transform``)
    and set with ``set``. Until then ``fitted`` is False and ``forward`` raises.

    With ``per_sequence`` each sequence is first standardized by its own statistics
    (``standardize_each``: a recording's offsets and scale, e.g. a subject's or a sensor's, are removed
    before the fitted map, which is then fitted on sequences standardized the same way).

    Args:
        input_dim: F_in, the raw feature size.
        output_dim: F_out, the model's feature size.
        per_sequence: standardize each sequence by its own mean and standard deviation first.
    """

    def __init__(self, input_dim: int, output_dim: int, per_sequence: bool = False):
        super().__init__()
        self.input_dim, self.output_dim, self.per_sequence = input_dim, output_dim, per_sequence
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

    def forward(self, features: Tensor, lengths: Tensor | None = None) -> Tensor:
        """... x F_in -> ... x F_out; lengths (B) mark each sequence's frames for ``per_sequence``
        (None: every frame)."""
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
        features = features.to(self.matrix.dtype)
        if self.per_sequence:
            features = standardize_each(features, lengths)
        return (features - self.mean) @ self.matrix

    def extra_repr(self) -> str:
        each = ", per_sequence=True" if self.per_sequence else ""
        return f"{self.input_dim} -> {self.output_dim}{each}, fitted={self.fitted}"
