"""What users' text files hold: old Mac line endings, Unicode line boundaries inside a line, tabs and
runs of spaces, UTF-16 (an audit of users' own data found each silently mis-read)."""

from __future__ import annotations

import codecs
import json
import warnings

import pytest

from zoo.data import PTBDataModule, read_bracketed, read_step_annotations, read_video_list
from zoo.data.captions import CaptionsDataModule, read_caption_lines, read_coco_karpathy
from zoo.data.utf8 import read_utf8, text_lines

HF = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gpt2"))


@pytest.mark.parametrize(
    "text, lines",
    [("a b\nc\n", ["a b", "c"]), ("a b\r\nc\r\n", ["a b", "c"]), ("a b\rc\r", ["a b", "c"]),
     ("a b\rc", ["a b", "c"]), ("a\r\n\rb", ["a", "", "b"]), ("", []), ("\n", [""]),
     ("a\x85b\u2028c\x0cd\n", ["a\x85b\u2028c\x0cd"])],
    ids=["unix", "windows", "old-mac", "no-last-newline", "mixed", "empty", "one-blank", "unicode-breaks"],
)  # fmt: skip
def test_lines_end_where_universal_newlines_end_them(tmp_path, text, lines):
    """As Python's open() and datasets' text reader: \\n, \\r\\n, a lone \\r; not U+0085 (what iconv makes
    of a Windows '...'), U+2028 or a form feed, which str.splitlines also splits at."""
    assert text_lines(text) == lines
    path = tmp_path / "f.txt"
    path.write_bytes(text.encode())
    with open(path, newline=None, encoding="utf-8") as file:
        assert text_lines(text) == file.read().split("\n")[: len(lines)]


def write_splits(folder, name, texts):
    for split, text in texts.items():
        (folder / name.format(split=split)).write_bytes(text.encode())


def test_an_old_mac_ptb_file_is_one_sentence_a_line(tmp_path):
    """A CR-only file was one sentence (1 instead of 3), where the hf_dataset text reader read 3."""
    write_splits(
        tmp_path, "ptb.{split}.txt", {"train": "a cat\rthe dog sat\ra b\r", "valid": "a\r", "test": "b\r"}
    )
    data = PTBDataModule(data_dir=str(tmp_path))
    data.setup()
    assert len(data.datasets["train"]) == 3
    files = {split: str(tmp_path / f"ptb.{split}.txt") for split in ("train", "valid", "test")}
    through_hf = PTBDataModule(
        hf_dataset={"path": "text", "data_files": {**files, "validation": files["valid"]}}
    )
    through_hf.setup()
    assert len(through_hf.datasets["train"]) == 3


def test_a_caption_holding_a_unicode_line_boundary_stays_one_caption(tmp_path):
    """U+0085, U+2028 or a form feed split a caption in two, and the warnings' line numbers then
    named the wrong lines ("first at line 5" of a 4-line file)."""
    (tmp_path / "train.txt").write_text("a dog\x85 runs\n\nthe\u2028cat\na\x0cmat\n")
    with pytest.warns(UserWarning, match=r"train.txt: 1 of 4 lines left out \(first at line 2\): blank"):
        assert read_caption_lines(tmp_path, "train") == ["a dog runs", "the cat", "a mat"]  # white space
    (tmp_path / "train.txt").write_bytes(b"a dog\rthe cat\r")
    assert read_caption_lines(tmp_path, "train") == ["a dog", "the cat"]


def test_caption_white_space_is_one_space_as_through_hf_dataset(tmp_path, cache):
    """The text source kept a tab and runs of spaces as GPT-2 tokens ([64, 197, 9703, 220, 4539]) where
    hf_dataset's text reader gave the words joined by single spaces ([64, 3290, 4539])."""
    write_splits(
        tmp_path, "{split}.txt", {"train": "a\tdog  runs \n", "valid": "a dog\n", "test": "a  dog\n"}
    )
    direct = CaptionsDataModule("text", str(tmp_path), tokenizer_cache=cache)
    direct.setup()
    files = {split: str(tmp_path / f"{split}.txt") for split in ("train", "valid", "test")}
    source = {
        "path": "text",
        "data_files": {"train": files["train"], "validation": files["valid"], "test": files["test"]},
    }
    through_hf = CaptionsDataModule(hf_dataset=source, tokenizer_cache=cache)
    through_hf.setup()
    for split in ("train", "valid", "test"):
        assert direct.datasets[split][0].tolist() == through_hf.datasets[split][0].tolist()
    assert direct.datasets["train"][0].tolist() == [64, 3290, 4539, 50256]


def test_karpathy_captions_without_words_are_said(tmp_path, cache):
    """A sentence whose tokens are empty and whose raw text has no word ("...", "") was dropped from
    every split, test included, without a word."""
    images = [
        {"split": split, "sentences": [{"tokens": ["a", "cat"], "raw": "A cat."}, {"tokens": [], "raw": raw}]}
        for split, raw in (("train", "..."), ("val", "!!"), ("test", ""))
    ]
    (tmp_path / "coco.json").write_text(json.dumps({"images": images}))
    assert read_coco_karpathy(tmp_path / "coco.json", "test") == ["a cat", ""]
    data = CaptionsDataModule("coco-karpathy", str(tmp_path / "coco.json"), tokenizer_cache=cache)
    with pytest.warns(UserWarning) as caught:
        data.setup()
    said = [str(w.message) for w in caught]
    for split in ("train", "valid", "test"):
        assert any(
            f"{split} split: 1 of 2 captions left out (first at caption 2): no words" in message
            for message in said
        ), said
    assert all(len(data.datasets[split]) == 1 for split in ("train", "valid", "test"))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_text_is_an_error_that_names_it(tmp_path, encoding):
    """UTF-16 got the Latin-1 hint, which turned it into text read as words like 'ÿþt\\x00h\\x00e\\x00';
    without a byte-order mark its ASCII text decoded as UTF-8, a NUL after each letter."""
    path = tmp_path / "ptb.train.txt"
    path.write_bytes("the cat\nsat\n".encode(encoding))
    with pytest.raises(
        ValueError, match=r"ptb.train.txt is not UTF-8 text: line 1 .*iconv -f utf-16 -t utf-8"
    ):
        read_utf8(path)
    path.write_bytes("the cat\nsat\n".encode("utf-16").decode("latin-1").encode("utf-8"))  # the old hint
    with pytest.raises(ValueError, match="holds a NUL byte"):
        read_utf8(path)
    path.write_bytes(codecs.BOM_UTF8 + "the café\n".encode())
    assert read_utf8(path) == "the café\n"


def test_crosstask_lists_and_annotations_end_lines_as_text_files_do(tmp_path):
    (tmp_path / "videos.csv").write_bytes(b"23521,v0,url\r23521,v1\r")
    assert read_video_list(tmp_path / "videos.csv") == [("23521", "v0"), ("23521", "v1")]
    (tmp_path / "steps.csv").write_bytes(b"1,2.0,4.5\r3,6,9\r")
    assert read_step_annotations(tmp_path / "steps.csv") == [(1, 2.0, 4.5), (3, 6.0, 9.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text_lines("a\r\nb") == ["a", "b"]


def read_both_ways(folder, text: str) -> tuple[PTBDataModule, PTBDataModule]:
    """``text`` as every split's file, read through data_dir and through hf_dataset (set up)."""
    write_splits(folder, "ptb.{split}.txt", {"train": text, "valid": text, "test": text})
    files = {split: str(folder / f"ptb.{split}.txt") for split in ("train", "valid", "test")}
    readers = PTBDataModule(data_dir=str(folder)), PTBDataModule(
        hf_dataset={"path": "text", "data_files": {**files, "validation": files["valid"]}}
    )
    for reader in readers:
        reader.setup()
    return readers


def test_a_byte_order_mark_inside_a_file_is_dropped_as_through_hf_dataset(tmp_path):
    """Two Notepad files concatenated hold a mark at the start of the second one's first line: it stuck
    to that line's first word through data_dir (a word '\\ufeffc'), where hf_dataset drops it."""
    text = "a b\n\ufeffc d\n"
    assert text_lines(text) == ["a b", "c d"]
    data, through_hf = read_both_ways(tmp_path, text)
    assert "\ufeffc" not in data.vocab.tokens
    for split in ("train", "valid", "test"):
        assert [x.tolist() for x in data.datasets[split]] == [x.tolist() for x in through_hf.datasets[split]]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_errors_name_the_line_whatever_ends_the_lines(tmp_path, newline):
    """A file of old Mac line endings (a lone CR each) was reported as one line: "line 1, column 85"."""
    path = tmp_path / "ptb.train.txt"
    path.write_bytes(newline.encode().join([b"a b", b"c d", b"e \xff f"]))  # not UTF-8 at line 3
    with pytest.raises(ValueError, match=r"line 3 \(byte"):
        read_utf8(path)
    trees = tmp_path / "trees.mrg"
    trees.write_text(newline.join(["(S (A a) (B b))", "(S (A a) (B b))", "(S (A a) ())"]), newline="")
    with pytest.raises(ValueError, match="line 3, column 10"):
        read_bracketed(trees)


def test_a_file_is_read_in_nfc_through_data_dir_and_hf_dataset(tmp_path):
    """The same sentence typed with composed and decomposed accents is one sentence of the same ids,
    through either reader; the vocabulary holds one "café"."""
    composed, decomposed = "le caf\u00e9 noir", "le cafe\u0301 noir"
    text = f"{composed}\n{decomposed}\n"
    data, through_hf = read_both_ways(tmp_path, text)
    assert data.vocab.size == 5  # <eos>, <unk>, le, café, noir
    for reader in (data, through_hf):
        first, second = reader.datasets["train"]
        assert first.tolist() == second.tolist()
    assert data.sentences("train")[1] == composed.split()


def test_a_byte_order_mark_starting_a_line_of_a_tree_file_is_dropped(tmp_path):
    """It was 'text outside brackets' (or part of the word after it), where a text file drops it."""
    path = tmp_path / "trees.mrg"
    path.write_bytes("(S (A the) (B cat))\n\ufeff(S (A a) (B dog))\r\ufeff(S (A one) (B more))".encode())
    assert [tree.words() for tree in read_bracketed(path)] == [["the", "cat"], ["a", "dog"], ["one", "more"]]
