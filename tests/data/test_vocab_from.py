"""Text data with a given vocabulary (``vocab_from``): the ids of the initial weights are kept, words
the vocabulary lacks map to <unk>, each split's coverage is reported; zoo.hub.pretrained.load_vocab reads
vocab.json files, task checkpoints and from_pretrained sources."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest
import torch

import zoo
from zoo.data import PCFGDataModule, PTBDataModule
from zoo.data.vocab import Vocabulary
from zoo.hub.pretrained import CheckpointError, load_vocab

TAG = "hmm_categorical_n4096_d64.ptb_rank_space"
TEXT = {
    "train": ["the cat sat on the mat", "a dog sat on a log", "the zyzzyva sat"],
    "valid": ["the dog sat on the zyzzyva"],
    "test": ["a cat sat on the log"],
}


def write_text(directory: Path, text: dict = TEXT) -> Path:
    for split, lines in text.items():
        (directory / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n")
    return directory


def given_vocab(tmp_path: Path, unk: str | None = "<unk>") -> Path:
    tokens = ["<eos>", "the", "sat", "on", "cat", "a", "dog"] + ([unk] if unk else [])
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(Vocabulary(tokens, unk=unk).to_dict()))
    return path


def test_the_given_vocabulary_keeps_its_ids_and_maps_unseen_words_to_unk(tmp_path):
    data = PTBDataModule(data_dir=str(write_text(tmp_path)), vocab_from=str(given_vocab(tmp_path)))
    data.setup()
    vocab = data.vocab
    assert vocab.tokens[:3] == ["<eos>", "the", "sat"] and data.vocab_size == 8
    first = data.datasets["train"][0].tolist()
    assert first == vocab.encode("the cat sat on the mat", add_eos=True)
    assert vocab.id_to_token(first[-2]) == "<unk>"  # "mat" is not in the vocabulary
    train = data.coverage["train"]
    assert (train.tokens, dict(train.unseen)) == (15, {"mat": 1, "log": 1, "zyzzyva": 1})
    assert train.unknown_share == pytest.approx(3 / 15)
    assert "20.00% of 15 tokens are not in it (3 distinct words" in train.describe()
    assert dict(data.coverage["valid"].unseen) == {"zyzzyva": 1}


def test_more_training_text_does_not_move_the_ids(tmp_path):
    vocab = given_vocab(tmp_path)
    ids = []
    for extra in ([], ["dog dog dog on on on zyzzyva"]):
        folder = tmp_path / f"text{len(extra)}"
        folder.mkdir()
        text = {**TEXT, "train": TEXT["train"] + extra}
        data = PTBDataModule(data_dir=str(write_text(folder, text)), vocab_from=str(vocab))
        data.setup()
        ids.append(data.datasets["test"][0].tolist())
    assert ids[0] == ids[1]
    built = [PTBDataModule(data_dir=str(tmp_path / f"text{n}")).vocab for n in (0, 1)]
    assert built[0].tokens != built[1].tokens  # a vocabulary built by count would have moved them


def test_the_coverage_is_reported(tmp_path, caplog):
    data = PTBDataModule(data_dir=str(write_text(tmp_path)), vocab_from=str(given_vocab(tmp_path)))
    with caplog.at_level("INFO"):
        data.setup()
    lines = [r.getMessage() for r in caplog.records if "vocabulary of" in r.getMessage()]
    assert len(lines) == 3 and "train split: 20.00% of 15 tokens are not in it" in lines[0]
    assert "those map to '<unk>'" in lines[0]


def test_a_vocabulary_without_unk_is_refused(tmp_path):
    data = PTBDataModule(data_dir=str(write_text(tmp_path)), vocab_from=str(given_vocab(tmp_path, unk=None)))
    with pytest.raises(ValueError, match="has no unk token, so the words of this text that it lacks"):
        data.setup()


def test_a_bundled_model_vocabulary_reaches_the_pcfg_data_too(tmp_path):
    bundled = zoo.from_pretrained(TAG).vocab
    data = PCFGDataModule(data_dir=str(write_text(tmp_path)), vocab_from=TAG)
    data.setup()
    assert data.vocab == bundled and data.vocab_size == 10000
    assert data.datasets["test"][0]["tokens"].tolist() == bundled.encode("a cat sat on the log", add_eos=True)
    assert dict(data.coverage["train"].unseen) == {"mat": 1, "log": 1, "zyzzyva": 1}  # not in PTB's 10k


def test_load_vocab_reads_every_kind_of_source(tmp_path):
    bundled = zoo.from_pretrained(TAG).vocab
    assert load_vocab(TAG) == bundled
    folder = tmp_path / "folder"
    zoo.from_pretrained(TAG).save_pretrained(folder)
    assert load_vocab(folder) == bundled and load_vocab(folder / "vocab.json") == bundled
    checkpoint = tmp_path / "task.ckpt"
    torch.save({"state_dict": {}, "vocab": bundled.to_dict()}, checkpoint)
    assert load_vocab(checkpoint) == bundled
    torch.save({"state_dict": {}}, tmp_path / "none.ckpt")
    with pytest.raises(CheckpointError, match="none.ckpt records no vocabulary"):
        load_vocab(tmp_path / "none.ckpt")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="bad.json is not a readable vocabulary"):
        load_vocab(tmp_path / "bad.json")
    with pytest.raises(CheckpointError, match="records no vocabulary"):
        load_vocab("hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_exact")


def test_a_users_vocab_json_with_a_byte_order_mark_or_in_transformers_layout(tmp_path):
    """An editor's byte-order mark was refused ("Unexpected UTF-8 BOM"); a transformers-style {token: id}
    map gave an error listing all of its tokens (44,033 characters for 5,002)."""
    bundled = zoo.from_pretrained(TAG).vocab
    marked = tmp_path / "marked.json"
    marked.write_bytes(codecs.BOM_UTF8 + json.dumps(bundled.to_dict()).encode())
    assert load_vocab(marked) == bundled
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({token: i for i, token in enumerate(bundled.tokens)}))
    message = r"a map of 10,000 tokens to ids \('<eos>', '<unk>', 'the', ...\), as transformers' vocab.json"
    with pytest.raises(CheckpointError, match=message) as error:
        load_vocab(mapping)
    assert len(str(error.value)) < 400



def test_a_split_the_vocabulary_covers_says_so_alone(tmp_path, caplog):
    folder = write_text(tmp_path)
    built = PTBDataModule(data_dir=str(folder))
    built.setup()
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(built.vocab.to_dict()))
    data = PTBDataModule(data_dir=str(folder), vocab_from=str(path))
    with caplog.at_level("INFO"):
        data.setup()
    train = [r.getMessage() for r in caplog.records if "train split" in r.getMessage()]
    assert len(train) == 1 and "every one of" in train[0] and "map to" not in train[0], train
