"""Semi-Markov Viterbi for factorized models: the max-product forward, then a walk back of a few small
tensor operations a segment.

The forward (``forward.forward`` in ``Max``) keeps, for every frame, the best score of the prefixes whose
last segment ends there with node j, and the duration of that segment (its back-pointer, a ``max`` with
indices over the D window instead of an ``amax``). The walk back from each sequence's end reads the
duration (one gather) and recomputes the previous node from one column of the transition (B x K): the
argmax the forward's ``amax`` over K x K did not keep. A segment costs about ten operations on B x K
tensors, a third of what the general walk back over (duration, previous node) pairs
(``forward.backtrack``, which sampling uses) takes.

Shapes: B batch, T frames, K nodes (states, or rank nodes), D the maximum duration.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from zoo.inference.semimarkov.engine import check_covered
from zoo.inference.semimarkov.forward import Problem, forward
from zoo.inference.semiring import Max


def best_segmentations(
    problem: Problem, lengths: Tensor, columns: Callable[[Tensor], Tensor]
) -> tuple[Tensor, Tensor]:
    """The best segmentation of each sequence; raises where no segmentation covers one.

    Args:
        problem: the forward's operands (its ``step`` must have ``max``).
        lengths: (B,) in 1..T.
        columns: ``columns(j)`` -> B x K: log trans(:, j) into each sequence's node j.
    Returns:
        the best score (B,) and the segmentation B x T (the node at each segment's start, -1 elsewhere).
    """
    with torch.no_grad():
        best, ends, durations, _ = forward(problem, lengths, semiring=Max)  # ends: one frame at a time
        check_covered(best, lengths, problem.duration.shape[-1])
        B, T = lengths.shape[0], problem.max_length
        batch = torch.arange(B, device=lengths.device)
        last = ends[batch, lengths]
        if problem.final is not None:
            last = last + problem.final
        t, node = lengths.clone(), last.argmax(-1)
        segmentation = torch.full((B, T), -1, dtype=torch.long, device=lengths.device)
        while True:  # a finished sequence stays at its first segment and writes the same entry again
            s = t - durations[batch, t, node]
            segmentation[batch, s] = node
            inner = s > 0
            if not bool(inner.any()):
                return best, segmentation
            previous = (ends[batch, s] + columns(node)).argmax(-1)
            t, node = torch.where(inner, s, t), torch.where(inner, previous, node)
