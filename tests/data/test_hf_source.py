"""Text through Hugging Face ``datasets`` (offline): a local parquet file and a folder of text files
give the same sentences, vocabulary and batches as the same text in PTB-format files; bad sources are
clear errors; the card names the data by its source."""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path

import pytest
import torch

datasets = pytest.importorskip("datasets")

from zoo.data import PCFGDataModule, PTBDataModule  # noqa: E402
from zoo.data.captions import over  # noqa: E402
from zoo.data.hf_source import check_source  # noqa: E402
from zoo.data.left_out import BLANK  # noqa: E402
from zoo.errors import SetupError  # noqa: E402
from zoo.hub.cards import dataset_name  # noqa: E402

TEXT = {
    "train": ["the cat sat on the mat", "a dog sat on a log", "the dog ran"],
    "validation": ["the cat ran on the log"],
    "test": ["a cat sat", "the big dog sat on a mat"],
}


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def ptb_files(folder):
    folder.mkdir()
    for split, ours in (("train", "train"), ("validation", "valid"), ("test", "test")):
        (folder / f"ptb.{ours}.txt").write_text("\n".join(TEXT[split]) + "\n")
    return folder


def text_source(folder):
    folder.mkdir()
    files = {}
    for split, lines in TEXT.items():
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n\n")  # a blank line: no sentence
        files[split] = str(folder / f"{split}.txt")
    return {"path": "text", "data_files": files}


def parquet_source(folder):
    folder.mkdir()
    files = {}
    for split, lines in TEXT.items():
        datasets.Dataset.from_dict({"sentence": lines}).to_parquet(folder / f"{split}.parquet")
        files[split] = str(folder / f"{split}.parquet")
    return {"path": "parquet", "data_files": files}


def saved_source(folder):
    """A DatasetDict saved with ``save_to_disk``: the folder is the source's path."""
    splits = {split: datasets.Dataset.from_dict({"sentence": lines}) for split, lines in TEXT.items()}
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    return {"path": str(folder)}


@pytest.mark.parametrize("make", [text_source, parquet_source, saved_source])
def test_a_datasets_source_reads_as_the_same_text_in_files(tmp_path, make):
    reference = PTBDataModule(data_dir=str(ptb_files(tmp_path / "ptb")), batch_tokens=64)
    given = PTBDataModule(hf_dataset=make(tmp_path / "source"), batch_tokens=64)
    for data in (reference, given):
        data.setup()
    assert given.vocab == reference.vocab
    for split in ("train", "valid", "test"):
        assert given.sentences(split) == reference.sentences(split)
        assert [x.tolist() for x in given.datasets[split]] == [x.tolist() for x in reference.datasets[split]]
    batch = next(iter(given.train_dataloader()))
    assert batch["tokens"].shape[0] == batch["lengths"].shape[0] > 0


def test_a_byte_order_mark_is_no_part_of_the_first_word(tmp_path):
    """Files saved as "UTF-8" by Notepad or Excel begin with a byte-order mark: read from a folder or
    through datasets' text builder, the text is the same as without it (the mark stuck to the first
    word: a vocabulary entry '\ufeffthe', and <unk> for the first word of valid and test)."""
    reference = PTBDataModule(data_dir=str(ptb_files(tmp_path / "ptb")), batch_tokens=64)
    marked_dir, marked_source = ptb_files(tmp_path / "marked"), text_source(tmp_path / "marked-source")
    for path in [*marked_dir.iterdir(), *map(Path, marked_source["data_files"].values())]:
        path.write_bytes(codecs.BOM_UTF8 + path.read_bytes())
    folder = PTBDataModule(data_dir=str(marked_dir), batch_tokens=64)
    through_datasets = PTBDataModule(hf_dataset=marked_source, batch_tokens=64)
    for data in (reference, folder, through_datasets):
        data.setup()
    for data in (folder, through_datasets):
        assert data.vocab == reference.vocab
        for split in ("train", "valid", "test"):
            assert data.sentences(split) == reference.sentences(split)


def test_one_dataset_saved_to_disk_is_a_clear_error(tmp_path):
    """It has no splits; datasets' own message told users to call load_from_disk, which a recipe cannot."""
    datasets.Dataset.from_dict({"sentence": TEXT["train"]}).save_to_disk(str(tmp_path / "one"))
    with pytest.raises(ValueError, match=r"is one Dataset saved with save_to_disk: it has no train /"):
        PTBDataModule(hf_dataset={"path": str(tmp_path / "one")}).setup()


def test_token_ids_come_from_a_cached_map(tmp_path):
    """The ids are computed by datasets' map and cached: a second data module with the same source and
    vocabulary reads them from the cache, writing no new cache file."""
    source = parquet_source(tmp_path / "source")
    cache = tmp_path / "hf-cache"

    def cache_files():
        return sorted(p.name for p in cache.rglob("cache-*.arrow"))

    first = PTBDataModule(hf_dataset=source)
    first.setup()
    written = cache_files()
    assert written
    second = PTBDataModule(hf_dataset=source)
    second.setup()
    assert cache_files() == written
    assert [x.tolist() for x in second.datasets["test"]] == [x.tolist() for x in first.datasets["test"]]


def test_the_pcfg_data_reads_a_datasets_source_too(tmp_path):
    """Sentences of 2+ words, their ids from datasets' map (cached), as a PTB folder of the text gives."""
    source = parquet_source(tmp_path / "source")
    data = PCFGDataModule(hf_dataset=source)
    data.setup()
    assert [len(w) for w in data.sentences("test")[0]] == [3, 7]
    cached = sorted(p.name for p in (tmp_path / "hf-cache").rglob("cache-*.arrow"))
    assert cached
    folder = tmp_path / "ptb"
    folder.mkdir()
    for split, ours in (("train", "train"), ("validation", "valid"), ("test", "test")):
        (folder / f"ptb.{ours}.txt").write_text("\n".join(TEXT[split]) + "\n")
    reference = PCFGDataModule(data_dir=str(folder))
    reference.setup()
    for split in ("train", "valid", "test"):
        assert [list(x) for x in data.datasets[split].ids] == [list(x) for x in reference.datasets[split].ids]
    assert data.predict_lines() == reference.predict_lines() == ([s.split() for s in TEXT["test"]], [1, 2], 2)


def test_the_pcfg_data_counts_the_lines_it_leaves_out(tmp_path):
    """A blank and a one-word row are left out, and the kept rows keep their row numbers (TreeWriter)."""
    source = text_source(tmp_path / "source")  # each file ends with a blank line
    with open(source["data_files"]["test"], "a") as f:
        f.write("hello\nthe end\n")
    data = PCFGDataModule(hf_dataset=source)
    data.setup()
    words, lines, count = data.predict_lines()
    assert words == [s.split() for s in TEXT["test"]] + [["the", "end"]]
    assert (lines, count) == ([1, 2, 5], 5)
    assert [len(x) for x in data.datasets["test"].ids] == [4, 8, 3]


def test_bad_sources_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="hf_dataset must be a dict with at least 'path'"):
        PTBDataModule(hf_dataset={"data_files": "x"})
    with pytest.raises(ValueError, match=r"unknown keys \['colum'\]"):
        check_source({"path": "text", "colum": "text"})
    source = {**parquet_source(tmp_path / "source"), "column": "text"}
    with pytest.raises(ValueError, match=r"has no column 'text' \(its columns: \['sentence'\]\)"):
        PTBDataModule(hf_dataset=source).setup()
    with pytest.raises(ValueError, match="give data_dir or hf_dataset, not both"):
        PTBDataModule(data_dir=str(tmp_path), hf_dataset=source).setup()
    latin1 = tmp_path / "latin1"
    latin1.mkdir()
    files = {}
    for split in ("train", "validation", "test"):
        (latin1 / f"{split}.txt").write_bytes("the cat\nle caf\xe9 ferm\xe9\n".encode("latin-1"))
        files[split] = str(latin1 / f"{split}.txt")
    with pytest.raises(ValueError, match=r"train.txt is not UTF-8 text: line 2 \(byte 14"):
        PTBDataModule(hf_dataset={"path": "text", "data_files": files}).setup()


def test_csv_rows_of_the_words_pandas_reads_as_missing_are_sentences(tmp_path):
    """The sentences "NA", "None", "null", "nan", "n/a" were left out as blank rows (pandas' missing
    values); an empty cell still is one."""
    files = {}
    for split in ("train", "validation", "test"):
        path = tmp_path / f"{split}.csv"
        path.write_text('sentence\nthe cat\nNA\nNone\nnull\nnan\n"n/a"\n""\nthe dog\n')
        files[split] = str(path)
    with pytest.warns(UserWarning, match="1 of 8"):
        sentences = PTBDataModule(hf_dataset={"path": "csv", "data_files": files}).sentences("train")
    assert sentences == [["the", "cat"], ["NA"], ["None"], ["null"], ["nan"], ["n/a"], ["the", "dog"]]


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_splits_whose_column_types_disagree_are_named(tmp_path, kind):
    """A column of numbers in one split's file and of text in another's: one line naming datasets' cause
    (it was datasets' 'An error occurred while generating the dataset', the cause only in a log line)."""
    rows = {"train": [("a b c", "1"), ("d e", "2")], "validation": [("a b", "3")], "test": [("a b c", "x")]}
    files = {}
    for split, pairs in rows.items():
        path = tmp_path / f"{split}.{kind}"
        if kind == "csv":
            path.write_text("sentence,n\n" + "".join(f"{s},{n}\n" for s, n in pairs))
        else:
            lines = [json.dumps({"sentence": s, "n": int(n) if n.isdigit() else n}) for s, n in pairs]
            path.write_text("".join(line + "\n" for line in lines))
        files[split] = str(path)
    message = r"could not build hf_dataset '.+' \(ArrowInvalid: .*'x'.*\): .* one type in all of them"
    with pytest.raises(SetupError, match=message):
        PTBDataModule(hf_dataset={"path": kind, "data_files": files}).setup()


def test_the_card_names_the_source(tmp_path):
    def named(source):
        return dataset_name({"class_path": "zoo.data.PTBDataModule", "init_args": {"hf_dataset": source}})

    source = parquet_source(tmp_path / "my-plays")
    first = named(source)
    assert re.fullmatch(r"parquet files in my-plays \(sha256 [0-9a-f]{12}\)", first)
    (tmp_path / "my-plays" / "test.parquet").write_bytes(b"other")  # other contents: another name
    assert named(source) != first
    assert named({"path": "org/plays", "revision": "v2"}) == "org/plays@v2"
    hub = {"path": "ptb_text_only", "name": "penn_treebank"}
    assert dataset_name({"class_path": "zoo.data.PCFGDataModule", "init_args": {"hf_dataset": hub}}) == (
        "ptb_text_only/penn_treebank"
    )


def test_the_captions_data_reads_a_datasets_source_as_gpt2_ids(tmp_path):
    from zoo.data import CaptionsDataModule

    folder = tmp_path / "text"
    folder.mkdir()
    for split, ours in (("train", "train"), ("validation", "valid"), ("test", "test")):
        (folder / f"{ours}.txt").write_text("\n".join(TEXT[split]) + "\n")
    reference = CaptionsDataModule(source="text", path=str(folder), max_words=6)
    source = parquet_source(tmp_path / "source")
    given = CaptionsDataModule(hf_dataset=source, max_words=6)
    reference.setup()
    long = r"hf_dataset test split: 1 of 2 rows left out \(first at row 1\): over"
    with pytest.warns(UserWarning, match=long):
        given.setup()
    for split in ("train", "valid", "test"):
        assert [x.tolist() for x in given.datasets[split]] == [x.tolist() for x in reference.datasets[split]]
    assert len(given.datasets["test"]) == 1  # the 7-word test sentence is over max_words
    cached = sorted(p.name for p in (tmp_path / "hf-cache").rglob("cache-*.arrow"))
    assert cached  # tokenized in datasets' map, whose cache a second data module reads
    again = CaptionsDataModule(hf_dataset=source, max_words=6)
    again.setup()
    assert sorted(p.name for p in (tmp_path / "hf-cache").rglob("cache-*.arrow")) == cached
    assert [x.tolist() for x in again.datasets["train"]] == [x.tolist() for x in given.datasets["train"]]
    blank_rows = {"path": "text", "data_files": {}}
    for split, lines in TEXT.items():  # datasets' text builder: each blank line a row of ""
        (folder / f"blank-{split}.txt").write_text("\n\n".join(lines) + "\n")
        blank_rows["data_files"][split] = str(folder / f"blank-{split}.txt")
    blanks = CaptionsDataModule(hf_dataset=blank_rows, max_words=6)
    with pytest.warns(UserWarning) as caught:
        blanks.setup()
    said = {str(w.message) for w in caught}
    assert "hf_dataset train split: 2 of 5 rows left out (first at row 1): " + BLANK in said
    # the 7-word sentence is row 2 of the test split's 3 rows, the blank row between counted
    assert "hf_dataset test split: 1 of 3 rows left out (first at row 2): " + over(6) in said
    assert [x.tolist() for x in blanks.datasets["train"]] == [x.tolist() for x in given.datasets["train"]]
    fewer = CaptionsDataModule(hf_dataset=source, max_words=6, max_sentences=1)
    fewer.setup()
    assert len(fewer.datasets["train"]) == 1
    with pytest.raises(ValueError, match="split of hf_dataset 'parquet' has no sentences of 1..1 words"):
        CaptionsDataModule(hf_dataset=source, max_words=1).setup()
    hub = {"hf_dataset": {"path": "mscoco_captions"}}
    assert dataset_name({"class_path": "zoo.data.CaptionsDataModule", "init_args": hub}) == "mscoco_captions"


PIECES = {  # frames of MIDI pitches, the Boulanger-Lewandowski layout
    "train": [[[60, 64, 67], [62], []], [[21], [108, 60]]],
    "validation": [[[55, 59]]],
    "test": [[[], [72, 76], [72]], [[40]]],
}


def test_the_music_data_reads_pieces_of_midi_pitches(tmp_path):
    from zoo.data import MusicDataModule
    from zoo.data.music import frames_to_piano_roll

    files = {}
    for split, pieces in PIECES.items():
        datasets.Dataset.from_dict({"notes": pieces}).to_json(tmp_path / f"{split}.json")
        files[split] = str(tmp_path / f"{split}.json")
    data = MusicDataModule(hf_dataset={"path": "json", "data_files": files}, batch_size=2)
    data.setup()
    for split, ours in (("train", "train"), ("validation", "valid"), ("test", "test")):
        rolls = [x.tolist() for x in data.datasets[ours]]
        assert rolls == [frames_to_piano_roll(p).tolist() for p in PIECES[split]]
    batch = next(iter(data.train_dataloader()))
    assert batch["frames"].shape[-1] == 88
    with pytest.raises(ValueError, match="give dataset or hf_dataset, not both"):
        MusicDataModule(dataset="chorales", hf_dataset={"path": "json", "data_files": files})
    bad = {**files, "test": str(tmp_path / "bad.json")}
    datasets.Dataset.from_dict({"notes": [[[20]]]}).to_json(tmp_path / "bad.json")
    with pytest.raises(
        ValueError, match=r"hf_dataset test row 0, frame 0: expected integer MIDI pitches 21..108"
    ):
        MusicDataModule(hf_dataset={"path": "json", "data_files": bad}).setup()
    name = dataset_name(
        {
            "class_path": "zoo.data.MusicDataModule",
            "init_args": {"hf_dataset": {"path": "json", "data_files": files}},
        }
    )
    assert name.startswith("json files in")


def test_feature_sequences_read_as_the_same_npy_folder(tmp_path):
    import numpy as np

    from zoo.data import NpyFolderDataModule

    rng = np.random.default_rng(0)
    rows = {
        split: [rng.normal(size=(n, 3)).astype(np.float32) for n in (4, 6)]
        for split in ("train", "valid", "test")
    }
    labels = {
        split: [np.array([0, 0, 1, 1] + [2] * (len(x) - 4)) for x in seqs] for split, seqs in rows.items()
    }
    files = {}
    for split in rows:
        (tmp_path / "npy" / split).mkdir(parents=True)
        for i, (x, y) in enumerate(zip(rows[split], labels[split])):
            np.save(tmp_path / "npy" / split / f"{i}.npy", x)
            np.save(tmp_path / "npy" / split / f"{i}.labels.npy", y)
        table = {"frames": [x.tolist() for x in rows[split]], "segment": [y.tolist() for y in labels[split]]}
        datasets.Dataset.from_dict(table).to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    source = {"path": "parquet", "data_files": {"train": files["train"], "validation": files["valid"],
              "test": files["test"]}, "column": "frames", "labels": "segment"}  # fmt: skip
    reference, given = NpyFolderDataModule(str(tmp_path / "npy")), NpyFolderDataModule(hf_dataset=source)
    for data in (reference, given):
        data.setup()
    assert given.num_classes == reference.num_classes == 3 and given.input_dim == 3
    for split in ("train", "valid", "test"):
        for a, b in zip(given.datasets[split], reference.datasets[split]):
            torch.testing.assert_close(torch.as_tensor(a["features"]), torch.as_tensor(b["features"]))
            assert torch.equal(a["labels"], b["labels"])
    torch.testing.assert_close(given.fit_feature_transform(3)[1], reference.fit_feature_transform(3)[1])
    with pytest.raises(ValueError, match="has no column 'segmnt'"):
        NpyFolderDataModule(hf_dataset={**source, "labels": "segmnt"}).setup()
    with pytest.raises(ValueError, match="give data_dir or hf_dataset, not both"):
        NpyFolderDataModule(str(tmp_path / "npy"), hf_dataset=source)


def test_smartwatch_recordings_of_your_own(tmp_path):
    """Raw recordings through a datasets source are pooled into frames as the packaged ones are: the
    features of each window's mean and std, the label of its middle sample, the source's splits."""
    import numpy as np

    from zoo.data import SmartwatchDataModule
    from zoo.data.smartwatch import pool_windows

    rng = np.random.default_rng(0)
    files, recordings = {}, {}
    for split in ("train", "validation", "test"):
        samples = [rng.normal(size=(n, 6)) for n in (50, 75)]
        labels = [np.repeat([0, 3], [30, n - 30]) for n in (50, 75)]
        recordings[split] = (samples, labels)
        table = {"imu": [x.tolist() for x in samples], "exercise": [y.tolist() for y in labels]}
        datasets.Dataset.from_dict(table).to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    source = {"path": "parquet", "data_files": files, "column": "imu", "labels": "exercise"}
    data = SmartwatchDataModule(window=25, hf_dataset=source)
    data.setup()
    assert data.num_classes == 4 and data.input_dim == 12
    samples, labels = recordings["validation"]
    first = data.datasets["valid"][0]
    torch.testing.assert_close(
        torch.as_tensor(first["features"]), torch.tensor(pool_windows(samples[0], 25), dtype=torch.float32)
    )
    assert first["labels"].tolist() == [0, 3]  # the windows' middle samples 12 and 37
    assert [len(x["labels"]) for x in data.datasets["test"]] == [2, 3]
    with pytest.raises(ValueError, match="expected at least window = 100 samples, got 50"):
        SmartwatchDataModule(window=100, hf_dataset=source).setup()


def test_crosstask_videos_read_as_the_release_files(tmp_path):
    """One video a row (task, video, features, steps) gives the videos, classes, frame labels and
    held-out validation videos of the same videos in CrossTask's release layout."""
    import numpy as np

    from zoo.data import CrossTaskDataModule

    rng = np.random.default_rng(1)
    steps = {"23521": [[1, 2.0, 4.5], [3, 6.0, 9.0]], "59684": [[2, 0.5, 3.0]]}
    splits = {"train": [("23521", f"v{i}") for i in range(5)] + [("59684", "w0")], "test": [("59684", "t1")]}
    (tmp_path / "features").mkdir()
    (tmp_path / "annotations").mkdir()
    files = {}
    for split, videos in splits.items():
        rows = {"task": [], "video": [], "features": [], "steps": []}
        for task, video in videos:
            x = rng.normal(size=(12, 4)).astype(np.float32)
            np.save(tmp_path / "features" / f"{video}.npy", x)
            annotated = video != "w0"  # a video without annotations: no labels
            if annotated:
                lines = "".join(f"{s},{a},{b}\n" for s, a, b in steps[task])
                (tmp_path / "annotations" / f"{task}_{video}.csv").write_text(lines)
            for column, value in zip(rows, (task, video, x.tolist(), steps[task] if annotated else None)):
                rows[column].append(value)
        (tmp_path / f"{split}.csv").write_text("".join(f"{t},{v}\n" for t, v in videos))
        datasets.Dataset.from_dict(rows).to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    folders = [str(tmp_path / name) for name in ("features", "annotations", "train.csv", "test.csv")]
    source = {"path": "parquet", "data_files": files}
    reference = CrossTaskDataModule(*folders, valid_fraction=0.2)
    given = CrossTaskDataModule(hf_dataset=source, valid_fraction=0.2)
    for data in (reference, given):
        data.setup()
    assert given.classes == reference.classes == [("23521", 1), ("23521", 3), ("59684", 2)]
    assert given.num_classes == 4 and given.input_dim == 4
    for split in ("train", "valid", "test"):
        assert given.datasets[split].names == reference.datasets[split].names
        for a, b in zip(given.datasets[split], reference.datasets[split]):
            torch.testing.assert_close(torch.as_tensor(a["features"]), torch.as_tensor(b["features"]))
            assert (a["labels"] is None and b["labels"] is None) or torch.equal(a["labels"], b["labels"])
    assert given.datasets["test"][0]["labels"].tolist() == [0, 3, 3] + [0] * 9  # step 2 over [0.5, 3) s
    assert dataset_name({"class_path": "zoo.data.CrossTaskDataModule", "init_args": {"hf_dataset": source}})
    with pytest.raises(ValueError, match="has no column 'annotation'"):
        CrossTaskDataModule(hf_dataset={**source, "labels": "annotation"}).setup()
    with pytest.raises(ValueError, match="not both"):
        CrossTaskDataModule(*folders, hf_dataset=source)
    with pytest.raises(ValueError, match="missing annotations_dir, train_videos, test_videos"):
        CrossTaskDataModule(folders[0])
    with pytest.raises(ValueError, match="holds no video of tasks"):
        CrossTaskDataModule(hf_dataset=source, tasks=["00000"]).setup()
    bad = {"task": ["23521"], "video": ["v0"], "features": [[[0.0]]], "steps": [[[1, 5.0, 2.0]]]}
    datasets.Dataset.from_dict(bad).to_parquet(tmp_path / "bad.parquet")
    bad_source = {**source, "data_files": {"train": str(tmp_path / "bad.parquet"), "test": files["test"]}}
    with pytest.raises(ValueError, match=r"train row 0 \(video 'v0'\), step 0: need an integer step"):
        CrossTaskDataModule(hf_dataset=bad_source).setup()


def test_a_null_cell_is_a_blank_line_and_a_list_of_words_is_a_line(tmp_path):
    """A null text cell reads as a blank line (left out with a warning, its place kept for the
    TreeWriter); a column of token lists reads as the lines they join into (audit)."""
    folder = tmp_path / "source"
    folder.mkdir()
    files, words = {}, {}
    for split, lines in TEXT.items():
        rows = [*lines[:1], None, *lines[1:]]
        datasets.Dataset.from_dict({"sentence": rows}).to_parquet(folder / f"{split}.parquet")
        words[split] = [line.split() if line is not None else [] for line in rows]
        datasets.Dataset.from_dict({"tokens": words[split]}).to_parquet(folder / f"{split}.tokens.parquet")
        files[split] = str(folder / f"{split}.parquet")
    source = {"path": "parquet", "data_files": files}
    data = PTBDataModule(hf_dataset=source)
    with pytest.warns(UserWarning, match=r"hf_dataset test split: 1 of 3 rows left out \(first at row 1\)"):
        data.setup()
    reference = PTBDataModule(data_dir=str(ptb_files(tmp_path / "ptb")))
    reference.setup()
    assert [x.tolist() for x in data.datasets["test"]] == [x.tolist() for x in reference.datasets["test"]]
    pcfg = PCFGDataModule(hf_dataset=source)
    pcfg.setup()
    assert pcfg.predict_lines() == ([s.split() for s in TEXT["test"]], [1, 3], 3)
    tokens = {split: f"{folder}/{split}.tokens.parquet" for split in TEXT}
    listed = PCFGDataModule(hf_dataset={"path": "parquet", "data_files": tokens, "column": "tokens"})
    listed.setup()
    assert listed.predict_lines() == pcfg.predict_lines()
    assert [list(x) for x in listed.datasets["test"].ids] == [list(x) for x in pcfg.datasets["test"].ids]


def test_a_text_cell_of_another_type_names_the_split_row_and_column(tmp_path):
    files = {}
    for split in TEXT:
        datasets.Dataset.from_dict({"ids": [[1, 2], [3]]}).to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    source = {"path": "parquet", "data_files": files, "column": "ids"}
    message = (
        r"hf_dataset train row 0, column 'ids': expected a line of text \(a string\) or its words \(a list "
        r"of strings\), got list \[1, 2\]"
    )
    with pytest.raises(ValueError, match=message):
        PTBDataModule(hf_dataset=source).setup()


def test_a_split_of_another_name_points_to_the_splits_setting(tmp_path):
    source = parquet_source(tmp_path / "source")
    source["data_files"]["valid"] = source["data_files"].pop("validation")
    with pytest.raises(ValueError, match=r"has no split 'validation', which the valid split reads .*splits: "
                       r"\{valid: valid\}"):  # fmt: skip
        PTBDataModule(hf_dataset=source).setup()
    data = PTBDataModule(hf_dataset={**source, "splits": {"valid": "valid"}})
    data.setup()
    assert len(data.datasets["valid"]) == len(TEXT["validation"])


def test_given_both_the_error_says_how_to_unset_the_path(tmp_path):
    source = parquet_source(tmp_path / "source")
    with pytest.raises(ValueError, match=r"unset on the command line with --data.init_args.data_dir null$"):
        PTBDataModule(data_dir="ptb", hf_dataset=source)
    from zoo.data import CrossTaskDataModule

    unset = "--data.init_args.features_dir null --data.init_args.annotations_dir null"
    with pytest.raises(ValueError, match=f"with {unset}$"):
        CrossTaskDataModule(features_dir="f", annotations_dir="a", hf_dataset=source)


def test_a_frame_of_another_width_names_the_row_and_frame(tmp_path):
    from zoo.data import NpyFolderDataModule

    files = {}
    for split, rows in (("train", [[[0.0, 1.0]] * 3]), ("validation", [[[0.0, 1.0]] * 2]),
                        ("test", [[[0.0, 1.0]] * 2, [[0.0, 1.0], [0.0, 1.0], [2.0]]])):  # fmt: skip
        datasets.Dataset.from_dict({"features": rows}).to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    message = (
        r"hf_dataset test row 1: expected frames x dims numbers, got frame 2 with 1 numbers, frame 0 with 2"
    )
    with pytest.raises(ValueError, match=message):
        NpyFolderDataModule(hf_dataset={"path": "parquet", "data_files": files}).setup()


@pytest.mark.parametrize(
    "row, said",
    [([[1.0, 2.0], [], [3.0, 4.0]], "frame 1 with 0 numbers, frame 0 with 2 numbers"),
     ([[1.0, 2.0], None], "frame 1 with no list of numbers, frame 0 with 2 numbers"),
     (None, "a null cell")],
    ids=["empty-frame", "null-frame", "null-row"],
)  # fmt: skip
def test_a_ragged_row_names_its_frame(row, said):
    """An empty or null frame gave numpy's "inhomogeneous shape" message (audit)."""
    from zoo.data.npy_folder import frames_tensor

    with pytest.raises(ValueError, match=f"^row 3: expected frames x dims numbers, got {re.escape(said)}$"):
        frames_tensor(row, "row 3")


def test_a_null_labels_cell_is_an_unlabelled_sequence(tmp_path):
    """As a folder's sequence without a labels file; it gave "got shape (), dtype object" (audit)."""
    from zoo.data import NpyFolderDataModule

    files = {}
    for split, labels in (("train", [[0, 1, 1], None]), ("validation", [[0, 0, 1], [1, 1, 0]]),
                          ("test", [None, [0, 1, 1]])):  # fmt: skip
        rows = {"features": [[[0.0, 1.0]] * 3] * 2, "labels": labels}
        datasets.Dataset.from_dict(rows).to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    dm = NpyFolderDataModule(hf_dataset={"path": "parquet", "data_files": files, "labels": "labels"})
    dm.setup()
    train = dm.datasets["train"]
    assert train[0]["labels"].tolist() == [0, 1, 1] and train[1]["labels"] is None
    assert dm.datasets["test"][0]["labels"] is None and dm.num_classes == 2
