"""Continuous frame features: the batch collator and the fitted input transform (PCA or standardization).

Batches (docs/training-api.md): ``{"features": B x T x F float32 (zeros past each length), "lengths": B,
"index": B (position in the split)}`` plus ``"labels"``: B x T long, the known segment label of each frame
(``IGNORE_LABEL`` = -1 where unknown and past each length), when some sequence of the batch has labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["IGNORE_LABEL", "collate_features", "fit_feature_transform"]

IGNORE_LABEL = -1


def collate_features(items: Sequence[dict[str, Any]]) -> dict[str, Tensor]:
    """Items ``{"features": T_i x F, "labels": T_i long or None, "index": int}`` -> a padded batch
    (module docstring)."""
    if not items:
        raise ValueError("cannot collate an empty batch")
    features = [torch.as_tensor(item["features"]) for item in items]
    if any(f.dim() != 2 or f.shape[1] != features[0].shape[1] or len(f) < 1 for f in features):
        raise ValueError(
            "feature sequences must be T x F with one F and T >= 1, got shapes "
            f"{[tuple(f.shape) for f in features]}"
        )
    lengths = torch.tensor([len(f) for f in features], dtype=torch.long)
    B, T, F = len(features), int(lengths.max()), features[0].shape[1]
    batch = {
        "features": torch.zeros(B, T, F, dtype=torch.float32),
        "lengths": lengths,
        "index": torch.tensor([int(item["index"]) for item in items], dtype=torch.long),
    }
    for b, f in enumerate(features):
        batch["features"][b, : len(f)] = f
    if any(item.get("labels") is not None for item in items):
        labels = torch.full((B, T), IGNORE_LABEL, dtype=torch.long)
        for b, item in enumerate(items):
            if item.get("labels") is not None:
                labels[b, : len(features[b])] = torch.as_tensor(item["labels"], dtype=torch.long)
        batch["labels"] = labels
    return batch


def fit_feature_transform(frames: np.ndarray, output_dim: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """The linear map (mean F_in, matrix F_in x F_out) that ``zoo.models.InputProjection`` applies.

    ``output_dim == F_in``: standardization, matrix = diag(1 / std); a constant dimension (every training
    frame equal there) keeps scale 1, any other is scaled however small its spread (a signal in small
    units: std 3e-9 was once taken for constant).
    ``output_dim < F_in``: whitened PCA (``sklearn.decomposition.PCA(whiten=True)``, as in the HSMM video
    papers' 200-dimensional projection of CrossTask features), matrix = components^T / sqrt(explained
    variance), so every output dimension has unit variance on the training frames.

    Args:
        frames: n x F_in training frames (a sample of them for large sets).
        output_dim: F_out, at most F_in and at most n for PCA.
        seed: the randomized SVD's seed.
    """
    frames = np.asarray(frames, dtype=np.float64)
    if frames.ndim != 2 or len(frames) < 2:
        raise ValueError(f"need an n x F array of at least 2 training frames, got shape {frames.shape}")
    n, F_in = frames.shape
    if not isinstance(output_dim, int) or not 1 <= output_dim <= F_in:
        raise ValueError(f"output_dim must be an int in 1..{F_in} (the raw feature size), got {output_dim!r}")
    if not np.isfinite(frames).all():
        raise ValueError("the training frames contain NaN or inf: clean the feature files first")
    mean = frames.mean(0)
    if output_dim == F_in:
        std = frames.std(0)
        constant = frames.max(0) == frames.min(0)
        matrix = np.diag(1.0 / np.where(constant, 1.0, std))
    else:
        if output_dim > n:
            raise ValueError(f"a PCA to {output_dim} dimensions needs at least {output_dim} frames, got {n}")
        from sklearn.decomposition import PCA

        pca = PCA(n_components=output_dim, whiten=True, random_state=seed).fit(frames)
        mean = pca.mean_
        matrix = pca.components_.T / np.sqrt(np.maximum(pca.explained_variance_, 1e-12))
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(matrix, dtype=torch.float32)
