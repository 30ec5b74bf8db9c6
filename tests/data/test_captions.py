"""Caption readers (Karpathy's dataset_coco.json, one caption a line, short PTB) and CaptionsDataModule."""

from __future__ import annotations

import json
import warnings

import pytest

from zoo.data.captions import (
    CaptionEncoder,
    CaptionsDataModule,
    read_caption_lines,
    read_captions,
    read_coco_karpathy,
)
from zoo.data.left_out import BLANK


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gpt2"))


def write_karpathy(path):
    def image(split, *captions):
        return {
            "split": split,
            "sentences": [{"tokens": c.split(), "raw": c.capitalize() + "."} for c in captions],
        }

    images = [
        image("train", "a man riding a horse", "a person on a horse"),
        image("restval", "two dogs play in the snow"),
        image("val", "a red bus on a street"),
        image("test", "a plate of food", "a sandwich on a plate"),
    ]
    path.write_text(json.dumps({"images": images, "dataset": "coco"}))


def test_karpathy_splits(tmp_path):
    path = tmp_path / "dataset_coco.json"
    write_karpathy(path)
    assert read_coco_karpathy(path, "train") == [
        "a man riding a horse", "a person on a horse", "two dogs play in the snow",
    ]  # fmt: skip
    assert read_coco_karpathy(path, "valid") == ["a red bus on a street"]
    assert read_coco_karpathy(path, "test") == ["a plate of food", "a sandwich on a plate"]


def test_a_karpathy_sentence_without_tokens_is_tokenized_as_the_others(tmp_path):
    """Its raw text, lower-cased without punctuation, as Karpathy's tokens are (audit)."""
    images = [{"split": "test", "sentences": [{"tokens": [], "raw": "To car, next park."}]}]
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": images}))
    assert read_coco_karpathy(tmp_path / "dataset_coco.json", "test") == ["to car next park"]


def test_karpathy_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset_coco.json"):
        read_coco_karpathy(tmp_path / "missing.json", "train")
    bad = tmp_path / "bad.json"
    bad.write_text('{"annotations": []}')
    with pytest.raises(ValueError, match="not Karpathy's dataset_coco.json"):
        read_coco_karpathy(bad, "train")
    bad.write_text('{"images": [{"filename": "x.jpg"}]}')
    with pytest.raises(ValueError, match="'split' and 'sentences'"):
        read_coco_karpathy(bad, "train")


def test_caption_lines_skip_blank_lines(tmp_path):
    """Left out with a warning that counts them and names the first line, as the other text readers
    do (they went silently: audit)."""
    (tmp_path / "train.txt").write_text("a cat\n\n  a dog on a mat  \n \n")
    with pytest.warns(UserWarning, match=r"train.txt: 2 of 4 lines left out \(first at line 2\): blank"):
        assert read_caption_lines(tmp_path, "train") == ["a cat", "a dog on a mat"]
    with pytest.raises(FileNotFoundError, match="valid.txt"):
        read_caption_lines(tmp_path, "valid")


def test_text_source_batches(tmp_path, cache):
    for split, lines in (("train", ["a cat sat", "", "Hello world", "one two three four"]),
                         ("valid", ["a dog"]), ("test", ["a mat", "hi"])):  # fmt: skip
        (tmp_path / f"{split}.txt").write_text("\n".join(lines) + "\n")
    data = CaptionsDataModule("text", str(tmp_path), max_words=3, batch_size=8, tokenizer_cache=cache)
    with pytest.warns(UserWarning) as caught:
        data.setup()
    # numbered by the file's lines, the blank one included (it was "caption 3", among non-blank lines)
    assert [str(w.message) for w in caught] == [
        f"{tmp_path / 'train.txt'}: 1 of 4 lines left out (first at line 2): {BLANK}",
        f"source='text' ({tmp_path}) train split: 1 of 4 lines left out (first at line 4): "
        "over max_words = 3 words, in evaluations too",
    ]  # the other splits lose none
    assert len(data.datasets["train"]) == 2  # "one two three four" has 4 words > max_words
    batch = next(iter(data.val_dataloader()))
    assert batch["tokens"][0, : batch["lengths"][0]].tolist() == [64, 3290, 50256]  # "a dog" + eos
    train = {tuple(data.datasets["train"][i].tolist()) for i in range(2)}
    assert (15496, 995, 50256) in train
    assert data.vocab_size == 50257


def test_empty_captions_are_a_clear_error(tmp_path, cache):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a cat\n")
    (tmp_path / "valid.txt").write_text("\n  \n")
    data = CaptionsDataModule("text", str(tmp_path), tokenizer_cache=cache)
    with pytest.raises(ValueError, match="valid split of source='text'.*no sentences"):
        data.setup()


def test_short_ptb_default(cache):
    data = CaptionsDataModule(max_words=6, max_sentences=50, batch_size=16, tokenizer_cache=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what max_words leaves out is not news: it defines ptb-short
        sentences = data.sentences("test")
    assert len(sentences) == 50 and all(1 <= len(s.split()) <= 6 for s in sentences)
    assert read_captions("ptb-short", "test")[0].split()[0] == "no"  # PTB's test split, in order
    data.setup()
    batch = next(iter(data.train_dataloader()))
    lengths = batch["lengths"]
    assert batch["tokens"].shape == (len(lengths), int(lengths.max()))
    first = batch["tokens"][0, : lengths[0]].tolist()
    assert first[-1] == 50256 and 50256 not in first[:-1]
    assert data.tokenizer.decode(first[:-1]).strip() in data.sentences("train")


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="source must be one of"):
        CaptionsDataModule("flickr")
    with pytest.raises(ValueError, match="max_words must be a positive int"):
        CaptionsDataModule(max_words=0)
    with pytest.raises(ValueError, match="needs path="):
        read_captions("coco-karpathy", "train")
    with pytest.raises(ValueError, match="split must be one of"):
        read_captions("ptb-short", "dev")


def test_a_caption_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    (tmp_path / "train.txt").write_bytes(b"a dog runs\na caf\xe9 at night\n")
    with pytest.raises(ValueError, match=r"train.txt is not UTF-8 text: line 2 \(byte 16, b'\\xe9'\)"):
        read_caption_lines(tmp_path, "train")


def test_the_text_end_of_text_inside_a_caption_is_encoded_as_its_characters(tmp_path, cache):
    """GPT-2's tokenizer matched the text "<|endoftext|>" as the end-of-text id 50256, which ends every
    caption: a caption holding it got an end in its middle. It is now its characters, with a warning."""
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a cat sat\n")
    (tmp_path / "train.txt").write_text("a cat sat\na dog <|endoftext|> ran\n")
    data = CaptionsDataModule("text", str(tmp_path), tokenizer_cache=cache)
    match = r"train split: 1 caption\(s\) hold the text '<\|endoftext\|>' \(first: line 2\), encoded as its"
    with pytest.warns(UserWarning, match=match):
        data.setup()
    ids = data.datasets["train"][1].tolist()
    assert ids.count(50256) == 1 and ids[-1] == 50256
    assert data.tokenizer.decode(ids[:-1]) == "a dog <|endoftext|> ran"
    assert CaptionEncoder(cache, None)("a dog <|endoftext|> ran".split()) == ids  # the Hugging Face path


def test_spread_by_length_takes_the_middle_of_each_slice():
    from zoo.data.captions import spread_by_length

    lengths = [9, 1, 8, 2, 7, 3, 6, 4, 5, 10]
    picked = spread_by_length(lengths, 5)
    assert sorted(lengths[i] for i in picked) == [2, 4, 6, 8, 10] and picked == sorted(picked)
    assert spread_by_length(lengths, 10) == spread_by_length(lengths, 50) == list(range(10))
    assert spread_by_length([3, 3, 3, 3], 2) == [1, 3]  # ties in their order


def test_valid_sentences_spread_over_the_lengths(tmp_path, cache):
    """--trainer.limit_val_batches took the shortest sentences (evaluation batches are sorted by
    length): the VAE recipes validated on the 128 shortest of 721 (audit). valid_sentences samples the
    whole range, and leaves the other splits whole."""
    sentences = [" ".join(["word"] * n) for n in range(1, 13)] * 2
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("\n".join(sentences) + "\n")
    data = CaptionsDataModule("text", str(tmp_path), valid_sentences=4, batch_size=2, tokenizer_cache=cache)
    data.setup()
    valid = data.datasets["valid"]
    assert len(valid) == 4 and len(data.datasets["test"]) == len(data.datasets["train"]) == 24
    assert sorted(valid.lengths.tolist()) == [3, 6, 9, 12]  # words + <|endoftext|>: 2, 5, 8, 11 words
    with pytest.raises(ValueError, match="valid_sentences must be a positive int or None, got 0"):
        CaptionsDataModule("text", str(tmp_path), valid_sentences=0)
