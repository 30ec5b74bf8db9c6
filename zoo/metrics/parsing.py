"""Unlabelled parsing F1 (sentence-level and corpus-level) as DDP-safe torchmetrics ``Metric``s.

Conventions (the evaluation of Kim et al. 2019, compound-pcfg, and
Yang et al. 2021b, TN-PCFG):

- spans are ``[i, k)``, end exclusive (``docs/tree-api.md``); labels and any extra columns are ignored;
- per sentence, spans of width 1 and the whole-sentence span ``[0, n)`` are dropped from both sides,
  then each side is de-duplicated (a set: a unary chain's repeated span counts once);
- sentence F1 of one sentence: ``P = |pred & gold| / |pred|``, ``R = |pred & gold| / |gold|``,
  ``F1 = 2PR / (P + R)`` (0 when ``P + R = 0``); with no gold spans left ``R = 1`` and with no
  predicted spans left ``P = 1``. So a length-2 sentence (nothing left on either side) scores 1, a
  sentence with gold spans but no prediction 0, and vice versa. This gives the same F1 as the
  reference code in every case (it sets ``P = 1`` only when both sides are empty, which changes no F1);
- ``SentenceF1`` is the mean of that over sentences; ``CorpusF1`` is micro-averaged over all
  (de-duplicated) spans, ``F1 = 2 tp / (2 tp + fp + fn)``, taken as 1 when no sentence has a span left;
- values are fractions in ``[0, 1]`` (like torchmetrics), or percentages in ``[0, 100]`` with
  ``percent=True`` (the unit of the papers' tables and of the logged ``val/sentence_f1``); ``nan``
  before any update.

The sentence length ``n`` comes from ``lengths`` or, if that is omitted, from the largest end among
the sentence's gold spans (as in TN-PCFG; right whenever the gold spans include the root).

Inputs to ``update(preds, target, lengths=None)``, for ``preds`` and ``target`` independently:

- a list with one entry per sentence, each an iterable of spans ``(start, end, *extra)``;
- an integer tensor ``B x M x 2`` or ``B x M x 3`` (the contract's tree tensors).

Rows ``(-1, -1)`` are padding and skipped; any other span must satisfy ``0 <= i < k <= n``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric

Span = tuple[int, int]

__all__ = ["CorpusF1", "SentenceF1", "span_sets"]


def _as_int(value, where: str) -> int:
    if isinstance(value, bool) or (isinstance(value, Tensor) and value.dtype == torch.bool):
        raise TypeError(f"{where} must be an integer, got a bool")
    if isinstance(value, Tensor) and value.is_floating_point():
        raise TypeError(f"{where} must be an integer, got a {value.dtype} tensor element")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{where} must be an integer, got {type(value).__name__} {value!r}") from None


def _span_lists(name: str, value) -> list[list[Span]]:
    """Spans ``(start, end)`` of each sentence of a list or ``B x M x (2|3)`` tensor; padding dropped."""
    if isinstance(value, Tensor):
        if value.dim() != 3 or value.shape[-1] not in (2, 3):
            raise ValueError(
                f"{name} as a tensor must have shape B x M x 2 or B x M x 3 (rows (start, end[, label]), "
                f"-1 padding), got shape {tuple(value.shape)}"
            )
        if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer (long) tensor, got dtype {value.dtype}")
        rows = value[..., :2].tolist()
        return [[(i, k) for i, k in sent if (i, k) != (-1, -1)] for sent in rows]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{name} must be a list (one entry per sentence) of iterables of (start, end) spans, or a "
            f"long tensor B x M x 2 / B x M x 3, got {type(value).__name__}"
        )
    out = []
    for b, sent in enumerate(value):
        if not isinstance(sent, Iterable) or isinstance(sent, (str, bytes)):
            raise TypeError(
                f"{name}[{b}] must be an iterable of (start, end) spans, got {type(sent).__name__}"
            )
        spans = []
        for j, span in enumerate(sent):
            try:
                start, end = span[0], span[1]
            except (TypeError, IndexError, KeyError):
                raise ValueError(
                    f"{name}[{b}][{j}] must be a (start, end[, ...]) span, got {span!r}"
                ) from None
            pair = (_as_int(start, f"{name}[{b}][{j}][0]"), _as_int(end, f"{name}[{b}][{j}][1]"))
            if pair != (-1, -1):
                spans.append(pair)
        out.append(spans)
    return out


def _lengths(lengths, batch: int) -> list[int] | None:
    if lengths is None:
        return None
    if isinstance(lengths, Tensor):
        if lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
        if lengths.dim() != 1:
            raise ValueError(f"lengths must have shape (B,) = ({batch},), got {tuple(lengths.shape)}")
        values = lengths.tolist()
    else:
        values = [_as_int(v, f"lengths[{b}]") for b, v in enumerate(lengths)]
    if len(values) != batch:
        raise ValueError(f"lengths must have one entry per sentence (B = {batch}), got {len(values)}")
    bad = [n for n in values if n < 1]
    if bad:
        raise ValueError(f"lengths must be >= 1, got {values}")
    return values


def span_sets(preds, target, lengths=None) -> list[tuple[set[Span], set[Span]]]:
    """Per sentence, the evaluated ``(pred, gold)`` span sets: validated, filtered, de-duplicated."""
    pred_lists = _span_lists("preds", preds)
    gold_lists = _span_lists("target", target)
    if len(pred_lists) != len(gold_lists):
        raise ValueError(
            f"preds and target must hold the same number of sentences, got {len(pred_lists)} and "
            f"{len(gold_lists)}"
        )
    ns = _lengths(lengths, len(gold_lists))
    out = []
    for b, (pred, gold) in enumerate(zip(pred_lists, gold_lists)):
        if ns is not None:
            n = ns[b]
        elif gold:
            n = max(k for _, k in gold)
        else:
            raise ValueError(
                f"target[{b}] has no spans, so the sentence length cannot be inferred; pass lengths"
            )
        for name, spans in (("preds", pred), ("target", gold)):
            for i, k in spans:
                if not 0 <= i < k <= n:
                    src = "lengths" if ns is not None else "the largest gold end"
                    raise ValueError(
                        f"{name}[{b}] has span ({i}, {k}) outside 0 <= i < k <= n with n = {n} (from {src})"
                    )
        pred_set, gold_set = ({(i, k) for i, k in s if k - i > 1 and (i, k) != (0, n)} for s in (pred, gold))
        out.append((pred_set, gold_set))
    return out


def _sentence_f1(pred: set[Span], gold: set[Span]) -> float:
    overlap = len(pred & gold)
    precision = overlap / len(pred) if pred else 1.0
    recall = overlap / len(gold) if gold else 1.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


class _F1(Metric):
    """What both F1 metrics share: the unit, a fraction or (``percent=True``) a percentage."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0

    def __init__(self, percent: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scale = 100.0 if percent else 1.0

    @property
    def plot_upper_bound(self) -> float:  # a class constant in torchmetrics, so not set per instance
        return self.scale


class SentenceF1(_F1):
    """Unlabelled sentence-level F1: the mean over sentences of per-sentence F1 (module docstring)."""

    f1_sum: Tensor
    n_sentences: Tensor

    def __init__(self, percent: bool = False, **kwargs) -> None:
        super().__init__(percent, **kwargs)
        self.add_state("f1_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("n_sentences", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds, target, lengths=None) -> None:
        """Add a batch: span lists or ``B x M x (2|3)`` tensors, optional ``lengths`` ``(B,)``."""
        sets = span_sets(preds, target, lengths)
        self.f1_sum += sum(_sentence_f1(p, g) for p, g in sets)
        self.n_sentences += len(sets)

    def compute(self) -> Tensor:
        """Mean sentence F1 (float32, a fraction or a percentage); ``nan`` if no sentence was seen."""
        return (self.scale * self.f1_sum / self.n_sentences).float()


class CorpusF1(_F1):
    """Unlabelled corpus-level F1, micro-averaged over all spans (module docstring)."""

    tp: Tensor
    fp: Tensor
    fn: Tensor
    n_sentences: Tensor

    def __init__(self, percent: bool = False, **kwargs) -> None:
        super().__init__(percent, **kwargs)
        for name in ("tp", "fp", "fn", "n_sentences"):
            self.add_state(name, torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds, target, lengths=None) -> None:
        """Add a batch: span lists or ``B x M x (2|3)`` tensors, optional ``lengths`` ``(B,)``."""
        sets = span_sets(preds, target, lengths)
        self.tp += sum(len(p & g) for p, g in sets)
        self.fp += sum(len(p - g) for p, g in sets)
        self.fn += sum(len(g - p) for p, g in sets)
        self.n_sentences += len(sets)

    def compute(self) -> Tensor:
        """Corpus F1 ``2 tp / (2 tp + fp + fn)`` (float32, a fraction or a percentage); ``nan`` if no
        sentence was seen."""
        if self.n_sentences == 0:
            return torch.tensor(float("nan"), device=self.tp.device)
        den = 2 * self.tp + self.fp + self.fn
        if den == 0:
            return torch.tensor(self.scale, device=self.tp.device)
        return (self.scale * 2 * self.tp.double() / den).float()
