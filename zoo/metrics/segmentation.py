"""Unsupervised segmentation quality against known segments, as DDP-safe torchmetrics ``Metric``s.

Inputs to ``update(preds, target, lengths)``: ``preds`` B x T long, the predicted label of each frame
(``GaussianHSMM.segment``'s frame labels: states, or rank components); ``target`` B x T long, the known
segment label of each frame, ``ignore_index`` (-1) where unknown and past each length; ``lengths`` B.
``BoundaryF1`` and ``SegmentRatio`` also take ``starts``, B x T: the model's segmentation (a label >= 0
at each segment's first frame, ``GaussianHSMM.segment``'s first output). Its segment starts are then
the predicted boundaries, so that consecutive segments with one label count as two (a semi-Markov
model may put them there: a rank-space HSMM's rank components often do); without it, the label
changes of ``preds``.

* ``MatchedFrameAccuracy``: the fraction of labelled frames whose predicted label maps to their true
  label under the best one-to-one map from predicted labels to true labels (Hungarian matching,
  ``scipy.optimize.linear_sum_assignment``), as in unsupervised action segmentation. ``matching="corpus"``
  finds one map for the whole evaluation set from the summed contingency table (a label means the same
  thing in every sequence); ``matching="sequence"`` finds one map per sequence. Predicted labels left
  without a partner (more labels than classes) count as errors.
* ``BoundaryF1``: boundaries are the frames t >= 1 (t < length) whose label differs from frame t-1's,
  or where ``starts`` starts a segment; a predicted boundary is correct when it is matched one-to-one
  to a true boundary at most ``tolerance`` frames away (the maximum matching, computed greedily in time
  order, which is optimal for equal windows on a line). F1 = 2 tp / (#pred + #true) summed over the set
  (micro-averaged), 1 when neither side has a boundary.
* ``SegmentRatio``: predicted segments over true segments, summed over the set (segments = boundaries
  + 1 a run of known frames): 1 when a model cuts as often as the known segmentation, above 1 when it
  over-segments.

Both score only what is known: boundaries between two known frames (a change to or from an unknown
frame, ``ignore_index``, is no boundary, and neither side's boundary next to one is scored), and the
segments of each run of known frames; a sequence without known frames is left out. A batch's scores
therefore do not depend on which sequences share it.

Values are fractions in [0, 1]; ``nan`` before any update.
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor
from torchmetrics import Metric

__all__ = ["BoundaryF1", "MatchedFrameAccuracy", "SegmentRatio", "boundaries", "match_boundaries"]


def _check(preds: Tensor, target: Tensor, lengths: Tensor) -> None:
    for name, value in (("preds", preds), ("target", target)):
        if (
            not torch.is_tensor(value)
            or value.dim() != 2
            or value.is_floating_point()
            or value.dtype == torch.bool
        ):
            raise ValueError(
                f"{name} must be a B x T integer tensor of frame labels, got "
                f"{type(value).__name__} {getattr(value, 'dtype', '')} {tuple(getattr(value, 'shape', ()))}"
            )
    if preds.shape != target.shape:
        raise ValueError(
            f"preds and target must have the same shape, got {tuple(preds.shape)} and {tuple(target.shape)}"
        )
    if (
        lengths.shape != (preds.shape[0],)
        or bool((lengths < 1).any())
        or bool((lengths > preds.shape[1]).any())
    ):
        raise ValueError(
            f"lengths must have shape ({preds.shape[0]},) with values in 1..{preds.shape[1]}, "
            f"got {lengths.tolist()}"
        )


class MatchedFrameAccuracy(Metric):
    """Frame accuracy under the best one-to-one label matching (module docstring).

    Args:
        num_predicted: P, predicted labels lie in 0..P-1 (the model's ``num_labels``).
        num_classes: G, true labels lie in 0..G-1.
        matching: "corpus" (one map for the whole set) or "sequence" (one map per sequence).
        ignore_index: the target value of frames that are not scored.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(
        self, num_predicted: int, num_classes: int, matching: str = "corpus", ignore_index: int = -1, **kwargs
    ):
        super().__init__(**kwargs)
        for name, value in (("num_predicted", num_predicted), ("num_classes", num_classes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if matching not in ("corpus", "sequence"):
            raise ValueError(f"matching must be 'corpus' or 'sequence', got {matching!r}")
        self.num_predicted, self.num_classes = num_predicted, num_classes
        self.matching, self.ignore_index = matching, ignore_index
        self.add_state(
            "counts", torch.zeros(num_predicted, num_classes, dtype=torch.long), dist_reduce_fx="sum"
        )
        self.add_state("matched", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def _table(self, preds: Tensor, target: Tensor) -> Tensor:
        """P x G counts of (predicted, true) label pairs over the scored frames."""
        keep = target != self.ignore_index
        p, g = preds[keep], target[keep]
        if p.numel() and (int(p.min()) < 0 or int(p.max()) >= self.num_predicted):
            raise ValueError(
                f"predicted labels must lie in 0..{self.num_predicted - 1} on scored frames, "
                f"got values in {int(p.min())}..{int(p.max())}"
            )
        if g.numel() and (int(g.min()) < 0 or int(g.max()) >= self.num_classes):
            raise ValueError(
                f"true labels must lie in 0..{self.num_classes - 1} (or be ignore_index "
                f"{self.ignore_index}), "
                f"got values in {int(g.min())}..{int(g.max())}"
            )
        flat = torch.bincount(p * self.num_classes + g, minlength=self.num_predicted * self.num_classes)
        return flat.view(self.num_predicted, self.num_classes)

    def update(self, preds: Tensor, target: Tensor, lengths: Tensor) -> None:
        """Add a batch: preds, target B x T, lengths B (module docstring)."""
        _check(preds, target, lengths)
        T = preds.shape[1]
        within = torch.arange(T, device=target.device).view(1, T) < lengths.view(-1, 1).to(target.device)
        target = torch.where(within, target, self.ignore_index)
        if self.matching == "corpus":
            self.counts += self._table(preds, target).to(self.counts.device)
            return
        for b in range(len(preds)):
            table = self._table(preds[b], target[b])
            self.matched += _best_matching(table)
            self.total += int(table.sum())

    def compute(self) -> Tensor:
        if self.matching == "corpus":
            matched, total = _best_matching(self.counts), int(self.counts.sum())
        else:
            matched, total = int(self.matched), int(self.total)
        if total == 0:
            return torch.tensor(float("nan"))
        return torch.tensor(matched / total)


def _best_matching(table: Tensor) -> int:
    """The most frames a one-to-one map of rows (predicted) to columns (true) gets right."""
    counts = table.cpu().numpy()
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return int(counts[rows, cols].sum())


def scored_boundaries(
    predicted: list[int], target: Tensor, length: int, ignore_index: int
) -> tuple[list[int], list[int], int] | None:
    """The predicted and true boundaries between two known frames of one sequence (target T) and its
    number of runs of known frames; None where no frame is known (module docstring)."""
    known = target[:length] != ignore_index
    if not bool(known.any()):
        return None
    between = (known[1:] & known[:-1]).tolist()  # frame t (1..length-1) lies between two known frames
    true = [t for t in boundaries(target, length) if between[t - 1]]
    runs = int(known[0]) + int((known[1:] & ~known[:-1]).sum())
    return [t for t in predicted if between[t - 1]], true, runs


def boundaries(labels: Tensor, length: int) -> list[int]:
    """Frames t in 1..length-1 whose label differs from frame t-1's: labels T (one sequence)."""
    row = labels[:length]
    return (torch.nonzero(row[1:] != row[:-1]).flatten() + 1).tolist()


def segment_starts(starts: Tensor, length: int) -> list[int]:
    """Frames t in 1..length-1 where a segmentation (T: a label >= 0 at each segment's first frame)
    starts a segment."""
    return (torch.nonzero(starts[1:length] >= 0).flatten() + 1).tolist()


def predicted_boundaries(preds: Tensor, starts: Tensor | None, lengths: Tensor) -> list[list[int]]:
    """Each sequence's predicted boundaries: ``starts``' segment starts, or ``preds``' label changes."""
    if starts is None:
        return [boundaries(preds[b], n) for b, n in enumerate(lengths.tolist())]
    if starts.shape != preds.shape or starts.is_floating_point():
        raise ValueError(
            f"starts must be a B x T integer segmentation of preds' shape {tuple(preds.shape)}, got "
            f"{starts.dtype} {tuple(starts.shape)}"
        )
    starts = starts.cpu()
    return [segment_starts(starts[b], n) for b, n in enumerate(lengths.tolist())]


def match_boundaries(predicted: list[int], true: list[int], tolerance: int) -> int:
    """The size of the largest one-to-one matching of sorted predicted to sorted true boundaries with
    |p - t| <= tolerance (two pointers: the earliest feasible pair is always in some maximum matching)."""
    i = j = matched = 0
    while i < len(predicted) and j < len(true):
        if abs(predicted[i] - true[j]) <= tolerance:
            matched, i, j = matched + 1, i + 1, j + 1
        elif predicted[i] < true[j]:
            i += 1
        else:
            j += 1
    return matched


class BoundaryF1(Metric):
    """Boundary F1 within a tolerance, micro-averaged over the set (module docstring).

    Args:
        tolerance: the largest distance in frames between a matched predicted and true boundary.
        ignore_index: the target value of frames that are not known.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, tolerance: int, ignore_index: int = -1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(tolerance, int) or isinstance(tolerance, bool) or tolerance < 0:
            raise ValueError(f"tolerance must be an int >= 0 (frames), got {tolerance!r}")
        self.tolerance, self.ignore_index = tolerance, ignore_index
        for name in ("matched", "predicted", "true", "sequences"):
            self.add_state(name, torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor, lengths: Tensor, starts: Tensor | None = None) -> None:
        """Add a batch: preds, target (and starts) B x T, lengths B (module docstring)."""
        _check(preds, target, lengths)
        preds, target = preds.cpu(), target.cpu()
        for b, (n, p) in enumerate(zip(lengths.tolist(), predicted_boundaries(preds, starts, lengths))):
            scored = scored_boundaries(p, target[b], n, self.ignore_index)
            if scored is None:
                continue
            p, t, _ = scored
            self.matched += match_boundaries(p, t, self.tolerance)
            self.predicted += len(p)
            self.true += len(t)
            self.sequences += 1

    def compute(self) -> Tensor:
        if int(self.sequences) == 0:
            return torch.tensor(float("nan"))
        denominator = int(self.predicted + self.true)
        return torch.tensor(1.0 if denominator == 0 else 2 * int(self.matched) / denominator)


class SegmentRatio(Metric):
    """Predicted segments over true segments, summed over the set (module docstring).

    Args:
        ignore_index: the target value of frames that are not known.
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False

    def __init__(self, ignore_index: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.ignore_index = ignore_index
        for name in ("predicted", "true"):
            self.add_state(name, torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor, lengths: Tensor, starts: Tensor | None = None) -> None:
        """Add a batch: preds, target (and starts) B x T, lengths B (module docstring)."""
        _check(preds, target, lengths)
        preds, target = preds.cpu(), target.cpu()
        for b, (n, p) in enumerate(zip(lengths.tolist(), predicted_boundaries(preds, starts, lengths))):
            scored = scored_boundaries(p, target[b], n, self.ignore_index)
            if scored is not None:
                p, t, runs = scored
                self.predicted += len(p) + runs
                self.true += len(t) + runs

    def compute(self) -> Tensor:
        if int(self.true) == 0:
            return torch.tensor(float("nan"))
        return torch.tensor(int(self.predicted) / int(self.true))
