"""The vocabulary of a word-level text DataModule: built from its training text, or given.

A model fine-tuned from weights trained on other text must keep their word ids: ``vocab_from`` names
the vocabulary to use instead (a ``vocab.json``, a ``zoo fit`` checkpoint, or any ``from_pretrained``
source), and words it lacks map to ``<unk>``. ``zoo fit`` passes the ``init_from`` source here unless
the recipe names another. ``setup`` then reports how much of each split the vocabulary covers.
"""

from __future__ import annotations

import warnings

from zoo.data.vocab import Coverage, Vocabulary
from zoo.extras import imported

rank_zero_info = imported("lightning.pytorch.utilities", "train", "zoo.data's DataModules").rank_zero_info


class TextVocabulary:
    """Mixin of ``PTBDataModule`` and ``PCFGDataModule``: ``vocab`` is ``build_vocab()`` of the training
    text, or the vocabulary of ``vocab_from``; ``coverage`` maps each split to its ``Coverage``."""

    vocab_from: str | None
    _vocab: Vocabulary | None = None
    coverage: dict[str, Coverage] | None = None

    def build_vocab(self) -> Vocabulary:
        raise NotImplementedError

    @property
    def vocab(self) -> Vocabulary:
        if self._vocab is None:
            self._vocab = self.build_vocab() if self.vocab_from is None else self._given_vocab()
        return self._vocab

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    def _given_vocab(self) -> Vocabulary:
        from zoo.hub.pretrained import load_vocab

        vocab = load_vocab(self.vocab_from)
        if vocab.unk is None:
            raise ValueError(
                f"the vocabulary of vocab_from={self.vocab_from!r} has no unk token, so the words of this "
                "text that it lacks have no id; give a vocabulary with one (e.g. '<unk>')"
            )
        return vocab

    def report_coverage(self, splits: dict[str, list[list[str]]]) -> None:
        """Set ``coverage`` and print one line a split when the vocabulary is given or misses words; warn
        about sentences that hold the end token as a word (it gets the end token's id there)."""
        eos = self.vocab.eos
        for split, sentences in splits.items():
            holding = [i for i, words in enumerate(sentences, 1) if eos in words]
            if holding:
                warnings.warn(
                    f"{split} split: {len(holding)} sentence(s) hold the word {eos!r}, the vocabulary's end "
                    "token: it gets the end token's id there, inside the sentence, which goes on (a model "
                    f"scores an end of sentence in its middle; first: sentence {holding[0]}, blank lines not "
                    "counted); rename or drop it",
                    stacklevel=2,
                )
        self.coverage = {split: self.vocab.coverage(sentences) for split, sentences in splits.items()}
        origin = "the training text" if self.vocab_from is None else repr(self.vocab_from)
        for split, coverage in self.coverage.items():
            if self.vocab_from is not None or coverage.unseen:
                mapped = f"; those map to {self.vocab.unk!r}" if coverage.unseen else ""
                rank_zero_info(
                    f"vocabulary of {origin} ({self.vocab.size:,} tokens), {split} split: "
                    f"{coverage.describe()}{mapped}"
                )
