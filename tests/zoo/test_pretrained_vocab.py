"""A text model's vocabulary in its pretrained-model folder: ``model.vocab`` -> ``vocab.json`` (with its
checksum in config.json) -> ``from_pretrained``'s ``model.vocab``, exactly; ``save_vocab`` for folders
saved without one; and every way the file can be wrong gets a clear CheckpointError."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from zoo_testlib import example_batch, scores

import zoo
from zoo.data.vocab import Vocabulary
from zoo.hub.pretrained import CheckpointError, save_vocab
from zoo.models import BernoulliHMM, CategoricalHMM

WORDS = [
    "the",
    "company",
    "said",
    "its",
    "profit",
    "rose",
    "in",
    "third",
    "quarter",
    "N",
    "$",
    "'s",
    "a-b",
    "x",
]


def tiny() -> CategoricalHMM:
    torch.manual_seed(0)
    return CategoricalHMM(15, 6, "rank-space", rank=3, embedding_dim=8, hidden_dim=8)


def vocabulary(unk: str | None = "<unk>", eos: str = "<eos>") -> Vocabulary:
    specials = [eos] if unk is None else [eos, unk]
    return Vocabulary(specials + WORDS[: 15 - len(specials)], eos=eos, unk=unk)


@pytest.fixture
def saved(tmp_path) -> tuple[CategoricalHMM, Path]:
    model = tiny()
    model.vocab = vocabulary()
    return model, model.save_pretrained(tmp_path / "model")


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _write_vocab(folder: Path, data) -> None:
    """Replace vocab.json and its checksum: a consistent folder with other content."""
    (folder / "vocab.json").write_text(data if isinstance(data, str) else json.dumps(data))
    _edit_config(folder, vocab_sha256=hashlib.sha256((folder / "vocab.json").read_bytes()).hexdigest())


@pytest.mark.parametrize(
    "vocab", [vocabulary(), vocabulary(unk=None), vocabulary(eos="</s>")], ids=["unk", "no-unk", "eos"]
)
def test_round_trip_keeps_the_vocabulary_exactly(tmp_path, vocab):
    model = tiny()
    model.vocab = vocab
    folder = model.save_pretrained(tmp_path / "m")
    names = ["README.md", "config.json", "model.safetensors", "vocab.json"]
    assert sorted(p.name for p in folder.iterdir()) == names
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_sha256"] == hashlib.sha256((folder / "vocab.json").read_bytes()).hexdigest()
    loaded = zoo.from_pretrained(folder)
    assert loaded.vocab == vocab and loaded.vocab is not vocab
    assert (loaded.vocab.tokens, loaded.vocab.eos, loaded.vocab.unk) == (vocab.tokens, vocab.eos, vocab.unk)
    sentence = "the company said its profit rose"
    assert loaded.vocab.encode(sentence, add_eos=True) == vocab.encode(sentence, add_eos=True)
    assert loaded.vocab.decode(loaded.vocab.encode(sentence)) == sentence.split()
    batch = example_batch(model)
    assert torch.equal(scores(loaded, batch), scores(model, batch))
    assert "`model.vocab`" in (folder / "README.md").read_text()  # the card says how to use it


def test_a_model_without_vocabulary_saves_and_loads_none(tmp_path, saved):
    folder = tiny().save_pretrained(tmp_path / "plain")
    assert not (folder / "vocab.json").exists()
    assert json.loads((folder / "config.json").read_text())["vocab_sha256"] is None
    assert zoo.from_pretrained(folder).vocab is None
    assert "`model.vocab`" not in (folder / "README.md").read_text()

def test_resaving_keeps_the_folders_vocabulary_and_a_different_one_needs_overwrite(saved):
    """A re-save of the same weights deleted the folder's vocab.json where the model had none (a re-export
    of a checkpoint after save_vocab added one) and replaced it with a different one, without overwrite:
    the folder's results then described another model (audit V)."""
    model, folder = saved
    vocab_file = (folder / "vocab.json").read_bytes()
    tiny().save_pretrained(folder)  # the same weights, no vocabulary: the folder's is kept
    assert (folder / "vocab.json").read_bytes() == vocab_file
    assert zoo.from_pretrained(folder).vocab == model.vocab
    other = tiny()
    other.vocab = Vocabulary(["<eos>", "<unk>", *reversed(WORDS[:13])], eos="<eos>", unk="<unk>")
    with pytest.raises(FileExistsError, match=r"other arguments, weights or vocabulary .*overwrite=True"):
        other.save_pretrained(folder)
    assert (folder / "vocab.json").read_bytes() == vocab_file
    other.save_pretrained(folder, overwrite=True)
    assert zoo.from_pretrained(folder).vocab == other.vocab
    save_vocab(folder, None)  # the way to remove one
    assert not (folder / "vocab.json").exists() and zoo.from_pretrained(folder).vocab is None


def test_folders_saved_before_vocabularies_load_as_before(saved):
    _, folder = saved
    (folder / "vocab.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    del config["vocab_sha256"]
    (folder / "config.json").write_text(json.dumps(config))
    assert zoo.from_pretrained(folder).vocab is None


def test_assigning_a_vocabulary_checks_it():
    model = tiny()
    with pytest.raises(
        ValueError, match="the vocabulary has 16 tokens but the CategoricalHMM has vocab_size = 15"
    ):
        model.vocab = Vocabulary(["<eos>", "<unk>", *WORDS])
    with pytest.raises(TypeError, match="must be a zoo.data.Vocabulary or None, got list"):
        model.vocab = ["<eos>"]
    with pytest.raises(ValueError, match="BernoulliHMM reads no word ids"):
        BernoulliHMM(6, 5, embedding_dim=8, hidden_dim=8).vocab = vocabulary()
    assert model.vocab is None
    model.vocab = vocabulary()
    model.vocab = None
    assert model.vocab is None


def test_a_vocabulary_of_the_wrong_size_is_a_clear_load_error(saved):
    _, folder = saved
    _write_vocab(folder, {"eos": "<eos>", "unk": "<unk>", "tokens": ["<eos>", "<unk>", *WORDS[:12]]})
    with pytest.raises(
        CheckpointError,
        match="vocab.json does not fit the model: the vocabulary has 14 tokens but .* vocab_size = 15",
    ):
        zoo.from_pretrained(folder)


def test_broken_vocabulary_files_are_clear_errors(saved):
    _, folder = saved
    original = (folder / "vocab.json").read_text()
    (folder / "vocab.json").write_text(original.replace('"company"', '"firm"'))
    with pytest.raises(CheckpointError, match="vocab.json does not match the checksum in config.json"):
        zoo.from_pretrained(folder)
    _write_vocab(folder, original[: len(original) // 2])
    with pytest.raises(CheckpointError, match="vocab.json is not a readable vocabulary"):
        zoo.from_pretrained(folder)
    _write_vocab(folder, {"eos": "<eos>", "unk": "<unk>", "tokens": ["<eos>", "<unk>", *WORDS[:12], "the"]})
    with pytest.raises(CheckpointError, match="not a readable vocabulary: tokens must be unique"):
        zoo.from_pretrained(folder)
    (folder / "vocab.json").unlink()
    with pytest.raises(CheckpointError, match="records a vocabulary .* has no vocab.json"):
        zoo.from_pretrained(folder)
    (folder / "vocab.json").write_text(original)
    _edit_config(folder, vocab_sha256=None)
    with pytest.raises(CheckpointError, match="vocab.json is not recorded in config.json .*save_vocab"):
        zoo.from_pretrained(folder)
    _edit_config(folder, vocab_sha256=7)
    with pytest.raises(CheckpointError, match="'vocab_sha256' must be a str or null, got 7"):
        zoo.from_pretrained(folder)


def test_save_vocab_adds_replaces_and_removes_it(tmp_path):
    model = tiny()
    folder = model.save_pretrained(tmp_path / "m", results={"dataset": "ptb", "metrics": {"test/ppl": 9.5}})
    weights = (folder / "model.safetensors").read_bytes()
    save_vocab(folder, vocabulary())
    loaded = zoo.from_pretrained(folder)
    assert loaded.vocab == vocabulary() and (folder / "model.safetensors").read_bytes() == weights
    assert (folder / "results.json").is_file() and "`model.vocab`" in (folder / "README.md").read_text()
    save_vocab(folder, vocabulary(unk=None))
    assert zoo.from_pretrained(folder).vocab == vocabulary(unk=None)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ValueError, match="16 tokens but the CategoricalHMM has vocab_size = 15"):
        save_vocab(folder, Vocabulary(["<eos>", "<unk>", *WORDS]))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # a misfit changes nothing
    save_vocab(folder, None)
    assert not (folder / "vocab.json").exists() and zoo.from_pretrained(folder).vocab is None


def test_save_vocab_needs_a_folder_that_loads(tmp_path, saved):
    _, folder = saved
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "model.safetensors").write_bytes(b"broken")
    with pytest.raises(CheckpointError, match="does not match the checksum"):
        save_vocab(copy, vocabulary(unk=None))
    assert (copy / "vocab.json").read_bytes() == (folder / "vocab.json").read_bytes()
