"""Piano rolls: music21 conversion semantics, the chorale cache, the fixed split, pickles, the data module."""

import importlib.util
import math
import pickle
import re
from fractions import Fraction

import pytest
import torch

from zoo.data import (
    MusicDataModule,
    frames_to_piano_roll,
    read_music_pickle,
    split_pieces,
    stream_to_piano_roll,
)
from zoo.data import music as music_mod

needs_music21 = pytest.mark.skipif(
    importlib.util.find_spec("music21") is None, reason='needs music21 (pip install "structured-zoo[data]")'
)
TWO_CHORALES = ["bach/bwv269", "bach/bwv347"]  # the first two in Riemenschneider order


def tiny_stream():
    from music21 import chord, note, stream, tie

    s = stream.Stream()
    s.insert(0, note.Note(60, quarterLength=1))  # frame 0
    s.insert(0.5, note.Note(64, quarterLength=1.5))  # [0.5, 2): frame 1 only (no frame at its onset)
    s.insert(1, chord.Chord([67, 72], quarterLength=2))  # frames 1, 2
    s.insert(3, note.Note(50).getGrace())  # duration 0: no frame
    tied = [note.Note(55, quarterLength=1), note.Note(55, quarterLength=0.5)]
    tied[0].tie, tied[1].tie = tie.Tie("start"), tie.Tie("stop")
    s.insert(3, tied[0])
    s.insert(4, tied[1])  # the tie covers [3, 4.5): frames 3, 4
    s.insert(Fraction(1, 3), note.Note(48, quarterLength=Fraction(1, 3)))  # [1/3, 2/3): no integer time
    s.insert(Fraction(14, 3), note.Note(45, quarterLength=Fraction(2, 3)))  # [4.67, 5.33): frame 5
    return s


def on_keys(roll):
    return [sorted(21 + k for k in row.nonzero().flatten().tolist()) for row in roll]


@needs_music21
def test_piano_roll_semantics_on_a_tiny_stream():
    roll = stream_to_piano_roll(tiny_stream())
    assert roll.dtype == torch.bool and roll.shape == (6, 88)
    assert on_keys(roll) == [[60], [64, 67, 72], [67, 72], [55], [55], [45]]
    fine = stream_to_piano_roll(tiny_stream(), frames_per_quarter=2)  # frame t at time t / 2
    assert fine.shape == (11, 88)
    assert on_keys(fine) == [
        [60],
        [48, 60, 64],
        [64, 67, 72],
        [64, 67, 72],
        [67, 72],
        [67, 72],
        [55],
        [55],
        [55],
        [],
        [45],
    ]


@needs_music21
def test_piano_roll_errors():
    from music21 import note, stream

    s = stream.Stream()
    s.insert(0, note.Note(20))  # G#0, below A0
    with pytest.raises(ValueError, match=r"MIDI 20\) at offset 0.0 is outside the 88 keys \(MIDI 21..108\)"):
        stream_to_piano_roll(s)
    with pytest.raises(ValueError, match="no note with a positive duration"):
        stream_to_piano_roll(stream.Stream([note.Rest()]))
    with pytest.raises(ValueError, match="frames_per_quarter must be a positive int, got 0"):
        stream_to_piano_roll(tiny_stream(), frames_per_quarter=0)


@needs_music21
def test_real_chorale_matches_the_definition():
    from music21 import corpus

    score = corpus.parse(TWO_CHORALES[0])
    roll = stream_to_piano_roll(score)
    events = [
        (float(n.offset), float(n.offset + n.quarterLength), p.midi)
        for n in score.flatten().notes
        for p in n.pitches
    ]
    frames = math.ceil(max(end for _, end, _ in events))
    expected = torch.zeros(frames, 88, dtype=torch.bool)
    for t in range(frames):
        for onset, end, pitch in events:
            if onset <= t < end:
                expected[t, pitch - 21] = True
    assert torch.equal(roll, expected)
    assert 1 <= roll.sum(1).max() <= 8  # four voices, at most 8 notes a frame over all chorales


@needs_music21
def test_chorale_cache_is_reused_and_invalidated(tmp_path, monkeypatch, caplog):
    calls = []
    convert = music_mod.stream_to_piano_roll

    def counting(score, frames_per_quarter=1):
        calls.append(frames_per_quarter)
        return convert(score, frames_per_quarter)

    monkeypatch.setattr(music_mod, "stream_to_piano_roll", counting)
    rolls = music_mod.load_chorales(tmp_path, names=TWO_CHORALES)
    assert len(calls) == 2 and [r.shape[1] for r in rolls] == [88, 88]
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".pt"  # no temporary file left behind

    again = music_mod.load_chorales(tmp_path, names=TWO_CHORALES)
    assert len(calls) == 2  # read from the cache
    assert all(torch.equal(a, b) and b.dtype == torch.bool for a, b in zip(rolls, again))

    music_mod.load_chorales(tmp_path, names=TWO_CHORALES[:1])  # another configuration: another file
    music_mod.load_chorales(tmp_path, frames_per_quarter=2, names=TWO_CHORALES[:1])
    assert calls == [1, 1, 1, 2] and len(list(tmp_path.iterdir())) == 3

    monkeypatch.setattr(music_mod, "CACHE_VERSION", music_mod.CACHE_VERSION + 1)  # the conversion changed
    music_mod.load_chorales(tmp_path, names=TWO_CHORALES)
    assert len(calls) == 6
    monkeypatch.setattr(music_mod, "CACHE_VERSION", music_mod.CACHE_VERSION - 1)

    # A file at the right name whose key does not match (e.g. written by other code) is not trusted.
    key = music_mod._cache_key(TWO_CHORALES, 1)
    music_mod._write_cache(files[0], {**key, "music21": "0.0"}, rolls)
    with caplog.at_level("WARNING", logger="zoo.data.music"):
        music_mod.load_chorales(tmp_path, names=TWO_CHORALES)
    assert len(calls) == 8 and "converting again" in caplog.text
    files[0].write_bytes(b"truncated")
    assert all(
        torch.equal(a, b) for a, b in zip(rolls, music_mod.load_chorales(tmp_path, names=TWO_CHORALES))
    )
    assert len(calls) == 10
    music_mod.load_chorales(tmp_path, names=TWO_CHORALES)
    assert len(calls) == 10


def test_split_proportions_and_determinism():
    split = split_pieces(371)
    assert [len(split[s]) for s in ("train", "valid", "test")] == [222, 74, 75]
    assert sorted(i for idx in split.values() for i in idx) == list(range(371))
    assert split == split_pieces(371, seed=0) and split != split_pieces(371, seed=1)
    assert [len(v) for v in split_pieces(382).values()] == [229, 76, 77]  # JSB's own sizes
    with pytest.raises(ValueError, match="at least 3 pieces"):
        split_pieces(2)


def write_pickle(path, data, protocol=2):
    with open(path, "wb") as fh:
        pickle.dump(data, fh, protocol=protocol)
    return path


PIECES = {
    "train": [[[60, 64, 67], [60, 64, 67], [], [21, 108]], [[62.0]]],
    "valid": [[[55], [57, 60]]],
    "test": [[[48]]],
}


def test_pickle_reader_real_format(tmp_path):
    data = read_music_pickle(write_pickle(tmp_path / "JSB_Chorales.pickle", PIECES))
    assert [len(data[s]) for s in ("train", "valid", "test")] == [2, 1, 1]
    first = data["train"][0]
    assert first.dtype == torch.bool and first.shape == (4, 88)
    assert on_keys(first) == [[60, 64, 67], [60, 64, 67], [], [21, 108]]
    assert on_keys(data["train"][1]) == [[62]]
    assert on_keys(data["valid"][0]) == [[55], [57, 60]]
    tuples = {s: [[tuple(f) for f in p] for p in v] for s, v in PIECES.items()}  # frames as tuples
    assert torch.equal(read_music_pickle(write_pickle(tmp_path / "t.pickle", tuples))["train"][0], first)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "expected a dict with keys \\['train', 'valid', 'test'\\], got list"),
        ({"train": [], "valid": []}, "missing \\['test'\\]"),
        ({**PIECES, "test": []}, "'test' must be a non-empty list of pieces"),
        (
            {**PIECES, "valid": [[[60], [20]]]},
            "valid piece 0, frame 1: expected integer MIDI pitches 21..108, got 20",
        ),
        ({**PIECES, "test": [[[109]]]}, "test piece 0, frame 0: .* got 109"),
        ({**PIECES, "train": [[[60.5]]]}, "train piece 0, frame 0: .* got 60.5"),
        ({**PIECES, "train": [[[60]], []]}, "train piece 1: a piece needs at least one frame"),
        ({**PIECES, "train": [[60, 62]]}, "train piece 0, frame 0: expected a list of MIDI pitches, got 60"),
    ],
)
def test_pickle_reader_errors(tmp_path, data, message):
    path = write_pickle(tmp_path / "bad.pickle", data)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: .*{message}"):  # the path as given
        read_music_pickle(path)


def test_pickle_reader_missing_or_unreadable(tmp_path):
    with pytest.raises(
        FileNotFoundError, match="expected one of the Boulanger-Lewandowski files JSB_Chorales"
    ):
        read_music_pickle(tmp_path / "Nottingham.pickle")
    (tmp_path / "x.pickle").write_text("not a pickle")
    with pytest.raises(ValueError, match="is not a readable pickle"):
        read_music_pickle(tmp_path / "x.pickle")
    with pytest.raises(ValueError, match="train piece 0: expected a list of frames, got int"):
        frames_to_piano_roll(3, "train piece 0")


def test_music_data_module_on_a_pickle(tmp_path):
    path = write_pickle(tmp_path / "Nottingham.pickle", PIECES)
    dm = MusicDataModule(dataset=str(path), batch_frames=4)
    assert dm.num_keys == MusicDataModule.num_keys == 88 and dm.name == "Nottingham"
    dm.setup("fit")
    train = list(dm.train_dataloader())
    assert sorted(n for b in train for n in b["lengths"].tolist()) == [1, 4]
    for b in train:
        assert b["frames"].dtype == torch.float32 and b["frames"].shape == (
            len(b["lengths"]),
            max(b["lengths"]),
            88,
        )
    (valid,) = list(dm.val_dataloader())
    assert valid["lengths"].tolist() == [2] and valid["frames"][0].sum(1).tolist() == [1.0, 2.0]
    assert [b["lengths"].tolist() for b in dm.test_dataloader()] == [[1]]


@needs_music21
def test_music_data_module_on_chorales(tmp_path, monkeypatch):
    names = music_mod.chorale_names()
    assert len(names) == 371 and names[:2] == TWO_CHORALES
    monkeypatch.setattr(music_mod, "chorale_names", lambda: names[:6])  # the full set takes ~80 s
    dm = MusicDataModule(cache_dir=str(tmp_path), batch_size=4)
    dm.setup()
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 4, "valid": 1, "test": 1}
    batch = next(iter(dm.val_dataloader()))
    assert batch["frames"].shape[2] == 88 and 1 <= batch["frames"][0].sum(1).max() <= 8


def test_music_data_module_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="'chorales' or the path of a music pickle .* not a file"):
        MusicDataModule(dataset=str(tmp_path / "JSB_Chorales.pickle"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "music21" else real_find_spec(name, *a)
    )
    with pytest.raises(
        ImportError, match=r'music21 package, which is not installed: pip install "structured-zoo\[data\]"'
    ):
        MusicDataModule()
