"""Plain folders of ``.npy`` feature sequences (any frames x dims features: video, audio, sensors).

Layout: ``data_dir/train/``, ``data_dir/valid/``, ``data_dir/test/``, each holding one ``NAME.npy`` per
sequence (a frames x dims numeric array, the same dims everywhere) and, optionally, ``NAME.labels.npy``
beside it: one integer per frame, the known segment label (0, 1, ...; -1 where unknown), which the
segmentation metrics score against. Files are read when a batch needs them (memory-mapped headers give
the lengths), so folders larger than memory work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from zoo.data.segments import SPLITS, SegmentDataModule, SequenceFeatures

__all__ = ["NpyFolderDataModule", "read_npy_folder"]

LABEL_SUFFIX = ".labels.npy"


def read_npy_folder(folder: str | Path) -> SequenceFeatures:
    """The sequences of one folder (sorted by name), with their labels where a labels file exists."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no folder {folder} (expected one NAME.npy frames x dims array per sequence)"
        )
    files = sorted(p for p in folder.glob("*.npy") if not p.name.endswith(LABEL_SUFFIX))
    if not files:
        raise ValueError(f"{folder} holds no .npy sequence (NAME.npy, frames x dims)")
    labels = []
    for path in files:
        label_path = path.with_name(path.stem + LABEL_SUFFIX)
        if not label_path.exists():
            labels.append(None)
            continue
        values = np.load(label_path, allow_pickle=False)
        if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer) or (values < -1).any():
            raise ValueError(
                f"{label_path}: expected one integer label >= -1 per frame (1-D), got shape {values.shape}, "
                f"dtype {values.dtype}"
            )
        labels.append(torch.as_tensor(values.astype(np.int64)))
    any_labels = any(lab is not None for lab in labels)
    return SequenceFeatures(files, labels if any_labels else None, [p.stem for p in files])


class NpyFolderDataModule(SegmentDataModule):
    """Feature sequences from ``data_dir/{train,valid,test}/*.npy`` (module docstring).

    Args:
        data_dir: the folder with the three split folders.
        batch_frames, batch_size, num_workers, seed, transform_frames, predict_split: as
            ``SegmentDataModule``.

    ``num_classes`` is 1 + the largest label of any labels file (None without labels files).
    """

    def __init__(
        self,
        data_dir: str,
        batch_frames: int | None = 20_000,
        batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        transform_frames: int = 100_000,
        predict_split: str = "test",
    ):
        super().__init__(batch_frames, batch_size, num_workers, seed, transform_frames, predict_split)
        missing = [s for s in SPLITS if not (Path(data_dir) / s).is_dir()]
        if missing:
            raise FileNotFoundError(
                f"{data_dir} must hold the folders {list(SPLITS)} of NAME.npy sequences; missing {missing}"
            )
        self.data_dir = data_dir
        self.name = Path(data_dir).name
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        datasets = {split: read_npy_folder(Path(self.data_dir) / split) for split in SPLITS}
        dims = {split: d.dim for split, d in datasets.items()}
        if len(set(dims.values())) != 1:
            raise ValueError(f"every split needs the same feature size, got {dims}")
        labels = [lab for d in datasets.values() for lab in (d.labels or []) if lab is not None]
        self.num_classes = 1 + max(int(lab.max()) for lab in labels) if labels else None
        self.datasets = datasets
