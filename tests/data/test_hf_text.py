"""Text through Hugging Face ``datasets`` (offline): a local parquet file and a folder of text files
give the same sentences, vocabulary and batches as the same text in PTB-format files; bad sources are
clear errors; the card names the data by its source."""

from __future__ import annotations

import pytest

datasets = pytest.importorskip("datasets")

from zoo.cards import dataset_name  # noqa: E402
from zoo.data import PCFGDataModule, PTBDataModule  # noqa: E402
from zoo.data.hf_text import check_source  # noqa: E402

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


@pytest.mark.parametrize("make", [text_source, parquet_source])
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


def test_the_pcfg_data_reads_a_datasets_source_too(tmp_path):
    data = PCFGDataModule(hf_dataset=parquet_source(tmp_path / "source"))
    data.setup()
    assert [len(w) for w in data.sentences("test")[0]] == [3, 7]


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


def test_the_card_names_the_source(tmp_path):
    source = parquet_source(tmp_path / "my-plays")
    assert dataset_name({"class_path": "zoo.data.PTBDataModule", "init_args": {"hf_dataset": source}}) == (
        "parquet files in my-plays"
    )
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
    given = CaptionsDataModule(hf_dataset=parquet_source(tmp_path / "source"), max_words=6)
    for data in (reference, given):
        data.setup()
    for split in ("train", "valid", "test"):
        assert [x.tolist() for x in given.datasets[split]] == [x.tolist() for x in reference.datasets[split]]
    assert len(given.datasets["test"]) == 1  # the 7-word test sentence is over max_words
    hub = {"hf_dataset": {"path": "mscoco_captions"}}
    assert dataset_name({"class_path": "zoo.data.CaptionsDataModule", "init_args": hub}) == "mscoco_captions"
