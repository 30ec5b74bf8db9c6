"""Plain folders of ``.npy`` feature sequences (any frames x dims features: video, audio, sensors).

Layout: ``data_dir/train/``, ``data_dir/valid/``, ``data_dir/test/``, each holding one ``NAME.npy`` per
sequence (a frames x dims numeric array, the same dims everywhere) and, optionally, ``NAME.labels.npy``
beside it: one integer per frame, the known segment label (0, 1, ...; -1 where unknown), which the
segmentation metrics score against. Other arrays (``NAME.NPY``, ``.npz``) and sub-folders are not read
(a warning names them); a labels file without its ``NAME.npy`` is an error. Files are read when a batch
needs them (memory-mapped headers give the lengths), so folders larger than memory work. The same
sequences can come through Hugging Face ``datasets`` instead (``hf_dataset``: a Hub id or local JSON /
parquet files with one sequence a row, ``zoo.data.hf_source``); they are then held in memory.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.data.datamodule import SPLITS
from zoo.data.hf_source import load_feature_sequences, replacing
from zoo.data.left_out import few
from zoo.data.segments import SegmentDataModule, SequenceFeatures, load_feature_file

__all__ = ["NpyFolderDataModule", "read_npy_folder"]

LABEL_SUFFIX = ".labels.npy"


def frame_labels(values: np.ndarray, where: str, frames: int | None = None) -> torch.Tensor:
    """Known segment labels as a long tensor: one integer >= -1 per frame (``frames`` of them, when
    given); ValueError naming ``where`` otherwise."""
    shape_ok = values.ndim == 1 and (frames is None or len(values) == frames)
    if not shape_ok or not np.issubdtype(values.dtype, np.integer):
        expected = "(1-D)" if frames is None else f"({frames})"
        raise ValueError(
            f"{where}: expected one integer label >= -1 per frame {expected}, got shape {values.shape}, "
            f"dtype {values.dtype}"
        )
    below = np.flatnonzero(values < -1)
    if len(below):
        raise ValueError(
            f"{where}: expected labels >= -1 (-1: unknown), got {values[below[0]]} at frame {below[0]} "
            f"({len(below)} frame(s) below -1)"
        )
    return torch.as_tensor(values.astype(np.int64))


def frames_tensor(values, where: str) -> torch.Tensor:
    """A row of frames of numbers (a ``datasets`` cell) as a frames x dims float32 tensor; ValueError
    naming ``where`` for anything else (a frame of another width: the frame)."""
    if values is None:
        raise ValueError(f"{where}: expected frames x dims numbers, got a null cell")
    try:
        array = np.asarray(values, dtype=np.float32)
    except (ValueError, TypeError) as error:  # e.g. frames of different widths: name the first such
        other = odd_frame(values) or error
        raise ValueError(f"{where}: expected frames x dims numbers, got {other}") from None
    if array.ndim != 2 or len(array) == 0:
        raise ValueError(f"{where}: expected frames x dims numbers, got shape {array.shape}")
    return torch.from_numpy(array)


def odd_frame(values) -> str | None:
    """For messages: the first frame of a row unlike its frame 0 (another width, or no list), or what
    the row is when it is no list of frames; None when every frame looks alike."""
    if not isinstance(values, list | tuple):
        return f"a {type(values).__name__}, not a list of frames"
    widths = [len(frame) if isinstance(frame, list | tuple) else None for frame in values]
    for t, width in enumerate(widths):
        if width != widths[0]:
            numbers = ["no list of numbers" if w is None else f"{w} numbers" for w in (width, widths[0])]
            return f"frame {t} with {numbers[0]}, frame 0 with {numbers[1]}"
    return None


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
    names = {path.stem for path in files}
    orphans = [
        p.name for p in sorted(folder.glob(f"*{LABEL_SUFFIX}")) if p.name[: -len(LABEL_SUFFIX)] not in names
    ]
    if orphans:
        raise ValueError(
            f"{folder}: labels without their features (NAME{LABEL_SUFFIX} needs NAME.npy): {few(orphans)}"
        )
    unread = sorted(  # arrays that look meant as sequences but are not read
        p.name + "/" * p.is_dir()
        for p in folder.iterdir()
        if p.is_dir() or (p.suffix.lower() in (".npy", ".npz") and p.suffix != ".npy")
    )
    if unread:
        message = "not read (one NAME.npy a sequence, lower-case, in the folder itself)"
        warnings.warn(f"{folder}: {message}: {few(unread)}", stacklevel=2)
    labels = []
    for path in files:
        label_path = path.with_name(path.stem + LABEL_SUFFIX)
        if not label_path.exists():
            labels.append(None)
            continue
        frames = len(load_feature_file(path, mmap=True))  # named with the labels file where they differ
        labels.append(frame_labels(np.load(label_path, allow_pickle=False), str(label_path), frames))
    any_labels = any(lab is not None for lab in labels)
    return SequenceFeatures(files, labels if any_labels else None, [p.stem for p in files])


def read_feature_rows(source: dict, split: str) -> SequenceFeatures:
    """The sequences of one split of a ``datasets`` source (``zoo.data.hf_source``), named by their row
    number, with their labels if the source names a labels column."""
    rows, label_rows = load_feature_sequences(source, split)
    if not rows:
        raise ValueError(f"hf_dataset split {split!r} holds no sequence")
    features, labels = [], []
    for i, row in enumerate(rows):
        features.append(frames_tensor(row, f"hf_dataset {split} row {i}"))
        if label_rows is None:
            continue
        if label_rows[i] is None:  # an unlabelled sequence, as a folder's without a labels file
            labels.append(None)
            continue
        labels.append(
            frame_labels(np.asarray(label_rows[i]), f"hf_dataset {split} row {i}", len(features[-1]))
        )
    return SequenceFeatures(
        features, labels if label_rows is not None else None, [str(i) for i in range(len(rows))]
    )


class NpyFolderDataModule(SegmentDataModule):
    """Feature sequences from ``data_dir/{train,valid,test}/*.npy`` or a ``datasets`` source (module
    docstring).

    Args:
        data_dir: the folder with the three split folders.
        hf_dataset: instead of ``data_dir``, a ``datasets`` source of one sequence a row
            (``zoo.data.hf_source``: the ``features`` column, optional ``labels``).
        batch_frames, batch_size, num_workers, seed, transform_frames, predict_split: as
            ``SegmentDataModule``.

    ``num_classes`` is 1 + the largest label of any labels file (None without labels files).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        hf_dataset: dict | None = None,
        batch_frames: int | None = 20_000,
        batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        transform_frames: int = 100_000,
        predict_split: str = "test",
    ):
        super().__init__(batch_frames, batch_size, num_workers, seed, transform_frames, predict_split)
        self.hf_dataset = replacing(hf_dataset, "data_dir", data_dir)
        if self.hf_dataset is None:
            if data_dir is None:
                raise ValueError(
                    "give data_dir (a folder of train / valid / test .npy sequences) or hf_dataset"
                )
            missing = [s for s in SPLITS if not (Path(data_dir) / s).is_dir()]
            if missing:
                raise FileNotFoundError(
                    f"{data_dir} must hold the folders {list(SPLITS)} of NAME.npy sequences; "
                    f"missing {missing}"
                )
        self.data_dir = data_dir
        self.name = Path(data_dir).name if data_dir is not None else str(self.hf_dataset["path"])
        self.save_hyperparameters()

    @classmethod
    def dataset_name(cls, args: dict[str, Any]) -> str:
        """The user's own features by their folder's name."""
        return Path(args["data_dir"]).name if args.get("data_dir") else super().dataset_name(args)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.hf_dataset is not None:
            datasets = {split: read_feature_rows(self.hf_dataset, split) for split in SPLITS}
        else:
            datasets = {split: read_npy_folder(Path(self.data_dir) / split) for split in SPLITS}
        dims = {split: d.dim for split, d in datasets.items()}
        if len(set(dims.values())) != 1:
            raise ValueError(f"every split needs the same feature size, got {dims}")
        labels = [lab for d in datasets.values() for lab in (d.labels or []) if lab is not None]
        self.num_classes = 1 + max(int(lab.max()) for lab in labels) if labels else None
        self.datasets = datasets
