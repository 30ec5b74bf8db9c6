"""Length-bucketed batch sampler (single process and DDP shards), packed dataset, collators."""

import collections

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.data import BucketBatchSampler, PackedSequences, collate, collate_frames, collate_tokens

lengths_st = st.lists(st.integers(1, 30), min_size=1, max_size=80)
limits_st = st.one_of(
    st.tuples(st.integers(1, 120), st.none()),
    st.tuples(st.none(), st.integers(1, 9)),
    st.tuples(st.integers(1, 120), st.integers(1, 9)),
)


def check_budget(batches, lengths, batch_tokens, batch_size):
    for batch in batches:
        assert batch, "empty batch"
        if batch_size is not None:
            assert len(batch) <= batch_size
        if batch_tokens is not None and len(batch) > 1:  # a lone over-long sequence may exceed it
            assert len(batch) * max(lengths[i] for i in batch) <= batch_tokens


@settings(max_examples=60)
@given(lengths=lengths_st, limits=limits_st, seed=st.integers(0, 5), epoch=st.integers(0, 3))
def test_training_epoch_covers_every_sequence_once_within_budget(lengths, limits, seed, epoch):
    batch_tokens, batch_size = limits
    sampler = BucketBatchSampler(lengths, batch_tokens, batch_size, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    check_budget(batches, lengths, batch_tokens, batch_size)


@settings(max_examples=60)
@given(lengths=lengths_st, limits=limits_st, replicas=st.integers(1, 4), epoch=st.integers(0, 3))
def test_training_shards_same_count_per_rank_and_cover_everything(lengths, limits, replicas, epoch):
    batch_tokens, batch_size = limits
    samplers = [
        BucketBatchSampler(lengths, batch_tokens, batch_size, seed=3, num_replicas=replicas, rank=r)
        for r in range(replicas)
    ]
    for s in samplers:
        s.set_epoch(epoch)
    shards = [list(s) for s in samplers]
    single = BucketBatchSampler(lengths, batch_tokens, batch_size, seed=3)
    single.set_epoch(epoch)
    n_batches = len(single)
    per_rank = -(-n_batches // replicas)
    assert [len(s) for s in shards] == [len(s) for s in samplers] == [per_rank] * replicas
    # The ranks deal out one global batch list (the single-process one), cycled from its head to even out.
    dealt = [shards[r][k] for k in range(per_rank) for r in range(replicas)]
    assert dealt == [list(single)[k % n_batches] for k in range(per_rank * replicas)]
    # Disjoint batches: every sequence in exactly one of the first n_batches dealt batches.
    assert sorted(i for b in dealt[:n_batches] for i in b) == list(range(len(lengths)))
    for shard in shards:
        check_budget(shard, lengths, batch_tokens, batch_size)


@settings(max_examples=80)
@given(
    lengths=lengths_st, limits=limits_st, before=st.integers(1, 4), after=st.integers(1, 4),
    fraction=st.floats(0, 1), drop_uneven=st.booleans(),
)  # fmt: skip
def test_a_resume_on_another_number_of_ranks_trains_every_batch_once(
    lengths, limits, before, after, fraction, drop_uneven
):
    """A run of ``before`` ranks trained ``done`` batches each; resumed on ``after`` ranks, they train
    the rest of the epoch's batch list, each batch once, as many on every rank (the resumed run trained
    the ranks' own count again: a 2-rank run's batches twice on one, half the rest on four; audit)."""
    batch_tokens, batch_size = limits
    single = BucketBatchSampler(lengths, batch_tokens, batch_size, seed=3)
    single.set_epoch(1)
    order = list(single)
    drop_uneven = drop_uneven and len(order) >= max(before, after)
    first = [BucketBatchSampler(lengths, batch_tokens, batch_size, seed=3, num_replicas=before, rank=r,
                                drop_uneven=drop_uneven) for r in range(before)]  # fmt: skip
    done = round(fraction * len(first[0]))
    resumed = []
    for rank in range(after):
        sampler = BucketBatchSampler(lengths, batch_tokens, batch_size, seed=3, num_replicas=after, rank=rank,
                                     drop_uneven=drop_uneven)  # fmt: skip
        sampler.resume(1, done, before)
        sampler.set_epoch(1)
        expected = None if before == after else len(sampler._dealt_rest(done * before))
        assert sampler.remaining() == expected
        finished = sampler.finished()  # the epoch has nothing left for this rank (read before iterating)
        resumed.append(list(sampler))
        assert finished == (not resumed[-1])
    counts = {len(batches) for batches in resumed}
    assert len(counts) == 1  # every rank steps as often (gradient all-reduce)
    trained = [resumed[r][k] for k in range(counts.pop()) for r in range(after)]
    rest = order[done * before :]
    if before == after:  # each rank goes on with its own batches, padding included
        for sampler in first:
            sampler.set_epoch(1)
        assert resumed == [list(sampler)[done:] for sampler in first]
    else:
        assert trained[: len(rest)] == rest[: len(trained)]
        if not drop_uneven:
            assert trained[: len(rest)] == rest  # nothing left out
        assert len(trained) - len(rest) < after  # at most a round of repeated batches


def test_drop_uneven_cuts_to_a_multiple_of_the_replicas():
    lengths = [5] * 10  # batch_size 2 -> 5 batches
    shards = [
        list(BucketBatchSampler(lengths, batch_size=2, num_replicas=2, rank=r, drop_uneven=True))
        for r in (0, 1)
    ]
    assert [len(s) for s in shards] == [2, 2]
    seen = [i for s in shards for b in s for i in b]
    assert len(seen) == len(set(seen)) == 8
    with pytest.raises(ValueError, match="drop_uneven=True leaves no batch: 1 batches for 2 replicas"):
        BucketBatchSampler([3], batch_size=2, num_replicas=2, drop_uneven=True)


@settings(max_examples=60)
@given(lengths=lengths_st, limits=limits_st, replicas=st.integers(1, 5))
def test_evaluation_shards_every_sequence_exactly_once(lengths, limits, replicas):
    batch_tokens, batch_size = limits
    samplers = [
        BucketBatchSampler(lengths, batch_tokens, batch_size, shuffle=False, num_replicas=replicas, rank=r)
        for r in range(replicas)
    ]
    shards = [list(s) for s in samplers]
    seen = [i for shard in shards for b in shard for i in b]
    assert sorted(seen) == list(range(len(lengths)))  # no repeats, nothing dropped
    counts = [sum(len(b) for b in shard) for shard in shards]
    assert max(counts) - min(counts) <= 1  # ceil / floor of N / R sequences each
    for sampler, shard in zip(samplers, shards):
        assert len(sampler) == len(shard)
        check_budget(shard, lengths, batch_tokens, batch_size)
        sampler.set_epoch(7)
        assert list(sampler) == shard  # deterministic, epoch-independent


def test_batches_group_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=2000)
    sampler = BucketBatchSampler(lengths, batch_tokens=600)
    padded = sum(len(b) * lengths[b].max() for b in sampler)
    assert padded <= 1.05 * lengths.sum()


def test_seed_determinism_and_set_epoch_reshuffles():
    lengths = np.random.default_rng(1).integers(1, 20, size=300)

    def epoch_batches(seed, epoch):
        sampler = BucketBatchSampler(lengths, batch_tokens=64, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert epoch_batches(0, 0) == epoch_batches(0, 0)
    assert epoch_batches(0, 1) == epoch_batches(0, 1)
    assert epoch_batches(0, 0) != epoch_batches(0, 1)
    assert epoch_batches(0, 0) != epoch_batches(1, 0)
    # Reshuffling changes the membership of batches too, not only their order.
    as_sets = [{frozenset(b) for b in epoch_batches(0, e)} for e in (0, 1)]
    assert as_sets[0] != as_sets[1]
    sampler = BucketBatchSampler(lengths, batch_tokens=64)
    assert sampler.sampler is sampler  # where Lightning looks for set_epoch


def test_sampler_argument_errors():
    with pytest.raises(ValueError, match="give batch_tokens .* or batch_size .* got neither"):
        BucketBatchSampler([1, 2])
    with pytest.raises(ValueError, match="batch_tokens must be a positive int or None, got 0"):
        BucketBatchSampler([1, 2], batch_tokens=0)
    with pytest.raises(ValueError, match="rank must be in 0..1, got 2"):
        BucketBatchSampler([1, 2], batch_size=1, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="every length must be >= 1, got 0 at index 1"):
        BucketBatchSampler([1, 0], batch_size=1)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        BucketBatchSampler([], batch_size=1)


def test_packed_sequences_and_collate_tokens():
    seqs = [torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([9, 10])]
    data = PackedSequences.from_sequences(seqs)
    assert len(data) == 3 and data.lengths.tolist() == [3, 1, 2]
    assert all(torch.equal(data[i], s) for i, s in enumerate(seqs))
    batch = collate_tokens([data[0], data[1]])
    assert batch["tokens"].dtype == torch.long and batch["lengths"].dtype == torch.long
    assert batch["tokens"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["lengths"].tolist() == [3, 1]
    assert collate([[1, 2], [3]])["tokens"].tolist() == [[1, 2], [3, 0]]
    with pytest.raises(ValueError, match="lengths sum to 3 but data has 4 rows"):
        PackedSequences(torch.zeros(4), [1, 2])
    with pytest.raises(ValueError, match="length >= 1"):
        collate_tokens([[1], []])


def test_collate_frames():
    a = torch.zeros(3, 88, dtype=torch.bool)
    a[0, 39] = a[2, 87] = True
    b = torch.ones(1, 88, dtype=torch.bool)
    for fn in (collate_frames, collate):
        batch = fn([a, b])
        assert batch["frames"].shape == (2, 3, 88) and batch["frames"].dtype == torch.float32
        assert batch["lengths"].tolist() == [3, 1]
        assert torch.equal(batch["frames"][0], a.float())
        assert batch["frames"][1, 0].sum() == 88 and batch["frames"][1, 1:].sum() == 0
    with pytest.raises(ValueError, match="T x K with one K"):
        collate_frames([a, torch.zeros(2, 12)])


def test_dataloader_with_the_sampler():
    lengths = [1, 4, 2, 4, 3, 1, 2]
    data = PackedSequences.from_sequences([torch.arange(n) + 1 for n in lengths])
    sampler = BucketBatchSampler(data.lengths, batch_tokens=8, shuffle=False)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate_tokens)
    seen = collections.Counter()
    for batch in loader:
        assert batch["tokens"].numel() <= 8
        for row, n in zip(batch["tokens"], batch["lengths"]):
            assert row[:n].tolist() == list(range(1, n + 1)) and not row[n:].any()
            seen[int(n)] += 1
    assert seen == collections.Counter(lengths)
