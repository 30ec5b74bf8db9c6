"""Polyphonic music as 88-key binary piano rolls: Bach chorales from music21, Boulanger-Lewandowski pickles.

A piano roll is a ``T x 88`` bool tensor; key ``k`` is MIDI pitch ``21 + k`` (A0 .. C8).

- ``stream_to_piano_roll(stream)``: any music21 stream, one frame per quarter note by default: key ``p``
  is on at frame ``t`` iff some note of pitch ``p`` has ``onset <= t < onset + duration`` (in quarter
  notes; with ``frames_per_quarter = f``, frame ``t`` is at time ``t / f``). ``T`` is the first frame at
  or after the last note's end. Ties need no special care (the tied halves cover adjacent frames);
  grace notes (duration 0) cover no frame; repeats are not expanded.
- ``load_chorales(cache_dir)``: the 371 Bach chorales of music21's corpus in Riemenschneider order,
  converted once (~80 s) and cached on disk (see ``load_chorales``); 20,158 frames in all.
- ``split_pieces(n)``: the fixed seeded split: JSB's 229 / 76 / 77 out of 382 scaled to ``n``
  (371 -> 222 / 74 / 75 pieces, 11,935 / 4,174 / 4,049 frames train / valid / test with ``seed=0``).
- ``read_music_pickle(path)``: ``JSB_Chorales.pickle``, ``Nottingham.pickle``, ``MuseData.pickle``,
  ``Piano-midi.de.pickle``: a dict ``train`` / ``valid`` / ``test`` -> pieces -> frames -> MIDI pitches
  21..108, checked and converted to piano rolls.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import pickle
import tempfile
from collections.abc import Iterable, Sequence
from fractions import Fraction
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from zoo.data.buckets import PackedSequences, collate_frames
from zoo.data.datamodule import SPLITS, SequenceDataModule
from zoo.data.hf_source import load_pieces, replacing

__all__ = [
    "CACHE_VERSION",
    "LOWEST_PITCH",
    "MusicDataModule",
    "NUM_KEYS",
    "SPLITS",
    "chorale_names",
    "default_cache_dir",
    "frames_to_piano_roll",
    "load_chorales",
    "read_music_pickle",
    "split_pieces",
    "stream_to_piano_roll",
]

log = logging.getLogger(__name__)

NUM_KEYS = 88
LOWEST_PITCH = 21  # MIDI A0 is key 0; C8 (108) is key 87
CACHE_VERSION = 1  # bump when the conversion changes: older cache files are then rebuilt
INSTALL_HINT = 'pip install "structured-zoo[data]"  (or: pip install music21==10.5.1)'
PICKLE_NAMES = ("JSB_Chorales.pickle", "Nottingham.pickle", "MuseData.pickle", "Piano-midi.de.pickle")


def _music21() -> Any:
    try:
        import music21
    except ImportError as e:
        raise ImportError(
            f"the Bach chorales need the music21 package, which is not installed: {INSTALL_HINT}"
        ) from e
    return music21


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/structured-zoo`` (``~/.cache/structured-zoo`` by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "structured-zoo"


def stream_to_piano_roll(stream: Any, frames_per_quarter: int = 1) -> Tensor:
    """A music21 stream (score, part, ...) -> ``T x 88`` bool piano roll; see the module docstring.

    Raises ``ValueError`` if the stream has no sounding note or a pitch outside MIDI 21..108.
    """
    if not isinstance(frames_per_quarter, int) or frames_per_quarter < 1:
        raise ValueError(f"frames_per_quarter must be a positive int, got {frames_per_quarter!r}")
    f = frames_per_quarter
    spans: list[tuple[int, int, int]] = []
    for n in stream.flatten().notes:
        onset = Fraction(n.offset)
        end = onset + Fraction(n.quarterLength)
        first, stop = math.ceil(onset * f), math.ceil(end * f)  # frames t with onset <= t / f < end
        for p in getattr(n, "pitches", ()):
            if not LOWEST_PITCH <= p.midi < LOWEST_PITCH + NUM_KEYS:
                raise ValueError(
                    f"pitch {p.nameWithOctave} (MIDI {p.midi}) at offset {float(onset)} is outside "
                    f"the 88 keys (MIDI {LOWEST_PITCH}..{LOWEST_PITCH + NUM_KEYS - 1})"
                )
            if stop > first:
                spans.append((first, stop, p.midi - LOWEST_PITCH))
    if not spans:
        raise ValueError(f"the stream {getattr(stream, 'id', stream)!r} has no note with a positive duration")
    roll = torch.zeros(max(stop for _, stop, _ in spans), NUM_KEYS, dtype=torch.bool)
    for first, stop, key in spans:
        roll[first:stop, key] = True
    return roll


def chorale_names() -> list[str]:
    """The corpus paths of music21's 371 Bach chorales in Riemenschneider order (``'bach/bwv269'``, ...)."""
    corpus = _music21().corpus
    return [
        str(name)
        for name in corpus.chorales.Iterator(numberingSystem="riemenschneider", returnType="filename")
    ]


def _cache_key(names: Sequence[str], frames_per_quarter: int) -> dict[str, Any]:
    return {
        "format": "structured-zoo piano rolls",
        "version": CACHE_VERSION,
        "music21": _music21().__version__,
        "frames_per_quarter": frames_per_quarter,
        "names_sha1": hashlib.sha1("\n".join(names).encode()).hexdigest(),
        "num_pieces": len(names),
    }


def _read_cache(path: Path, key: dict[str, Any]) -> list[Tensor] | None:
    if not path.exists():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
        stored = json.loads(data["key"])
        rolls = data["rolls"]
    except Exception as e:  # a truncated or foreign file: rebuild it
        log.warning("ignoring unreadable piano-roll cache %s (%s); converting again", path, e)
        return None
    if stored != key:
        log.warning("piano-roll cache %s was made with %s, need %s; converting again", path, stored, key)
        return None
    if len(rolls) != key["num_pieces"] or any(r.dim() != 2 or r.shape[1] != NUM_KEYS for r in rolls):
        log.warning("piano-roll cache %s has unexpected contents; converting again", path)
        return None
    return [r.bool() for r in rolls]


def _write_cache(path: Path, key: dict[str, Any], rolls: list[Tensor]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(
                {"key": json.dumps(key, sort_keys=True), "rolls": [r.to(torch.uint8) for r in rolls]}, fh
            )
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_chorales(
    cache_dir: str | os.PathLike | None = None,
    frames_per_quarter: int = 1,
    names: Sequence[str] | None = None,
) -> list[Tensor]:
    """The Bach chorales as piano rolls (each ``T_i x 88`` bool), in the order of ``names``.

    Args:
        cache_dir: where the converted rolls are kept (default ``default_cache_dir()``). The file name and
            its contents carry a key (``CACHE_VERSION``, music21's version, ``frames_per_quarter``, a hash
            of ``names``); a file whose key differs is converted again and replaced, with a warning.
            Writes are atomic (temporary file + rename), so concurrent processes are safe.
        frames_per_quarter: frames a quarter note (1 as in JSB).
        names: music21 corpus paths; default ``chorale_names()`` (all 371).
    """
    names = list(chorale_names() if names is None else names)
    if not names:
        raise ValueError("names must list at least one corpus path, got an empty list")
    key = _cache_key(names, frames_per_quarter)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    path = Path(cache_dir or default_cache_dir()) / f"chorales-{digest}.pt"
    rolls = _read_cache(path, key)
    if rolls is None:
        corpus = _music21().corpus
        log.info("converting %d chorales to piano rolls (once; cached in %s)", len(names), path)
        rolls = [stream_to_piano_roll(corpus.parse(name), frames_per_quarter) for name in names]
        _write_cache(path, key, rolls)
    return rolls


def split_pieces(num_pieces: int, seed: int = 0) -> dict[str, list[int]]:
    """Indices of the train / valid / test pieces: a seeded permutation cut in JSB's proportions.

    ``valid = round(n * 76 / 382)``, ``test = round(n * 77 / 382)``, train the rest; each list sorted.
    For the 371 chorales: 222 / 74 / 75.
    """
    if num_pieces < 3:
        raise ValueError(f"need at least 3 pieces to split into train / valid / test, got {num_pieces}")
    n_valid = max(1, round(num_pieces * 76 / 382))
    n_test = max(1, round(num_pieces * 77 / 382))
    perm = np.random.default_rng(seed).permutation(num_pieces)
    n_train = num_pieces - n_valid - n_test
    parts = {
        "train": perm[:n_train],
        "valid": perm[n_train : n_train + n_valid],
        "test": perm[n_train + n_valid :],
    }
    return {split: sorted(int(i) for i in idx) for split, idx in parts.items()}


def frames_to_piano_roll(frames: Sequence[Iterable[int]], where: str = "piece") -> Tensor:
    """A piece as frames of MIDI pitches (``[[60, 64], [], ...]``) -> ``T x 88`` bool piano roll.

    Raises ``ValueError`` naming ``where``, the frame and the value for anything but integral pitches in
    21..108, and for a piece without frames.
    """
    if isinstance(frames, (str, bytes)) or not isinstance(frames, Sequence | np.ndarray):
        raise ValueError(f"{where}: expected a list of frames, got {type(frames).__name__}")
    if len(frames) == 0:
        raise ValueError(f"{where}: a piece needs at least one frame, got none")
    roll = torch.zeros(len(frames), NUM_KEYS, dtype=torch.bool)
    for t, frame in enumerate(frames):
        if isinstance(frame, (str, bytes)) or not isinstance(frame, Iterable):
            raise ValueError(f"{where}, frame {t}: expected a list of MIDI pitches, got {frame!r}")
        for p in frame:
            ok = isinstance(p, Integral) or (isinstance(p, Real) and float(p).is_integer())
            if isinstance(p, bool) or not ok or not LOWEST_PITCH <= int(p) < LOWEST_PITCH + NUM_KEYS:
                raise ValueError(
                    f"{where}, frame {t}: expected integer MIDI pitches "
                    f"{LOWEST_PITCH}..{LOWEST_PITCH + NUM_KEYS - 1}, got {p!r}"
                )
            roll[t, int(p) - LOWEST_PITCH] = True
    return roll


def read_music_pickle(path: str | os.PathLike) -> dict[str, list[Tensor]]:
    """Read a Boulanger-Lewandowski pickle -> ``{"train"|"valid"|"test": [T_i x 88 bool roll, ...]}``.

    The file (``JSB_Chorales.pickle``, ``Nottingham.pickle``, ``MuseData.pickle``, ``Piano-midi.de.pickle``)
    is a dict with keys ``train``, ``valid``, ``test``, each a list of pieces, each a list of frames, each
    a list of MIDI pitches 21..108. Python 2 pickles are read (``encoding="latin1"``). Pickle runs code
    from the file: read only files you trust.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no music pickle at {path}: expected one of the Boulanger-Lewandowski files "
            f"{', '.join(PICKLE_NAMES)} (dict train/valid/test -> pieces -> frames -> MIDI pitches)"
        )
    with path.open("rb") as fh:
        try:
            data = pickle.load(fh, encoding="latin1")
        except Exception as e:
            raise ValueError(f"{path} is not a readable pickle ({type(e).__name__}: {e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a dict with keys {list(SPLITS)}, got {type(data).__name__}")
    data = {k.decode() if isinstance(k, bytes) else k: v for k, v in data.items()}
    missing = [s for s in SPLITS if s not in data]
    if missing:
        raise ValueError(
            f"{path}: expected keys {list(SPLITS)}, missing {missing} (keys: {sorted(map(str, data))})"
        )
    out: dict[str, list[Tensor]] = {}
    for split in SPLITS:
        pieces = data[split]
        if not isinstance(pieces, Sequence) or isinstance(pieces, (str, bytes)) or not pieces:
            raise ValueError(
                f"{path}: {split!r} must be a non-empty list of pieces, got {type(pieces).__name__}"
            )
        out[split] = [frames_to_piano_roll(p, f"{path}: {split} piece {i}") for i, p in enumerate(pieces)]
    return out


class MusicDataModule(SequenceDataModule):
    """Piano rolls as ``{"frames": B x T x 88 float, "lengths": B}`` batches; ``num_keys = 88``.

    Args:
        dataset: ``"chorales"`` (music21's Bach chorales, converted once and cached, split by
            ``split_pieces`` with ``split_seed``) or the path of a Boulanger-Lewandowski pickle
            (``JSB_Chorales.pickle``, ``Nottingham.pickle``, ``MuseData.pickle``, ``Piano-midi.de.pickle``)
            whose own train / valid / test split is used. Default: "chorales", unless ``hf_dataset``.
        hf_dataset: instead of ``dataset``, a ``datasets`` source of one piece a row as its frames of
            MIDI pitches (``zoo.data.hf_source``: the ``notes`` column, the pickles' layout).
        cache_dir: the chorales' piano-roll cache (default ``~/.cache/structured-zoo``).
        batch_frames: at most this many padded frames (``B x T``) a batch.
        batch_size: at most this many pieces a batch.
        num_workers, seed: as in ``SequenceDataModule``.
        split_seed: the chorales' train / valid / test permutation seed (keep 0 to compare numbers).
        predict_split: the split ``zoo predict`` scores and decodes ("train", "valid" or "test").

    ``setup()`` fills ``datasets[split]`` (``PackedSequences`` of ``T_i x 88`` bool rolls).
    """

    num_keys = NUM_KEYS
    collate_fn = staticmethod(collate_frames)

    def __init__(
        self,
        dataset: str | None = None,
        cache_dir: str | None = None,
        batch_frames: int | None = None,
        batch_size: int | None = 16,
        num_workers: int = 0,
        seed: int = 0,
        split_seed: int = 0,
        hf_dataset: dict | None = None,
        predict_split: str = "test",
    ) -> None:
        super().__init__(batch_frames, batch_size, num_workers, seed, predict_split)
        self.hf_dataset = replacing(hf_dataset, "dataset", dataset)
        if self.hf_dataset is not None:
            self.name = str(self.hf_dataset["path"])
        elif dataset is None or dataset == "chorales":
            dataset = "chorales"
            if importlib.util.find_spec("music21") is None:
                raise ImportError(
                    f"dataset='chorales' needs the music21 package, which is not installed: {INSTALL_HINT}"
                )
            self.name = "bach-chorales-music21"
        else:
            if not Path(dataset).is_file():
                raise FileNotFoundError(
                    f"dataset must be 'chorales' or the path of a music pickle ({', '.join(PICKLE_NAMES)}), "
                    f"got {dataset!r}, which is not a file"
                )
            self.name = Path(dataset).stem
        self.dataset = dataset
        self.cache_dir = cache_dir
        self.split_seed = split_seed
        self.save_hyperparameters()

    @classmethod
    def dataset_name(cls, args: dict[str, Any]) -> str:
        """ "chorales" (the default), else the pickle's name (``dataset``)."""
        dataset = args.get("dataset") or "chorales"
        return "chorales" if dataset == "chorales" else Path(dataset).stem

    def setup(self, stage: str | None = None) -> None:
        """Load (or convert and cache) the rolls once and fill ``datasets``."""
        if self.datasets:
            return
        if self.hf_dataset is not None:
            splits = {
                split: [
                    frames_to_piano_roll(piece, f"hf_dataset {split} row {i}")
                    for i, piece in enumerate(load_pieces(self.hf_dataset, split))
                ]
                for split in ("train", "valid", "test")
            }
        elif self.dataset == "chorales":
            rolls = load_chorales(self.cache_dir)
            splits = {
                s: [rolls[i] for i in idx] for s, idx in split_pieces(len(rolls), self.split_seed).items()
            }
        else:
            splits = read_music_pickle(self.dataset)
        self.datasets = {split: PackedSequences.from_sequences(pieces) for split, pieces in splits.items()}
