"""Segmentation metrics against brute force: the best one-to-one label map by enumerating every
injective map, boundary matching by enumerating every one-to-one matching; batching and merging do not
change the result (sum states); errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.metrics import BoundaryF1, MatchedFrameAccuracy, SegmentRatio
from zoo.metrics.segmentation import boundaries, match_boundaries

FAST = settings(max_examples=30, deadline=None)


def best_map_accuracy(pairs: list[tuple[int, int]], P: int, G: int) -> float:
    """max over injective maps of predicted labels to true labels (or to nothing) of the frames right."""
    best = 0
    targets = list(range(G)) + [None] * P
    for image in itertools.permutations(targets, P):
        best = max(best, sum(1 for p, g in pairs if image[p] == g))
    return best / len(pairs)


@st.composite
def labelled_batches(draw, P=3, G=3):
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    lengths = torch.tensor(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    preds = torch.tensor(
        draw(st.lists(st.lists(st.integers(0, P - 1), min_size=T, max_size=T), min_size=B, max_size=B))
    )
    target = torch.tensor(
        draw(st.lists(st.lists(st.integers(-1, G - 1), min_size=T, max_size=T), min_size=B, max_size=B))
    )
    return preds, target, lengths


@FAST
@given(batch=labelled_batches())
def test_corpus_and_sequence_matching_against_enumeration(batch):
    preds, target, lengths = batch
    frames = [(b, t) for b in range(len(lengths)) for t in range(int(lengths[b]))]
    pairs = [(int(preds[b, t]), int(target[b, t])) for b, t in frames if target[b, t] >= 0]
    corpus = MatchedFrameAccuracy(3, 3)
    corpus.update(preds, target, lengths)
    sequence = MatchedFrameAccuracy(3, 3, matching="sequence")
    sequence.update(preds, target, lengths)
    if not pairs:
        assert torch.isnan(corpus.compute()) and torch.isnan(sequence.compute())
        return
    assert float(corpus.compute()) == pytest.approx(best_map_accuracy(pairs, 3, 3))
    right = 0
    for b in range(len(lengths)):
        own = [(int(preds[b, t]), int(target[b, t])) for t in range(int(lengths[b])) if target[b, t] >= 0]
        right += round(best_map_accuracy(own, 3, 3) * len(own)) if own else 0
    assert float(sequence.compute()) == pytest.approx(right / len(pairs))


def test_more_predicted_labels_than_classes_leave_some_unmatched():
    preds = torch.tensor([[0, 0, 1, 1, 2, 2]])
    target = torch.tensor([[0, 0, 0, 1, 1, 1]])
    metric = MatchedFrameAccuracy(4, 2)
    metric.update(preds, target, torch.tensor([6]))
    assert float(metric.compute()) == pytest.approx(4 / 6)  # 0 -> 0 and 2 -> 1; label 1 is unmatched


def brute_force_matching(p: list[int], t: list[int], tol: int) -> int:
    best = 0
    for k in range(min(len(p), len(t)), 0, -1):
        for ps in itertools.combinations(p, k):
            for ts in itertools.permutations(t, k):
                if all(abs(a - b) <= tol for a, b in zip(ps, ts)):
                    return k
    return best


@FAST
@given(
    p=st.lists(st.integers(1, 20), max_size=5, unique=True),
    t=st.lists(st.integers(1, 20), max_size=5, unique=True),
    tol=st.integers(0, 4),
)
def test_boundary_matching_is_a_maximum_matching(p, t, tol):
    assert match_boundaries(sorted(p), sorted(t), tol) == brute_force_matching(p, t, tol)


def test_boundary_f1_by_hand_and_merging():
    preds = torch.tensor([[3, 3, 5, 5, 5, 1, 1, -1], [0, 0, 0, 0, 2, 2, 2, 2]])
    target = torch.tensor([[0, 0, 0, 1, 1, 1, 2, -1], [4, 4, 4, 4, 4, 4, 4, 4]])
    lengths = torch.tensor([7, 8])
    assert boundaries(preds[0], 7) == [2, 5] and boundaries(target[0], 7) == [3, 6]
    metric = BoundaryF1(tolerance=1)
    metric.update(preds, target, lengths)
    # sequence 0: predicted {2, 5}, true {3, 6}: both matched; sequence 1: predicted {4}, true none
    assert float(metric.compute()) == pytest.approx(2 * 2 / (3 + 2))
    exact = BoundaryF1(tolerance=0)
    exact.update(preds, target, lengths)
    assert float(exact.compute()) == 0.0
    halves = BoundaryF1(tolerance=1)
    halves.update(preds[:1], target[:1], lengths[:1])
    other = BoundaryF1(tolerance=1)
    other.update(preds[1:], target[1:], lengths[1:])
    halves.merge_state(other)
    assert float(halves.compute()) == float(metric.compute())
    nothing = BoundaryF1(tolerance=2)
    nothing.update(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long), torch.tensor([4]))
    assert float(nothing.compute()) == 1.0
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert torch.isnan(BoundaryF1(2).compute())


def test_segment_ratio_by_hand_and_merging():
    preds = torch.tensor([[3, 3, 5, 5, 5, 1, 1, -1], [0, 0, 0, 0, 2, 2, 2, 2]])
    target = torch.tensor([[0, 0, 0, 1, 1, 1, 2, -1], [4, 4, 4, 4, 4, 4, 4, 4]])
    lengths = torch.tensor([7, 8])
    metric = SegmentRatio()
    metric.update(preds, target, lengths)
    assert float(metric.compute()) == pytest.approx((3 + 2) / (3 + 1))  # the padding frame is not counted
    halves, other = SegmentRatio(), SegmentRatio()
    halves.update(preds[:1], target[:1], lengths[:1])
    other.update(preds[1:], target[1:], lengths[1:])
    halves.merge_state(other)
    assert float(halves.compute()) == float(metric.compute())
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert torch.isnan(SegmentRatio().compute())


def reference_boundary_counts(preds: list[int], target: list[int]) -> tuple[list[int], list[int], int]:
    """Predicted and true boundaries between two known frames, and the runs of known frames, of one
    sequence, written out from the definition (docs: only what is known is scored)."""
    known = [g >= 0 for g in target]
    inside = [t for t in range(1, len(target)) if known[t] and known[t - 1]]
    predicted = [t for t in inside if preds[t] != preds[t - 1]]
    true = [t for t in inside if target[t] != target[t - 1]]
    runs = sum(1 for t in range(len(target)) if known[t] and (t == 0 or not known[t - 1]))
    return predicted, true, runs


@FAST
@given(batch=labelled_batches(), tolerance=st.integers(0, 2))
def test_boundary_metrics_score_only_known_frames(batch, tolerance):
    """Against the definition, sequence by sequence: unknown frames (-1) make no boundary and hide the
    predicted ones next to them; a sequence with no known frame is left out, so a batch scores as its
    sequences one at a time (an unlabelled sequence in a labelled batch counted its predicted
    boundaries as false positives, and segment_ratio changed with the batch size: audit)."""
    preds, target, lengths = batch
    matched = predicted = true = segments = truth_segments = 0
    for b, n in enumerate(lengths.tolist()):
        if not (target[b, :n] >= 0).any():
            continue
        p, t, runs = reference_boundary_counts(preds[b, :n].tolist(), target[b, :n].tolist())
        matched += brute_force_matching(p, t, tolerance)
        predicted, true = predicted + len(p), true + len(t)
        segments, truth_segments = segments + len(p) + runs, truth_segments + len(t) + runs
    f1, ratio = BoundaryF1(tolerance), SegmentRatio()
    f1.update(preds, target, lengths)
    ratio.update(preds, target, lengths)
    if truth_segments == 0:  # no known frame in the batch
        assert int(f1.sequences) == 0 and int(ratio.true) == 0
        return
    expected_f1 = 1.0 if predicted + true == 0 else 2 * matched / (predicted + true)
    assert float(f1.compute()) == pytest.approx(expected_f1)
    assert float(ratio.compute()) == pytest.approx(segments / truth_segments)
    alone_f1, alone_ratio = BoundaryF1(tolerance), SegmentRatio()
    for b in range(len(lengths)):
        alone_f1.update(preds[b : b + 1], target[b : b + 1], lengths[b : b + 1])
        alone_ratio.update(preds[b : b + 1], target[b : b + 1], lengths[b : b + 1])
    assert float(alone_f1.compute()) == float(f1.compute())
    assert float(alone_ratio.compute()) == float(ratio.compute())


def test_a_prediction_that_agrees_with_every_known_frame_scores_fully():
    """Five unknown frames, then five of label 0, predicted as one segment: frame accuracy 1, and so
    boundary F1 1 and segment ratio 1 (the unknown-to-known change counted as a true boundary: F1 0,
    ratio 0.5)."""
    target = torch.tensor([[-1] * 5 + [0] * 5])
    preds, lengths = torch.zeros(1, 10, dtype=torch.long), torch.tensor([10])
    f1, ratio = BoundaryF1(0), SegmentRatio()
    f1.update(preds, target, lengths)
    ratio.update(preds, target, lengths)
    assert float(f1.compute()) == 1.0 and float(ratio.compute()) == 1.0


def test_segment_starts_count_consecutive_segments_of_one_label():
    """A segmentation whose segments at frames 0, 2 and 4 all carry label 1 (a rank-space HSMM's rank
    components do this): its frame labels show no boundary, its starts two (the metrics counted one
    segment where the model cut three: audit)."""
    preds = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    starts = torch.tensor([[1, -1, 1, -1, 1, -1, -1]])
    target = torch.tensor([[0, 0, 0, 0, 1, 1, 0]])
    lengths = torch.tensor([6])
    f1, ratio = BoundaryF1(tolerance=0), SegmentRatio()
    for metric in (f1, ratio):
        metric.update(preds, target, lengths, starts=starts)
    assert float(f1.compute()) == pytest.approx(2 * 1 / (2 + 1))  # predicted {2, 4}, true {4}
    assert float(ratio.compute()) == pytest.approx(3 / 2)
    labels_only = SegmentRatio()
    labels_only.update(preds, target, lengths)
    assert float(labels_only.compute()) == pytest.approx(1 / 2)
    with pytest.raises(ValueError, match="starts must be a B x T integer segmentation"):
        SegmentRatio().update(preds, target, lengths, starts=starts[:, :3])


def test_errors():
    with pytest.raises(ValueError, match="matching must be 'corpus' or 'sequence'"):
        MatchedFrameAccuracy(2, 2, matching="video")
    with pytest.raises(ValueError, match="tolerance must be an int >= 0"):
        BoundaryF1(-1)
    metric = MatchedFrameAccuracy(2, 2)
    with pytest.raises(ValueError, match="predicted labels must lie in 0..1"):
        metric.update(torch.tensor([[0, 2]]), torch.tensor([[0, 1]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="true labels must lie in 0..1"):
        metric.update(torch.tensor([[0, 1]]), torch.tensor([[0, 5]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="preds must be a B x T integer tensor"):
        metric.update(torch.zeros(1, 2), torch.tensor([[0, 1]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="lengths must have shape"):
        metric.update(torch.tensor([[0, 1]]), torch.tensor([[0, 1]]), torch.tensor([3]))
