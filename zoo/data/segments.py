"""Feature sequences with optional known segments, for ``zoo.tasks.SegmentationTask``: the dataset and the
shared data module of the smartwatch, CrossTask and ``.npy`` folder readers.

Batches are ``zoo.data.features.collate_features``'s: ``{"features": B x T x F float, "lengths": B,
"index": B, "labels": B x T long (-1 unknown)}`` (docs/training-api.md). The features are the raw ones
(``input_dim`` = F); the model maps them with its own fitted ``input_projection``, which
``fit_feature_transform`` computes from the training split when ``zoo fit`` starts (the task asks for
it), so a trained model scores new raw sequences the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from zoo.data.datamodule import SequenceDataModule
from zoo.data.features import collate_features, fit_feature_transform
from zoo.models.projection import standardize_each

__all__ = ["SegmentDataModule", "SequenceFeatures", "load_feature_file"]

log = logging.getLogger(__name__)


def load_feature_file(path: Path, mmap: bool = False) -> np.ndarray:
    """A T x F float feature array from a ``.npy`` file, with a clear error for anything else."""
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a readable .npy array ({type(e).__name__}: {e})") from None
    if (
        array.ndim != 2
        or array.shape[0] < 1
        or array.shape[1] < 1
        or not np.issubdtype(array.dtype, np.number)
        or np.iscomplexobj(array)  # its imaginary part would be dropped
    ):
        raise ValueError(
            f"{path}: expected a numeric frames x dims array, got shape {array.shape}, dtype {array.dtype}"
        )
    return array


class SequenceFeatures(Dataset):
    """Feature sequences (in memory, or ``.npy`` files read when an item is requested) with optional
    per-frame labels; item ``i`` is ``{"features": T_i x F float32, "labels": T_i long or None, "index": i}``.

    Args:
        sources: per sequence a T_i x F tensor / array, or the path of a ``.npy`` file holding one.
        labels: per sequence a T_i long tensor (-1 unknown) or None; None: no labels at all.
        names: per sequence a name (file stem, video id, recording).
    """

    def __init__(self, sources: list, labels: list | None, names: list[str]):
        if not sources:
            raise ValueError("a split needs at least one sequence, got none")
        if labels is not None and len(labels) != len(sources) or len(names) != len(sources):
            raise ValueError(
                f"{len(sources)} sequences but {len(labels or [])} label lists / {len(names)} names"
            )
        self.sources, self.labels, self.names = sources, labels, names
        shapes = [self._shape(s) for s in sources]
        self.lengths = torch.tensor([t for t, _ in shapes], dtype=torch.long)
        by_dim: dict[int, list[str]] = {}
        for i, (_, f) in enumerate(shapes):
            by_dim.setdefault(f, []).append(self.where(i))
        if len(by_dim) != 1:
            groups = [
                f"{f} in {len(where)} ({', '.join(where[:3])}{', ...' if len(where) > 3 else ''})"
                for f, where in sorted(by_dim.items(), key=lambda item: -len(item[1]))
            ]
            raise ValueError(f"every sequence needs the same feature size, got {' and '.join(groups)}")
        (self.dim,) = by_dim
        for i, lab in enumerate(labels or []):
            if lab is not None and tuple(lab.shape) != (shapes[i][0],):
                raise ValueError(
                    f"{self.where(i)}: {shapes[i][0]} frames but labels of shape {tuple(lab.shape)}"
                )

    @staticmethod
    def _shape(source) -> tuple[int, int]:
        if isinstance(source, (str, Path)):
            return tuple(load_feature_file(Path(source), mmap=True).shape)
        return tuple(source.shape)

    def where(self, i: int) -> str:
        """Sequence ``i`` for messages: its file, or its name."""
        source = self.sources[i]
        return str(source) if isinstance(source, (str, Path)) else f"sequence {self.names[i]!r}"

    def check_finite(self, i: int, rows: np.ndarray, frames: np.ndarray | None = None) -> None:
        """A ValueError naming sequence ``i`` (its file) when ``rows`` of it (its ``frames``; None: all)
        hold NaN or inf."""
        if not np.isfinite(rows).all():
            bad = np.flatnonzero(~np.isfinite(rows).all(-1))
            first = bad[0] if frames is None else frames[bad[0]]
            raise ValueError(
                f"{self.where(i)}: features must be finite, got NaN or inf in {len(bad)} frame(s) "
                f"(first at frame {first}): clean the data first (features are read as float32: a value "
                "beyond its range, +-3.4e38, is inf)"
            )

    def features(self, i: int) -> Tensor:
        source = self.sources[i]
        if isinstance(source, (str, Path)):
            source = load_feature_file(Path(source))
        features = np.asarray(source, dtype=np.float32)
        self.check_finite(i, features)
        return torch.as_tensor(features)

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, i: int) -> dict:
        labels = None if self.labels is None else self.labels[i]
        return {"features": self.features(i), "labels": labels, "index": i}

    def sample_frames(self, max_frames: int, seed: int, per_sequence: bool = False) -> np.ndarray:
        """Up to ``max_frames`` frames drawn uniformly without replacement over all sequences: n x F
        (``per_sequence``: from each sequence standardized by its own statistics,
        ``zoo.models.projection.standardize_each``)."""
        total = int(self.lengths.sum())
        rng = np.random.default_rng(seed)
        chosen = np.sort(rng.choice(total, size=min(total, max_frames), replace=False))
        offsets = np.concatenate([[0], np.cumsum(self.lengths.numpy())])
        parts = []
        for i in range(len(self)):
            mine = chosen[(chosen >= offsets[i]) & (chosen < offsets[i + 1])] - offsets[i]
            if len(mine):  # from a file, only the chosen rows are read (memory-mapped)
                rows = self.sources[i]
                if isinstance(rows, (str, Path)):
                    rows = load_feature_file(Path(rows), mmap=True)
                if per_sequence:
                    rows = np.array(rows, dtype=np.float32)  # read whole (a memory map is read-only)
                    self.check_finite(i, rows)  # one NaN would spread over its whole sequence
                    rows = standardize_each(torch.as_tensor(rows)).numpy()
                parts.append(np.asarray(rows[mine], dtype=np.float32))
                self.check_finite(i, parts[-1], mine)
        return np.concatenate(parts)


class SegmentDataModule(SequenceDataModule):
    """Base of the segmentation data modules: a subclass fills ``datasets`` (``SequenceFeatures``) in
    ``setup`` and sets ``num_classes`` (the number of known segment labels; None without labels).

    Args:
        batch_frames: at most this many padded frames (B x T) a batch.
        batch_size: at most this many sequences a batch.
        num_workers, seed: as ``SequenceDataModule``.
        transform_frames: at most this many training frames (a seeded uniform sample) fit the input
            transform (``fit_feature_transform``).
        predict_split: the split ``zoo predict`` segments ("train", "valid" or "test").
    """

    collate_fn = staticmethod(collate_features)
    num_classes: int | None = None

    def __init__(
        self,
        batch_frames: int | None,
        batch_size: int | None,
        num_workers: int = 0,
        seed: int = 0,
        transform_frames: int = 100_000,
        predict_split: str = "test",
    ):
        super().__init__(batch_frames, batch_size, num_workers, seed, predict_split)
        if not isinstance(transform_frames, int) or transform_frames < 2:
            raise ValueError(f"transform_frames must be an int >= 2, got {transform_frames!r}")
        self.transform_frames = transform_frames

    @property
    def input_dim(self) -> int:
        """F, the raw feature size of every sequence."""
        self.setup()
        return self.datasets["train"].dim

    def fit_feature_transform(self, output_dim: int, per_sequence: bool = False) -> tuple[Tensor, Tensor]:
        """(mean F, matrix F x output_dim) fitted on the training split: standardization when
        output_dim == F, else whitened PCA (``zoo.data.features.fit_feature_transform``); with
        ``per_sequence``, on training sequences each standardized by its own statistics (the input
        projection's ``per_sequence``)."""
        self.setup()
        frames = self.datasets["train"].sample_frames(self.transform_frames, self.seed, per_sequence)
        log.info(
            "fitting the input transform (%d -> %d) on %d training frames",
            frames.shape[1],
            output_dim,
            len(frames),
        )
        return fit_feature_transform(frames, output_dim, self.seed)

    def predict_names(self) -> list[str]:
        """The names of the predicted split's sequences, by ``index``."""
        self.setup()
        return self.datasets[self.predict_split].names

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_split, train=False)
