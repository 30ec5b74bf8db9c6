"""What the text readers leave out of a split is said, with a count and the first place: a grammar's
sentences under 2 words, in every split, from text files, tree files or a datasets source (audit)."""

from __future__ import annotations

import warnings

import pytest

from zoo.data import PCFGDataModule


def test_the_pcfg_data_warns_of_the_lines_it_leaves_out(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"ptb.{split}.txt").write_text("the cat sat\nhello\n\na dog ran\n")
    data = PCFGDataModule(data_dir=str(tmp_path))
    with pytest.warns(UserWarning) as caught:
        data.setup()
    left_out = [str(w.message) for w in caught if "left out" in str(w.message)]
    assert left_out == [
        f"{tmp_path / f'ptb.{split}.txt'}: 2 of 4 lines left out (first at line 2): blank or under 2 words "
        "(a binary tree needs 2)"
        for split in ("train", "valid", "test")
    ]  # one a split: the vocabulary's reading of the training text says nothing more


def test_a_tree_file_counts_trees(tmp_path):
    trees = "(S (NP (DT the) (NN cat)) (VP (VBD sat)))\n\n(S (NN hello))\n"
    files = {}
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(trees)
        files[split] = str(tmp_path / f"{split}.txt")
    data = PCFGDataModule(tree_files=files)
    with pytest.warns(UserWarning, match=r"test.txt: 1 of 2 trees left out \(first at tree 2\)"):
        data.setup()
    assert data.input_unit == "tree"


def test_nothing_left_out_nothing_said(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"ptb.{split}.txt").write_text("the cat sat\na dog ran\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PCFGDataModule(data_dir=str(tmp_path)).setup()


def test_training_sentences_over_max_length_are_said(tmp_path):
    """The recipes' max_length dropped training sentences without a word (validation and test keep
    theirs)."""
    for split in ("train", "valid", "test"):
        (tmp_path / f"ptb.{split}.txt").write_text("the cat sat\na dog ran far away today\nthe cat\n")
    data = PCFGDataModule(data_dir=str(tmp_path), max_length=3, batch_size=4, batch_tokens=None)
    data.setup("fit")
    message = r"the training split: 1 of 3 sentences left out \(first at sentence 2\): over max_length = 3"
    with pytest.warns(UserWarning, match=message):
        assert sum(len(b["lengths"]) for b in data.train_dataloader()) == 2
    assert sum(len(b["lengths"]) for b in data.val_dataloader()) == 3
