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
  (CrossTask's ``videos.csv`` and ``videos_val.csv``). ``videos.csv`` lists every video, the test
  videos too: as CrossTask's own training code does, a video of the test list is left out of training
  (said in a warning with the count). A video listed twice in one list is read once (warned). A seeded
  ``valid_fraction`` of the remaining training videos (10% in Chiu et al. 2021) is held out for
  validation.

The same videos can come through Hugging Face ``datasets`` instead (``hf_dataset``, a Hub id or local
JSON / parquet files, ``zoo.data.hf_source``): one video a row, with the columns ``task``, ``video``,
the features (``features``, frames x dims; ``hf_dataset.column`` names another) and the step
annotations (``steps``, a list of ``[step, start, end]`` in seconds, null for a video without
annotations; ``hf_dataset.labels`` names another). Its ``train`` and ``test`` splits play the two
video lists' parts; the features are then held in memory.

Frame labels: frame t (time t / frames_per_second) inside step k of task c (start <= time < end) gets
the class of (c, k); other frames are background, class 0. A frame inside two steps of a video gets the
step of the later line (or list entry), a step that ends past the video's last frame is cut there
(one wholly past it labels no frame), and a step shorter than a frame may hold no frame's time: each
is warned about, once per split, naming the first lines.
Classes 1..K number the (task, step) pairs found in the annotations of the listed videos, in sorted
order, so ``num_classes`` = 1 + K.
The features are the raw ones: the HSMM's input projection (a whitened PCA to 200 dimensions in the
recipes, fitted on training frames when ``zoo fit`` starts) is stored with the model.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from zoo.data.hf_source import load_split, replacing
from zoo.data.left_out import few
from zoo.data.npy_folder import frames_tensor
from zoo.data.segments import SegmentDataModule, SequenceFeatures, load_feature_file
from zoo.data.utf8 import read_utf8, text_lines

__all__ = ["CrossTaskDataModule", "read_step_annotations", "read_video_list", "read_video_rows"]

log = logging.getLogger(__name__)
BACKGROUND = 0
FILE_ARGS = ("features_dir", "annotations_dir", "train_videos", "test_videos")


class Video(NamedTuple):
    """One video of a split: its task and id, its features (a ``.npy`` path, or a frames x dims tensor),
    its (step, start, end) annotations (None: not annotated) and where each is written (file and line,
    or dataset row)."""

    task: str
    video: str
    features: Path | torch.Tensor
    steps: list[tuple[int, float, float]] | None
    step_lines: list[str] | None = None

    @property
    def frames(self) -> int:
        source = self.features
        return (
            len(source) if isinstance(source, torch.Tensor) else load_feature_file(source, mmap=True).shape[0]
        )


def read_video_list(path: str | Path) -> list[tuple[str, str]]:
    """(task, video_id) pairs of a CrossTask video list (``task,video_id[,url]`` lines)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no video list {path} (CSV lines task,video_id[,url], e.g. CrossTask's videos.csv)"
        )
    videos, places = [], []
    for number, row in enumerate(csv.reader(text_lines(read_utf8(path))), 1):
        if not row or not "".join(row).strip():
            continue
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise ValueError(f"{path}, line {number}: expected task,video_id[,url], got {row!r}")
        videos.append((row[0].strip(), row[1].strip()))
        places.append(f"line {number}")
    if not videos:
        raise ValueError(f"{path} lists no video")
    return [videos[i] for i in first_listings(videos, places, str(path))]


def first_listings(videos: list[tuple[str, str]], places: list[str], source: str) -> list[int]:
    """The positions of each (task, video)'s first listing, in order; the others (a video listed
    twice would land in training and validation both) are said in one warning naming ``source`` and
    their ``places``."""
    first: dict[tuple[str, str], int] = {}
    again = []
    for i, video in enumerate(videos):
        if video in first:
            again.append(f"{places[i]} ({video[1]}, first at {places[first[video]]})")
        else:
            first[video] = i
    if again:
        log.warning("%s: %d video(s) listed again, read once: %s", source, len(again), few(again))
    return list(first.values())


def read_step_annotations(path: str | Path) -> list[tuple[int, float, float]]:
    """(step, start, end) rows of one CrossTask annotation CSV (step >= 1, 0 <= start < end seconds)."""
    return [step for step, _ in numbered_steps(path)]


def numbered_steps(path: str | Path) -> list[tuple[tuple[int, float, float], str]]:
    """The (step, start, end) rows of one annotation CSV, each with where it is: "PATH, line N"."""
    path = Path(path)
    lines = [
        (row, f"{path}, line {number}")
        for number, row in enumerate(csv.reader(text_lines(read_utf8(path))), 1)
        if row and "".join(row).strip()
    ]
    return [(step_annotation(row, where), where) for row, where in lines]


def step_annotation(row, where: str) -> tuple[int, float, float]:
    """One annotated step, ``(step, start, end)`` with step >= 1 and 0 <= start < end seconds, from a row
    of three values; ValueError naming ``where`` otherwise."""
    try:
        if len(row) != 3:
            raise ValueError
        step, start, end = int(row[0]), float(row[1]), float(row[2])
    except (ValueError, TypeError):
        raise ValueError(f"{where}: expected step,start,end (int, seconds, seconds), got {row!r}") from None
    if step < 1 or not 0 <= start < end or not math.isfinite(end) or step != float(row[0]):
        raise ValueError(f"{where}: need an integer step >= 1 and 0 <= start < end, got {row!r}")
    return step, start, end


def read_video_rows(source: dict, split: str) -> list[Video]:
    """The videos of ``split`` ("train" or "test") of a ``datasets`` source, one a row (module
    docstring), named by their ``video`` column."""
    data, source = load_split(source, split, "features")
    steps_column = source.get("labels") or "steps"
    missing = [c for c in ("task", "video", steps_column) if c not in data.column_names]
    if missing:
        raise ValueError(
            f"hf_dataset {source['path']!r} split {split!r} has no column {missing} (its columns: "
            f"{data.column_names}); a CrossTask source has task, video, {source['column']} and {steps_column}"
        )
    listed = [(str(task), str(video)) for task, video in zip(data["task"], data["video"])]
    videos = []
    for i in first_listings(listed, [f"row {i}" for i in range(len(listed))], f"hf_dataset {split} split"):
        row = data[i]
        where = f"hf_dataset {split} row {i} (video {row['video']!r})"
        features = frames_tensor(row[source["column"]], where)
        steps = lines = row[steps_column]
        if steps is not None:
            lines = [f"{where}, step {k}" for k in range(len(steps))]
            steps = [step_annotation(step, line) for step, line in zip(steps, lines)]
        videos.append(Video(*listed[i], features, steps, lines))
    return videos


class CrossTaskDataModule(SegmentDataModule):
    """CrossTask videos for the HSMM (module docstring).

    Args:
        features_dir: the folder of ``VIDEO_ID.npy`` feature arrays.
        annotations_dir: the folder of ``TASK_VIDEO_ID.csv`` step annotations.
        train_videos: the training video list (``videos.csv``).
        test_videos: the test video list (``videos_val.csv``).
        hf_dataset: instead of the four above, a ``datasets`` source of one video a row (module
            docstring; its train and test splits).
        tasks: keep only these task ids (e.g. the 18 primary tasks); None: every listed task.
        valid_fraction: the share of training videos held out for validation (seeded by ``split_seed``).
        frames_per_second: the feature frame rate (1 for the released features).
        batch_frames, batch_size, num_workers, seed, transform_frames, predict_split: as
            ``SegmentDataModule``.
    """

    def __init__(
        self,
        features_dir: str | None = None,
        annotations_dir: str | None = None,
        train_videos: str | None = None,
        test_videos: str | None = None,
        hf_dataset: dict | None = None,
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
        files = dict(zip(FILE_ARGS, (features_dir, annotations_dir, train_videos, test_videos)))
        given = [name for name, value in files.items() if value is not None]
        self.hf_dataset = replacing(hf_dataset, " / ".join(given), {n: files[n] for n in given} or None)
        if self.hf_dataset is None and len(given) < len(files):
            missing = [name for name in files if name not in given]
            raise ValueError(f"give {', '.join(FILE_ARGS)} (missing {', '.join(missing)}), or hf_dataset")
        for name in ("features_dir", "annotations_dir"):
            if self.hf_dataset is None and not Path(files[name]).is_dir():
                raise FileNotFoundError(f"{name}={files[name]!r} is not a folder")
        if not 0 < valid_fraction < 1:
            raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction!r}")
        if not frames_per_second > 0:
            raise ValueError(f"frames_per_second must be positive, got {frames_per_second!r}")
        self.features_dir, self.annotations_dir = features_dir, annotations_dir
        self.train_videos, self.test_videos = train_videos, test_videos
        self.tasks = None if tasks is None else [str(t) for t in tasks]
        self.valid_fraction, self.split_seed = valid_fraction, split_seed
        self.frames_per_second = frames_per_second
        self.name = "crosstask" if self.hf_dataset is None else str(self.hf_dataset["path"])
        self.classes: list[tuple[str, int]] = []  # (task, step) of classes 1..K
        self.save_hyperparameters()

    def _videos(self, split: str) -> list[Video]:
        """The videos of ``split`` ("train" or "test") of the chosen tasks that have features."""
        if self.hf_dataset is not None:
            videos = [v for v in read_video_rows(self.hf_dataset, split) if self._chosen(v.task)]
            if not videos:
                raise ValueError(f"hf_dataset split {split!r} holds no video of tasks {self.tasks or 'all'}")
            return videos
        path = self.train_videos if split == "train" else self.test_videos
        listed = [(task, video) for task, video in read_video_list(path) if self._chosen(task)]
        features = Path(self.features_dir)
        kept = [(task, video) for task, video in listed if (features / f"{video}.npy").is_file()]
        if len(kept) < len(listed):
            missing = [video for task, video in listed if (task, video) not in kept]
            log.warning(
                "%s: %d of %d videos have no features in %s; skipped: %s", path, len(missing), len(listed),
                features, few(missing),
            )  # fmt: skip
        if not kept:
            raise ValueError(f"no video of {path} (tasks {self.tasks or 'all'}) has features in {features}")
        return [Video(task, v, features / f"{v}.npy", *self._annotation(task, v)) for task, v in kept]

    def _chosen(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    def _annotation(self, task: str, video: str) -> tuple[list | None, list[str] | None]:
        """The video's annotated steps and their lines (None, None: no annotation file)."""
        path = Path(self.annotations_dir) / f"{task}_{video}.csv"
        if not path.is_file():
            return None, None
        numbered = numbered_steps(path)
        return [step for step, _ in numbered], [line for _, line in numbered]

    def _labels(self, video: Video, frames: int, index: dict, notes: dict[str, list[str]]) -> torch.Tensor:
        """The frame labels of an annotated video (module docstring); a step that overlaps an earlier
        one, that ends past the last frame or that holds no frame is noted in ``notes[kind]``
        (``STEP_NOTES``)."""
        times = np.arange(frames) / self.frames_per_second
        covered = frames / self.frames_per_second
        labels = np.full(frames, BACKGROUND, dtype=np.int64)
        for (step, start, end), line in zip(video.steps, video.step_lines):
            inside = (times >= start) & (times < end)
            shared = np.flatnonzero(inside & (labels != BACKGROUND))
            if len(shared):
                notes["overlap"].append(f"{line} (frames {shared[0]}..{shared[-1]})")
            if end > covered:
                past = f"from {start:g} s, wholly past" if start >= covered else f"ends at {end:g} s, cut at"
                notes["past_end"].append(f"{line} ({past} the features' {covered:g} s)")
            elif not inside.any():
                notes["no_frame"].append(f"{line} ({start:g} to {end:g} s)")
            labels[inside] = index[(video.task, step)]
        return torch.as_tensor(labels)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        test = self._videos("test")
        train = held_out(self._videos("train"), test)
        order = np.random.default_rng(self.split_seed).permutation(len(train))
        n_valid = max(1, round(len(train) * self.valid_fraction))
        if n_valid >= len(train):
            raise ValueError(f"valid_fraction={self.valid_fraction} leaves no training video of {len(train)}")
        splits = {
            "train": [train[i] for i in sorted(order[n_valid:])],
            "valid": [train[i] for i in sorted(order[:n_valid])],
            "test": test,
        }
        self.classes = sorted(
            {(v.task, s) for videos in splits.values() for v in videos for s, _, _ in v.steps or []}
        )
        index = {pair: k + 1 for k, pair in enumerate(self.classes)}
        self.num_classes = 1 + len(self.classes) if self.classes else None
        for split, videos in splits.items():
            notes = {kind: [] for kind in STEP_NOTES}
            labels = [None if v.steps is None else self._labels(v, v.frames, index, notes) for v in videos]
            warn_about_steps(split, notes)
            has_labels = any(lab is not None for lab in labels)
            self.datasets[split] = SequenceFeatures(
                [v.features for v in videos], labels if has_labels else None, [v.video for v in videos]
            )


STEP_NOTES = {  # what CrossTaskDataModule._labels notes about a step, by kind
    "overlap": "overlap an earlier step of their video and take the frames they share (the later line wins)",
    "past_end": "end past their video's last frame, which cuts them (a wrong frames_per_second or feature "
    "file?)",
    "no_frame": "hold no frame's time (shorter than a frame), so they label no frame",
}


def held_out(train: list[Video], test: list[Video]) -> list[Video]:
    """The training videos that are not test videos. CrossTask's ``videos.csv`` lists every video and
    ``videos_val.csv`` the held-out ones, which its training code (Zhukov et al. 2019) leaves out of
    training; said in a warning with the count, so that lists meant to be disjoint show their overlap."""
    tested = {(v.task, v.video) for v in test}
    kept = [v for v in train if (v.task, v.video) not in tested]
    if not kept:
        raise ValueError("every training video is also a test video: no video left to train on")
    if len(kept) < len(train):
        shared = [v.video for v in train if (v.task, v.video) in tested]
        log.warning(
            "CrossTask: %d of %d training videos are also test videos, left out of training and validation "
            "(CrossTask's videos.csv lists the test videos of videos_val.csv too): %s",
            len(shared), len(train), few(shared),
        )  # fmt: skip
    return kept


def warn_about_steps(split: str, notes: dict[str, list[str]]) -> None:
    """One warning per kind of ``notes`` (``CrossTaskDataModule._labels``) of ``split``, naming a few."""
    for kind, what in STEP_NOTES.items():
        if notes[kind]:
            log.warning("CrossTask %s split: %d annotated step(s) %s: %s", split, len(notes[kind]), what,
                        few(notes[kind]))  # fmt: skip
