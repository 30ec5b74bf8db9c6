"""CrossTask instructional videos (Zhukov et al. 2019) as the users have them: per-video feature arrays
and per-video step annotations.

Files:

* ``features_dir/VIDEO_ID.npy``: frames x dims features of one video (the released CrossTask features
  are 3200-dimensional, one frame a second: ``frames_per_second=1``); videos without a feature file are
  skipped with a warning (a few of the released videos have none).
* ``annotations_dir/TASK_VIDEO_ID.csv``: one annotated step a line, ``step,start,end`` (step number from
  1, start and end in seconds), no header. Videos without an annotation file (e.g. related tasks) have
  no labels.
* ``train_videos`` and ``test_videos``: CSV files with one video a line, ``task,video_id[,url]``
  (CrossTask's ``videos.csv`` and ``videos_val.csv``). A seeded ``valid_fraction`` of the training
  videos (10% in Chiu et al. 2021) is held out for validation.

Frame labels: frame t (time t / frames_per_second) inside step k of task c (start <= time < end) gets
the class of (c, k); other frames are background, class 0. Classes 1..K number the (task, step) pairs
found in the annotations of the listed videos, in sorted order, so ``num_classes`` = 1 + K.
The features are the raw ones: the HSMM's input projection (a whitened PCA to 200 dimensions in the
recipes, fitted on training frames when ``zoo fit`` starts) is stored with the model.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

import numpy as np
import torch

from zoo.data.segments import SegmentDataModule, SequenceFeatures, load_feature_file

__all__ = ["CrossTaskDataModule", "read_step_annotations", "read_video_list"]

log = logging.getLogger(__name__)
BACKGROUND = 0


def read_video_list(path: str | Path) -> list[tuple[str, str]]:
    """(task, video_id) pairs of a CrossTask video list (``task,video_id[,url]`` lines)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no video list {path} (CSV lines task,video_id[,url], e.g. CrossTask's videos.csv)"
        )
    videos = []
    with path.open(newline="") as fh:
        for number, row in enumerate(csv.reader(fh), 1):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 2 or not row[0].strip() or not row[1].strip():
                raise ValueError(f"{path}, line {number}: expected task,video_id[,url], got {row!r}")
            videos.append((row[0].strip(), row[1].strip()))
    if not videos:
        raise ValueError(f"{path} lists no video")
    return videos


def read_step_annotations(path: str | Path) -> list[tuple[int, float, float]]:
    """(step, start, end) rows of one CrossTask annotation CSV (step >= 1, 0 <= start < end seconds)."""
    path = Path(path)
    steps = []
    with path.open(newline="") as fh:
        for number, row in enumerate(csv.reader(fh), 1):
            if not row or not "".join(row).strip():
                continue
            try:
                step, start, end = int(row[0]), float(row[1]), float(row[2])
            except (ValueError, IndexError):
                raise ValueError(
                    f"{path}, line {number}: expected step,start,end (int, seconds, seconds), got {row!r}"
                ) from None
            if step < 1 or not 0 <= start < end or not math.isfinite(end):
                raise ValueError(f"{path}, line {number}: need step >= 1 and 0 <= start < end, got {row!r}")
            steps.append((step, start, end))
    return steps


class CrossTaskDataModule(SegmentDataModule):
    """CrossTask videos for the HSMM (module docstring).

    Args:
        features_dir: the folder of ``VIDEO_ID.npy`` feature arrays.
        annotations_dir: the folder of ``TASK_VIDEO_ID.csv`` step annotations.
        train_videos: the training video list (``videos.csv``).
        test_videos: the test video list (``videos_val.csv``).
        tasks: keep only these task ids (e.g. the 18 primary tasks); None: every listed task.
        valid_fraction: the share of training videos held out for validation (seeded by ``split_seed``).
        frames_per_second: the feature frame rate (1 for the released features).
        batch_frames, batch_size, num_workers, seed, transform_frames, predict_split: as
            ``SegmentDataModule``.
    """

    def __init__(
        self,
        features_dir: str,
        annotations_dir: str,
        train_videos: str,
        test_videos: str,
        tasks: list[str] | None = None,
        valid_fraction: float = 0.1,
        split_seed: int = 0,
        frames_per_second: float = 1.0,
        batch_frames: int | None = 20_000,
        batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        transform_frames: int = 50_000,
        predict_split: str = "test",
    ):
        super().__init__(batch_frames, batch_size, num_workers, seed, transform_frames, predict_split)
        for name, value in (("features_dir", features_dir), ("annotations_dir", annotations_dir)):
            if not Path(value).is_dir():
                raise FileNotFoundError(f"{name}={value!r} is not a folder")
        if not 0 < valid_fraction < 1:
            raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction!r}")
        if not frames_per_second > 0:
            raise ValueError(f"frames_per_second must be positive, got {frames_per_second!r}")
        self.features_dir, self.annotations_dir = Path(features_dir), Path(annotations_dir)
        self.train_videos, self.test_videos = train_videos, test_videos
        self.tasks = None if tasks is None else [str(t) for t in tasks]
        self.valid_fraction, self.split_seed = valid_fraction, split_seed
        self.frames_per_second = frames_per_second
        self.name = "crosstask"
        self.classes: list[tuple[str, int]] = []  # (task, step) of classes 1..K
        self.save_hyperparameters()

    def _videos(self, path: str) -> list[tuple[str, str]]:
        videos = read_video_list(path)
        if self.tasks is not None:
            videos = [v for v in videos if v[0] in self.tasks]
        kept = [v for v in videos if (self.features_dir / f"{v[1]}.npy").is_file()]
        if len(kept) < len(videos):
            missing = len(videos) - len(kept)
            log.warning(
                "%s: %d of %d videos have no features in %s; skipped",
                path,
                missing,
                len(videos),
                self.features_dir,
            )
        if not kept:
            raise ValueError(
                f"no video of {path} (tasks {self.tasks or 'all'}) has features in {self.features_dir}"
            )
        return kept

    def _annotation(self, task: str, video: str) -> list[tuple[int, float, float]] | None:
        path = self.annotations_dir / f"{task}_{video}.csv"
        return read_step_annotations(path) if path.is_file() else None

    def _labels(self, task: str, steps, frames: int, index: dict) -> torch.Tensor:
        times = np.arange(frames) / self.frames_per_second
        labels = np.full(frames, BACKGROUND, dtype=np.int64)
        for step, start, end in steps:
            labels[(times >= start) & (times < end)] = index[(task, step)]
        return torch.as_tensor(labels)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        train = self._videos(self.train_videos)
        test = self._videos(self.test_videos)
        order = np.random.default_rng(self.split_seed).permutation(len(train))
        n_valid = max(1, round(len(train) * self.valid_fraction))
        if n_valid >= len(train):
            raise ValueError(f"valid_fraction={self.valid_fraction} leaves no training video of {len(train)}")
        splits = {
            "train": [train[i] for i in sorted(order[n_valid:])],
            "valid": [train[i] for i in sorted(order[:n_valid])],
            "test": test,
        }
        annotations = {v: self._annotation(*v) for videos in splits.values() for v in videos}
        self.classes = sorted(
            {(task, s) for (task, _), steps in annotations.items() for s, _, _ in steps or []}
        )
        index = {pair: k + 1 for k, pair in enumerate(self.classes)}
        self.num_classes = 1 + len(self.classes) if self.classes else None
        for split, videos in splits.items():
            paths = [self.features_dir / f"{video}.npy" for _, video in videos]
            lengths = [load_feature_file(p, mmap=True).shape[0] for p in paths]
            labels = [
                None if annotations[v] is None else self._labels(v[0], annotations[v], n, index)
                for v, n in zip(videos, lengths)
            ]
            has_labels = any(lab is not None for lab in labels)
            self.datasets[split] = SequenceFeatures(
                paths, labels if has_labels else None, [v for _, v in videos]
            )
