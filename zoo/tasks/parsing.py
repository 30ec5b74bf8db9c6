"""``ParsingTask``: a ``LikelihoodTask`` for grammars (``zoo.models.PCFG``): unsupervised parsing.

On top of maximum likelihood (loss -sum log Z / sum events, validation / test NLL and perplexity;
with the PCFG's ``num_events`` = words + 1 the perplexity is Kim et al. 2019's PCFG convention) it adds

* a length curriculum (Kim et al. 2019): in epoch e only training sentences of at most
  min(curriculum_final, curriculum_start + e * curriculum_increment) words are used; the others are
  dropped from their batch (a batch left empty is skipped), as the reference code does; under DDP a
  process whose batch is left empty takes part in the step with zero gradients, and a step that
  leaves every process's batch empty takes no optimizer step, as on one process;
* unlabelled parsing F1 whenever an evaluation batch carries gold spans (``batch["spans"]``,
  B x M x 2 long (start, end) over word positions, -1 padding; ``zoo.data.PCFGDataModule`` with
  gold trees provides it): ``val/sentence_f1`` and ``val/corpus_f1`` (and ``test/...``), in %, as the
  papers and the cards report them, of the MBR trees (CKY over span marginals), through
  ``zoo.metrics.SentenceF1`` / ``CorpusF1``;
* ``predict_step``: MBR trees of each sentence as bracketed strings ``(X (T w1) (X ...))`` (``X``
  a constituent, ``T`` a word's preterminal), with log p and events; ``TreeWriter`` writes them to a
  file, one tree a line, in corpus order;
* ``sample_text``: sentences drawn from the trained grammar, decoded with the model's vocabulary (the
  data's, which the task gives the model; a checkpoint keeps it).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from zoo.metrics import CorpusF1, SentenceF1
from zoo.models.base import ZooModel
from zoo.tasks.likelihood import DEFAULT_EVAL_MEMORY, LikelihoodTask, evaluation_generator
from zoo.tasks.prediction_writer import EpochWriter, listed


def bracketed(spans: Tensor | list, words: list[str]) -> str:
    """An unlabelled binary tree as a bracketed string: ``spans`` (2n-1) x 2 (or more) rows
    (start, end) in pre-order (-1 rows ignored) over ``words`` (n). Nodes are ``(X ...)``, leaves
    ``(T word)``, a bracket inside a word written -LRB- / -RRB- (the Penn Treebank's convention: ``:)``
    becomes ``:-RRB-``); the string reads back with ``zoo.data.parse_bracketed``."""
    rows = [(int(r[0]), int(r[1])) for r in (spans.tolist() if isinstance(spans, Tensor) else spans)]
    rows = [r for r in rows if r != (-1, -1)]
    n = len(words)
    if len(rows) != 2 * n - 1 or (n and rows[0] != (0, n)):
        raise ValueError(
            f"a binary tree of {n} words needs 2n-1 = {2 * n - 1} spans with root (0, {n}), got {rows}"
        )
    position = iter(rows)

    def build() -> str:
        i, k = next(position)
        if k - i == 1:
            return f"(T {words[i].replace('(', '-LRB-').replace(')', '-RRB-')})"
        left = build()
        right = build()
        return f"(X {left} {right})"

    return build()


class ParsingTask(LikelihoodTask):
    """Maximum likelihood training of a grammar with parsing metrics (module docstring).

    Args:
        model: a ``zoo.models.PCFG`` (or its spec dict); it must have ``parse(batch)``.
        lr, weight_decay, betas, lr_factor, lr_patience, init_from, eval_seeds, max_eval_length,
        max_eval_memory: as
            ``LikelihoodTask`` (betas default to Kim et al.'s (0.75, 0.999)).
        curriculum_start: the longest training sentence (in words) in the first epoch; None: no
            curriculum.
        curriculum_increment: words added to that limit each epoch.
        curriculum_final: the limit stops growing here (None: it grows without bound).
    """

    def __init__(
        self,
        model: ZooModel | dict,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.75, 0.999),
        lr_factor: float = 0.5,
        lr_patience: int = 2,
        init_from: str | None = None,
        eval_seeds: int = 5,
        max_eval_length: int | None = None,
        max_eval_memory: int | str | None = DEFAULT_EVAL_MEMORY,
        curriculum_start: int | None = None,
        curriculum_increment: int = 1,
        curriculum_final: int | None = None,
    ):
        super().__init__(
            model,
            lr=lr,
            weight_decay=weight_decay,
            betas=betas,
            lr_factor=lr_factor,
            lr_patience=lr_patience,
            init_from=init_from,
            eval_seeds=eval_seeds,
            max_eval_length=max_eval_length,
            max_eval_memory=max_eval_memory,
        )
        if not callable(getattr(self.model, "parse", None)):
            raise TypeError(
                "ParsingTask needs a grammar with parse(batch) (zoo.models.PCFG), "
                f"got {type(self.model).__name__}"
            )
        for name, value in (("curriculum_start", curriculum_start), ("curriculum_final", curriculum_final)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 2):
                raise ValueError(f"{name} must be None or an int >= 2 (words), got {value!r}")
        if not isinstance(curriculum_increment, int) or curriculum_increment < 0:
            raise ValueError(f"curriculum_increment must be an int >= 0, got {curriculum_increment!r}")
        if (
            curriculum_start is not None
            and curriculum_final is not None
            and curriculum_final < curriculum_start
        ):
            raise ValueError(
                f"curriculum_final ({curriculum_final}) must be >= curriculum_start ({curriculum_start})"
            )
        self.save_hyperparameters(
            {
                **dict(self.hparams),
                "curriculum_start": curriculum_start,
                "curriculum_increment": curriculum_increment,
                "curriculum_final": curriculum_final,
            }
        )
        self._trained_since_step: bool | None = None  # see on_train_batch_start (None: not tracked)
        self.f1 = torch.nn.ModuleDict(
            {
                f"{stage}_{name}": metric(percent=True)
                for stage in ("val", "test")
                for name, metric in (("sentence_f1", SentenceF1), ("corpus_f1", CorpusF1))
            }
        )

    def max_train_words(self, epoch: int | None = None) -> int | None:
        """The curriculum's length limit (words) in ``epoch`` (default: the current one); None: none."""
        h = self.hparams
        if h.curriculum_start is None:
            return None
        epoch = self.current_epoch if epoch is None else epoch
        limit = h.curriculum_start + epoch * h.curriculum_increment
        return limit if h.curriculum_final is None else min(limit, h.curriculum_final)

    def _kept(self, batch: dict[str, Tensor]) -> Tensor | None:
        """(B,) bool: the batch's sentences within this epoch's curriculum; None: no curriculum."""
        limit = self.max_train_words()
        return None if limit is None else batch["lengths"] - 1 <= limit

    def on_train_batch_start(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Under DDP and a curriculum, note whether any process has a sentence to train on since the
        last optimizer step (one reduction a step), for ``optimizer_step``."""
        super().on_train_batch_start(batch, batch_idx)
        keep = self._kept(batch)
        if keep is not None and self._distributed():
            anywhere = self.trainer.strategy.reduce(keep.sum(), reduce_op="sum")
            self._trained_since_step = bool(self._trained_since_step) or bool(anywhere > 0)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        """A step whose batches the curriculum leaves empty on every DDP process takes no optimizer
        step (AdamW would move the weights on its moments alone); its closure (the training steps'
        zero losses and their backward, which every process must take part in) still runs. One
        process skips such a step by ``training_step`` returning None."""
        trained = self._trained_since_step
        if trained is not None:  # tracked: DDP under a curriculum
            self._trained_since_step = False
        if trained is False:
            optimizer_closure()
            return
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor | None:
        keep = self._kept(batch)
        if keep is not None:
            if not keep.any() and not self._distributed():
                return None
            if not keep.any():  # DDP steps every process together: this one adds zero gradients
                self._record_step(torch.zeros((), device=self.device), torch.zeros((), device=self.device), 0)
                return sum(p.sum() for p in self.parameters() if p.requires_grad) * 0.0
            if not keep.all():
                T = int(batch["lengths"][keep].max())
                batch = {
                    k: (v[keep][:, :T] if k == "tokens" else v[keep])
                    for k, v in batch.items()
                    if k in ("tokens", "lengths")
                }
        return super().training_step(batch, batch_idx)

    def _evaluate(self, batch: dict[str, Tensor], stage: str, batch_idx: int) -> None:
        super()._evaluate(batch, stage, batch_idx)
        if "spans" not in batch:
            return
        trees, n = self.model.parse(batch, self._parse_generator(batch, batch_idx))
        for name in ("sentence_f1", "corpus_f1"):
            metric = self.f1[f"{stage}_{name}"]
            metric.update(trees, batch["spans"], n)
            self.log(f"{stage}/{name}", metric, prog_bar=name == "sentence_f1", batch_size=len(n))

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """log p, events, MBR trees (B x (2T-1) x 2) and their bracketed strings (words decoded with
        the model's vocabulary, else ids); ``index`` (corpus positions) when the batch has it."""
        out = super().predict_step(batch, batch_idx)
        trees, n = self.model.parse(batch, self._parse_generator(batch, batch_idx))
        vocab = self.model.vocab
        strings = []
        for b in range(len(n)):
            ids = batch["tokens"][b, : int(n[b])].tolist()
            words = vocab.decode(ids) if vocab is not None else [str(i) for i in ids]
            strings.append(bracketed(trees[b], words))
        out.update(trees=trees, bracketed=strings)
        return out

    def _parse_generator(self, batch: dict[str, Tensor], batch_idx: int) -> torch.Generator:
        """The generator of a randomized grammar's estimated span marginals on an evaluation batch:
        seeded by the batch, as its likelihood is (the trees and F1 were the global RNG's)."""
        return evaluation_generator(batch_idx, batch["lengths"].device, trainer=self._trainer)

    @torch.no_grad()
    def sample_text(
        self, lengths: list[int], n: int = 1, generator: torch.Generator | None = None
    ) -> list[str]:
        """``n`` sentences of each length in ``lengths`` (>= 2 words) drawn from the grammar, as
        strings (decoded with the model's vocabulary when it has one): n * len(lengths) strings."""
        words, _ = self.model.sample(lengths, n, generator)
        vocab = self.model.vocab
        out = []
        for row in words.flatten(0, 1).tolist():
            ids = [i for i in row if i >= 0]
            out.append(" ".join(vocab.decode(ids) if vocab is not None else map(str, ids)))
        return out


class TreeWriter(EpochWriter):
    """Writes ``ParsingTask.predict_step``'s bracketed MBR trees to ``output_path``, one a line, in
    corpus order when batches carry ``index`` (``zoo.data.PCFGDataModule`` does), else in batch order.

    With a data module that has ``predict_lines()`` (``PCFGDataModule``), line i of the output is line i
    of the input, its words as read (unknown words keep their spelling, not ``<unk>``); an input line
    without a tree (blank, under 2 words, which the data leaves out; or not predicted, past
    ``limit_predict_batches``) is an empty line, and a warning for each cause lists their line numbers
    (of a tree file: their tree numbers).

    Args:
        output_path: the file to write (its directory is created).
        overwrite: replace an existing file at ``output_path`` (default: refused before anything is
            predicted).
    """

    def write(self, trainer, batches: list[dict]) -> None:
        data = getattr(trainer, "datamodule", None)
        inputs = self.from_data(trainer, "predict_lines")
        trees: dict[int, str] = {}
        for out in batches:
            index = out.get("index")
            for b, tree in enumerate(out["bracketed"]):
                i = int(index[b]) if index is not None else len(trees)
                trees[i] = tree if inputs is None else bracketed(out["trees"][b], inputs[0][i])
        if inputs is None:
            lines = [trees[i] for i in sorted(trees)]
        else:
            _, numbers, count = inputs
            lines = [""] * count
            for i, tree in trees.items():
                lines[numbers[i] - 1] = tree
            unit = getattr(data, "input_unit", "line")  # a tree file's position counts trees, not lines
            kept = set(numbers)
            for why, missing in (
                ("blank or under 2 words: the data leaves them out", sorted(set(range(1, count + 1)) - kept)),
                ("not predicted, e.g. past --trainer.limit_predict_batches",
                 sorted(numbers[i] for i in range(len(numbers)) if i not in trees)),
            ):  # fmt: skip
                if missing:
                    warnings.warn(
                        f"{self.output_path}: {len(missing)} of {count} input {unit}s have no parse, written "
                        f"as empty lines ({why}): {unit}s {listed(missing)}",
                        stacklevel=2,
                    )
        self.write_lines(lines)


__all__ = ["ParsingTask", "TreeWriter", "bracketed"]
