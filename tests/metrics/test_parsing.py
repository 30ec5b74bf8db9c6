"""Sentence and corpus F1 on hand-checked trees, input forms, errors, reset and merged (DDP) states."""

import random

import pytest
import torch

from zoo.data import spans_to_tensor
from zoo.metrics import CorpusF1, SentenceF1

# Three hand-checked sentences (spans [i, k), end exclusive).
# 1. n = 5. gold: root (0,5), (0,2), (2,5), (3,5) and a width-1 phrase (1,2) -> kept {(0,2),(2,5),(3,5)}.
#    pred (binary): (0,5) (0,1) (1,5) (1,2) (2,5) (2,3) (3,5) (3,4) (4,5) -> kept {(1,5),(2,5),(3,5)}.
#    overlap {(2,5),(3,5)}: P = 2/3, R = 2/3, F1 = 2/3; tp 2, fp 1, fn 1.
# 2. n = 2. gold (0,2); pred (0,2) (0,1) (1,2): nothing kept on either side -> P = R = F1 = 1.
# 3. n = 4. gold (0,4) (0,2) (2,4) (2,4) (a unary chain repeats (2,4)) -> kept {(0,2),(2,4)}.
#    pred (0,4) (0,3) (0,2) (0,1) (1,2) (2,3) (3,4) -> kept {(0,3),(0,2)}.
#    overlap {(0,2)}: P = 1/2, R = 1/2, F1 = 1/2; tp 1, fp 1, fn 1 (the repeated gold span counts once).
GOLD = [
    [(0, 5), (0, 2), (1, 2), (2, 5), (3, 5)],
    [(0, 2)],
    [(0, 4), (0, 2), (2, 4), (2, 4)],
]
PRED = [
    [(0, 5), (0, 1), (1, 5), (1, 2), (2, 5), (2, 3), (3, 5), (3, 4), (4, 5)],
    [(0, 2), (0, 1), (1, 2)],
    [(0, 4), (0, 3), (0, 2), (0, 1), (1, 2), (2, 3), (3, 4)],
]
LENGTHS = [5, 2, 4]
SENTENCE_F1 = (2 / 3 + 1 + 1 / 2) / 3  # = 13/18
CORPUS_F1 = 2 * 3 / (2 * 3 + 2 + 2)  # tp 2+0+1 = 3, fp 1+0+1 = 2, fn 1+0+1 = 2 -> 6/10


def value(metric_cls, preds, target, lengths=None):
    metric = metric_cls()
    metric.update(preds, target, lengths)
    return metric.compute().item()


def test_hand_checked_values():
    assert value(SentenceF1, PRED, GOLD) == pytest.approx(13 / 18)
    assert value(SentenceF1, PRED, GOLD) == pytest.approx(SENTENCE_F1)
    assert value(CorpusF1, PRED, GOLD) == pytest.approx(0.6)
    assert value(CorpusF1, PRED, GOLD) == pytest.approx(CORPUS_F1)
    assert value(SentenceF1, PRED, GOLD, LENGTHS) == pytest.approx(13 / 18)


def test_compute_is_a_float_fraction():
    for cls in (SentenceF1, CorpusF1):
        metric = cls()
        metric.update(PRED, GOLD)
        out = metric.compute()
        assert out.dtype == torch.float32 and out.dim() == 0 and 0 <= out.item() <= 1


def test_percent_scales_every_value_by_100():
    """``percent=True``: the unit of the papers' tables and of ``ParsingTask``'s logged F1, including the
    corpus F1 of a corpus with no span left (1 -> 100); the fraction stays the default."""
    for cls, fraction in ((SentenceF1, SENTENCE_F1), (CorpusF1, CORPUS_F1)):
        metric = cls(percent=True)
        metric.update(PRED, GOLD)
        assert metric.compute().item() == pytest.approx(100 * fraction)
        assert metric.plot_upper_bound == 100 and cls().plot_upper_bound == 1
    only_trivial = CorpusF1(percent=True)
    only_trivial.update([[(0, 2), (0, 1), (1, 2)]], [[(0, 2)]])
    assert only_trivial.compute().item() == 100
    assert CorpusF1(percent=True).compute().isnan()


def test_length_two_sentences_score_one():
    # Every span of a length-2 sentence is trivial or the whole sentence: nothing left, F1 = 1.
    assert value(SentenceF1, [[(0, 2), (0, 1), (1, 2)]] * 3, [[(0, 2)]] * 3) == 1.0
    assert value(CorpusF1, [[(0, 2), (0, 1), (1, 2)]], [[(0, 2), (0, 1), (1, 2)]]) == 1.0


def test_trivial_and_whole_sentence_spans_are_dropped():
    # Only the trivial and whole-sentence spans differ: gold has none of pred's, and F1 is still 1.
    gold = [[(0, 3), (0, 2)]]
    pred = [[(0, 3), (0, 2), (0, 1), (1, 2), (2, 3)]]
    assert value(SentenceF1, pred, gold) == 1.0
    assert value(CorpusF1, pred, gold) == 1.0


def test_duplicate_spans_count_once():
    # gold {(0,2),(2,4)}, pred {(0,2),(1,3)} whatever the repetitions: P = R = F1 = 1/2, tp 1 fp 1 fn 1.
    gold = [[(0, 4), (0, 2), (0, 2), (2, 4), (2, 4), (2, 4)]]
    pred = [[(0, 4), (0, 2), (0, 2), (1, 3), (1, 3)]]
    assert value(SentenceF1, pred, gold) == pytest.approx(0.5)
    assert value(CorpusF1, pred, gold) == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))


def test_empty_sides():
    # Gold spans but no predicted span left: P = 1, R = 0, F1 = 0.
    assert value(SentenceF1, [[(0, 4)]], [[(0, 4), (0, 2)]]) == 0.0
    # No gold span left but a predicted one: R = 1, P = 0, F1 = 0.
    assert value(SentenceF1, [[(0, 3), (0, 2)]], [[(0, 3)]]) == 0.0
    # Corpus: tp 0, fp 1, fn 1 -> 0; nothing anywhere -> 1.
    assert value(CorpusF1, [[(0, 4)], [(0, 3), (0, 2)]], [[(0, 4), (0, 2)], [(0, 3)]]) == 0.0
    assert value(CorpusF1, [[(0, 3)]], [[(0, 3)]]) == 1.0


def test_length_from_lengths_or_largest_gold_end():
    # The gold tree lacks its root. With lengths = 3, (0,2) is a real span (F1 1 against pred (0,2));
    # without lengths, n = 2 is inferred and (0,2) is the whole sentence, dropped from both sides.
    gold, pred = [[(0, 2)]], [[(0, 3), (0, 2)]]
    assert value(CorpusF1, pred, gold, lengths=[3]) == 1.0
    with pytest.raises(ValueError, match=r"\(0, 3\) outside .* n = 2 \(from the largest gold end\)"):
        value(CorpusF1, pred, gold)
    # Pred (0,1) (1,3): kept {(1,3)} vs gold {(0,2)} with n = 3 -> F1 0.
    assert value(SentenceF1, [[(0, 3), (1, 3)]], gold, lengths=torch.tensor([3])) == 0.0


def test_list_and_tensor_inputs_agree():
    T = max(LENGTHS)
    pred_t = spans_to_tensor(PRED, T)
    labelled = [[(i, k, 7) for i, k in spans] for spans in GOLD]
    gold_t3 = spans_to_tensor(labelled, T, width=3)  # B x (2T-1) x 3 with labels, ignored
    for cls, expected in ((SentenceF1, SENTENCE_F1), (CorpusF1, CORPUS_F1)):
        assert value(cls, pred_t, gold_t3) == pytest.approx(expected)
        assert value(cls, pred_t, GOLD, LENGTHS) == pytest.approx(expected)
        assert value(cls, PRED, gold_t3, torch.tensor(LENGTHS)) == pytest.approx(expected)
        # Per-sentence tensors inside a list, and label columns in lists, are accepted too.
        assert value(cls, [torch.tensor(s) for s in PRED], labelled) == pytest.approx(expected)


def test_accumulates_over_batches_reset_and_nan_before_update():
    for cls, expected in ((SentenceF1, SENTENCE_F1), (CorpusF1, CORPUS_F1)):
        metric = cls()
        for p, g in zip(PRED, GOLD):
            metric.update([p], [g])
        assert metric.compute().item() == pytest.approx(expected)
        metric.reset()
        with pytest.warns(UserWarning, match="compute"):
            assert torch.isnan(metric.compute())
        metric.update(PRED[1:2], GOLD[1:2])
        assert metric.compute().item() == 1.0


def random_tree(rng, i, k, binary):
    """Spans of a random tree over [i, k): binary, or n-ary with some unary repeats."""
    spans = [(i, k)]
    if k - i == 1:
        return spans
    if not binary and rng.random() < 0.2:
        spans.append((i, k))
    n_children = 2 if binary else rng.randint(2, min(3, k - i))
    cuts = sorted(rng.sample(range(i + 1, k), n_children - 1))
    for a, b in zip([i, *cuts], [*cuts, k]):
        spans += random_tree(rng, a, b, binary)
    return spans


def random_corpus(seed, n_sentences=40):
    rng = random.Random(seed)
    lengths = [rng.randint(2, 12) for _ in range(n_sentences)]
    preds = [random_tree(rng, 0, n, True) for n in lengths]
    golds = [random_tree(rng, 0, n, False) for n in lengths]
    return preds, golds, lengths


# A fresh metric filled by merge_state alone was never update()d: torchmetrics warns on its compute.
@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric")
@pytest.mark.parametrize("cls", [SentenceF1, CorpusF1])
def test_merged_halves_equal_one_metric_on_all(cls):
    # What DDP does: each process updates its shard, then states are summed (dist_reduce_fx="sum").
    preds, golds, lengths = random_corpus(0)
    whole = cls()
    whole.update(preds, golds, lengths)
    halves = [cls(), cls()]
    halves[0].update(preds[:15], golds[:15], lengths[:15])
    halves[1].update(spans_to_tensor(preds[15:], 12), spans_to_tensor(golds[15:], 12), lengths[15:])
    expected = whole.compute()

    summed = cls()
    summed.merge_state({name: halves[0].metric_state[name] + halves[1].metric_state[name]
                        for name in halves[0].metric_state})
    assert torch.allclose(summed.compute(), expected)

    halves[0].merge_state(halves[1])
    assert torch.allclose(halves[0].compute(), expected)
    assert 0 < expected.item() < 1
    assert all(fx is not None for fx in whole._reductions.values())


@pytest.mark.parametrize(
    "preds, target, lengths, error, match",
    [
        (PRED[:2], GOLD, None, ValueError, r"same number of sentences, got 2 and 3"),
        ([[(0, 6)]], [[(0, 5)]], None, ValueError, r"preds\[0\] has span \(0, 6\) outside 0 <= i < k <= n"),
        ([[]], [[(0, 5)]], [4], ValueError, r"target\[0\] has span \(0, 5\) outside .* n = 4"),
        ([[(2, 2)]], [[(0, 5)]], None, ValueError, r"\(2, 2\) outside"),
        ([[(-1, 2)]], [[(0, 5)]], None, ValueError, r"\(-1, 2\) outside"),
        ([[(0, 1.5)]], [[(0, 5)]], None, TypeError, r"preds\[0\]\[0\]\[1\] must be an integer, got float"),
        ([[(0,)]], [[(0, 5)]], None, ValueError, r"preds\[0\]\[0\] must be a \(start, end"),
        ([[]], [[]], None, ValueError, r"target\[0\] has no spans.*pass lengths"),
        ([[]], [[(0, 5)]], [5, 5], ValueError, r"one entry per sentence \(B = 1\), got 2"),
        ([[]], [[(0, 5)]], [0], ValueError, r"lengths must be >= 1"),
        ([[]], [[(0, 5)]], torch.tensor([5.0]), TypeError, r"lengths must be an integer tensor"),
        (torch.zeros(1, 3, 2), GOLD[:1], None, TypeError, r"preds must be an integer .* dtype torch.float32"),
        (torch.zeros(1, 3, 4, dtype=torch.long), GOLD[:1], None, ValueError, r"B x M x 3.*\(1, 3, 4\)"),
        (torch.zeros(3, 2, dtype=torch.long), [[(0, 5)]], None, ValueError, r"got shape \(3, 2\)"),
        ("(0, 2)", [[(0, 5)]], None, TypeError, r"preds must be a list .* got str"),
        ([5], [[(0, 5)]], None, TypeError, r"preds\[0\] must be an iterable of \(start, end\) spans, got"),
    ],
)
def test_errors_say_what_was_expected_and_given(preds, target, lengths, error, match):
    for cls in (SentenceF1, CorpusF1):
        with pytest.raises(error, match=match):
            cls().update(preds, target, lengths)
