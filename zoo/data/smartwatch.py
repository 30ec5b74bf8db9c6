"""The seglearn smartwatch exercise recordings as segmentation data (the HSMM family's embedded default).

``seglearn==1.2.5`` ships ``seglearn/data/watch_dataset.npy`` (BSD-3; read directly, seglearn itself is
not imported): 140 recordings of a 6-axis wrist IMU (accelerometer and gyroscope) at 50 Hz, each one
exercise of 7 (``y``), by 10 subjects wearing the watch on either side. The 7
recordings of one subject and side are concatenated in file order into one sequence with 7 known
segments: 20 sequences.

Downsampling: each recording is cut into windows of ``window`` frames (25 = 0.5 s by default; an
incomplete last window is dropped) and each window becomes one frame of 12 features, the mean and the
standard deviation of each axis over the window (the mean alone loses the oscillation that tells
exercises apart). Every frame is labelled with its recording's exercise (0..6). With the default window
the sequences have 260..640 frames and segments 37..104 frames.

Split by subject (no subject in two splits): a seeded permutation of the 10 subjects gives 7 training
(14 sequences), 1 validation (2) and 2 test subjects (4).

Your own recordings in this format come through ``hf_dataset`` (``zoo.data.hf_source``): one
recording a row, its samples x axes in the ``features`` column and a label a sample in ``labels``
(-1: unknown), the splits the source's own. They are pooled into windows as above; a frame takes the
label of its window's middle sample.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch

from zoo.data.hf_source import check_source
from zoo.data.npy_folder import read_feature_rows
from zoo.data.segments import SegmentDataModule, SequenceFeatures

__all__ = ["SmartwatchDataModule", "load_smartwatch", "smartwatch_file"]

INSTALL_HINT = "pip install 'seglearn==1.2.5' (or the zoo's data extra: pip install -e '.[data]')"
NUM_EXERCISES = 7


def smartwatch_file() -> Path:
    """The path of seglearn's ``data/watch_dataset.npy`` (located without importing seglearn)."""
    spec = importlib.util.find_spec("seglearn")
    if spec is None or spec.origin is None:
        raise ImportError(
            f"the smartwatch data need the seglearn package, which is not installed: {INSTALL_HINT}"
        )
    path = Path(spec.origin).parent / "data" / "watch_dataset.npy"
    if not path.is_file():
        raise FileNotFoundError(f"seglearn is installed but has no {path}: reinstall it with {INSTALL_HINT}")
    return path


def pool_windows(recording: np.ndarray, window: int) -> np.ndarray:
    """T x A samples -> floor(T / window) x 2A frames: per window the mean, then the std, of each axis."""
    n = len(recording) // window
    blocks = recording[: n * window].reshape(n, window, recording.shape[1])
    return np.concatenate([blocks.mean(1), blocks.std(1)], 1)


def load_smartwatch(window: int = 25, path: str | Path | None = None) -> list[dict]:
    """The 20 subject-and-side sequences: dicts with ``features`` (T x 12 float32 tensor), ``labels``
    (T long, exercise 0..6), ``subject`` (int), ``name`` ("subject3-side1"); see the module docstring."""
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int (samples at 50 Hz per frame), got {window!r}")
    data = np.load(path or smartwatch_file(), allow_pickle=True).item()  # the file is a pickled dict
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (subject, side) in enumerate(zip(data["subject"], data["side"])):
        groups.setdefault((int(subject), int(side)), []).append(i)
    sequences = []
    for (subject, side), members in sorted(groups.items()):
        frames, labels = [], []
        for i in members:
            pooled = pool_windows(np.asarray(data["X"][i], dtype=np.float64), window)
            frames.append(pooled)
            labels.append(np.full(len(pooled), int(data["y"][i])))
        sequences.append(
            {
                "features": torch.tensor(np.concatenate(frames), dtype=torch.float32),
                "labels": torch.tensor(np.concatenate(labels), dtype=torch.long),
                "subject": subject,
                "name": f"subject{subject}-side{side}",
            }
        )
    return sequences


def pooled_recordings(source: dict, split: str, window: int) -> SequenceFeatures:
    """One split of a ``datasets`` source of raw recordings (module docstring), pooled into windows."""
    raw = read_feature_rows(source, split)  # one frame a sample, checked
    features, labels = [], []
    for i, samples in enumerate(raw.sources):
        if len(samples) < window:
            raise ValueError(
                f"hf_dataset {split} row {i}: expected at least window = {window} samples, got {len(samples)}"
            )
        features.append(torch.tensor(pool_windows(samples.double().numpy(), window), dtype=torch.float32))
        if raw.labels is not None:  # a null cell: an unlabelled recording
            own = raw.labels[i]
            labels.append(None if own is None else own[window // 2 :: window][: len(features[-1])])
    return SequenceFeatures(features, labels if raw.labels is not None else None, raw.names)


def split_subjects(subjects: list[int], seed: int) -> dict[str, set[int]]:
    """A seeded permutation of the subjects cut 70 / 10 / 20 % (at least one subject each)."""
    unique = sorted(set(subjects))
    if len(unique) < 3:
        raise ValueError(f"need at least 3 subjects to split into train / valid / test, got {len(unique)}")
    order = [unique[i] for i in np.random.default_rng(seed).permutation(len(unique))]
    n_test = max(1, round(len(unique) * 0.2))
    n_valid = max(1, round(len(unique) * 0.1))
    return {
        "test": set(order[:n_test]),
        "valid": set(order[n_test : n_test + n_valid]),
        "train": set(order[n_test + n_valid :]),
    }


class SmartwatchDataModule(SegmentDataModule):
    """The smartwatch exercise sequences (module docstring): 12 raw features a frame, 7 known labels.

    Args:
        window: 50 Hz samples pooled into one frame (25: 2 frames a second).
        split_seed: the subject permutation's seed (keep 0 to compare numbers).
        hf_dataset: instead of seglearn's recordings, a ``datasets`` source of yours (module docstring).
        batch_frames, batch_size, num_workers, seed, transform_frames, predict_split: as
            ``SegmentDataModule``.
    """

    num_classes = NUM_EXERCISES

    def __init__(
        self,
        window: int = 25,
        split_seed: int = 0,
        hf_dataset: dict | None = None,
        batch_frames: int | None = None,
        batch_size: int | None = 4,
        num_workers: int = 0,
        seed: int = 0,
        transform_frames: int = 100_000,
        predict_split: str = "test",
    ):
        super().__init__(batch_frames, batch_size, num_workers, seed, transform_frames, predict_split)
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive int (samples at 50 Hz per frame), got {window!r}")
        if hf_dataset is None:
            smartwatch_file()  # fail now, with the install hint, if seglearn is missing
        self.hf_dataset = None if hf_dataset is None else check_source(hf_dataset, "features")
        self.window, self.split_seed = window, split_seed
        self.name = "seglearn-smartwatch" if hf_dataset is None else str(hf_dataset["path"])
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.hf_dataset is not None:
            for split in ("train", "valid", "test"):
                self.datasets[split] = pooled_recordings(self.hf_dataset, split, self.window)
            labels = [lab for d in self.datasets.values() for lab in d.labels or [] if lab is not None]
            self.num_classes = 1 + max(int(lab.max()) for lab in labels) if labels else None
            return
        sequences = load_smartwatch(self.window)
        subjects = split_subjects([s["subject"] for s in sequences], self.split_seed)
        for split, members in subjects.items():
            chosen = [s for s in sequences if s["subject"] in members]
            self.datasets[split] = SequenceFeatures(
                [s["features"] for s in chosen], [s["labels"] for s in chosen], [s["name"] for s in chosen]
            )
