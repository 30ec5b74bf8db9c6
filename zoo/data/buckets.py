"""Length-bucketed batching: a packed sequence dataset, a batch sampler, and the batch collators.

``BucketBatchSampler`` sorts the sequences by length and cuts the sorted list into batches whose padded
size ``len(batch) * max length`` is at most ``batch_tokens`` (and/or that hold at most ``batch_size``
sequences), so a batch wastes little padding.

*Training* (``shuffle=True``): every epoch (``set_epoch``) re-draws the order among equal lengths and
the order of the batches from ``(seed, epoch)``. Under DDP all ranks build the same batch list and rank
``r`` takes batches ``r, r + R, r + 2R, ...``; when the count is not a multiple of ``R`` the list is
completed by repeating its first batches (or cut, with ``drop_uneven=True``), so every rank runs the
same number of steps (gradient all-reduce needs that).

*Evaluation* (``shuffle=False``): nothing is repeated or dropped, since that would change the metric.
The length-sorted sequences are dealt to the ranks in turn (rank ``r`` gets sorted positions ``r, r + R,
...``: ``ceil`` or ``floor`` of ``N / R`` sequences of the same length profile) and each rank batches its
own share, so every sequence is evaluated exactly once across ranks. Ranks may then run a different
number of batches (usually equal, at most a few apart): Lightning's evaluation loop handles that under
DDP as long as the metrics are torchmetrics reduced at epoch end (no ``sync_dist`` collective per step).

Batches follow ``docs/training-api.md``: ``collate_tokens`` gives ``{"tokens": B x T long, "lengths": B}``
(padding id 0), ``collate_frames`` gives ``{"frames": B x T x K float, "lengths": B}`` (zero padding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["BucketBatchSampler", "PackedSequences", "collate", "collate_frames", "collate_tokens"]


def _as_lengths(lengths: Sequence[int] | Tensor | np.ndarray) -> np.ndarray:
    arr = lengths.cpu().numpy() if isinstance(lengths, Tensor) else np.asarray(lengths)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence of ints, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")
    if arr.min() < 1:
        raise ValueError(f"every length must be >= 1, got {int(arr.min())} at index {int(arr.argmin())}")
    return arr.astype(np.int64)


class BucketBatchSampler:
    """Yields lists of dataset indices (one list a batch), grouped by length; see the module docstring.

    Args:
        lengths: ``N`` sequence lengths (>= 1), ``lengths[i]`` for dataset item ``i``.
        batch_tokens: at most this many padded tokens (``len(batch) * max length``) a batch; a single
            sequence longer than that forms a batch of its own.
        batch_size: at most this many sequences a batch. At least one of the two limits is needed.
        shuffle: ``True`` for training (reshuffled by ``set_epoch``), ``False`` for evaluation
            (deterministic, every sequence once across ranks).
        seed: the training shuffle's seed; all ranks must use the same one.
        num_replicas, rank: the DDP world size and this process's rank (``0 <= rank < num_replicas``).
        drop_uneven: training under DDP only: cut the batch list to a multiple of ``num_replicas``
            instead of repeating its first batches.
    """

    def __init__(
        self,
        lengths: Sequence[int] | Tensor | np.ndarray,
        batch_tokens: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_uneven: bool = False,
    ) -> None:
        if batch_tokens is None and batch_size is None:
            raise ValueError(
                "give batch_tokens (padded tokens a batch) or batch_size (sequences a batch), got neither"
            )
        for name, value in (("batch_tokens", batch_tokens), ("batch_size", batch_size)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive int, got {num_replicas!r}")
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in 0..{num_replicas - 1}, got {rank!r}")
        self.lengths = _as_lengths(lengths)
        self.batch_tokens = batch_tokens
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = int(seed)
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_uneven = drop_uneven
        self.epoch = 0
        self._resume: tuple[int, int] | None = None
        if shuffle:
            # The batch count does not depend on the epoch: only the order among equal lengths changes.
            total = len(self._chunk(np.sort(self.lengths, kind="stable")))
            per_rank = total // num_replicas if drop_uneven else math.ceil(total / num_replicas)
            if per_rank == 0:
                raise ValueError(
                    f"drop_uneven=True leaves no batch: {total} batches for {num_replicas} replicas; "
                    "lower batch_tokens / batch_size or set drop_uneven=False"
                )
            self._len = per_rank
        else:
            self._len = len(self._chunk(self.lengths[self._eval_indices()]))

    @property
    def sampler(self) -> BucketBatchSampler:
        """This sampler itself: Lightning calls ``set_epoch`` on ``dataloader.batch_sampler.sampler``."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Select the training shuffle of ``epoch`` (no effect when ``shuffle=False``)."""
        self.epoch = int(epoch)

    def resume(self, epoch: int, done: int, replicas: int | None = None) -> None:
        """The next iteration, if it is of ``epoch``, leaves out the batches that run already trained on
        in that epoch, ``done`` on each of its ``replicas`` ranks (default: as many as now); an iteration
        of another epoch is whole. Under another number of ranks, the rest of the epoch's batch list is
        dealt to this run's ranks (``remaining``): every batch is still trained once."""
        self._resume = (int(epoch), int(done), self.num_replicas if replicas is None else int(replicas))

    def remaining(self) -> int | None:
        """The batches this rank has left in a resumed epoch whose run had another number of ranks (None
        otherwise): the loader's trainer counts its epoch's steps from ``len(self) - remaining``."""
        if self._resume is None or self._resume[2] == self.num_replicas or self._resume[0] != self.epoch:
            return None
        return len(self._dealt_rest(self._resume[1] * self._resume[2]))

    def finished(self) -> bool:
        """Whether the resumed epoch (``resume``, if it is the current one) has no batch left for this
        rank: its run trained it to its end."""
        if self._resume is None or self._resume[0] != self.epoch:
            return False
        _, done, replicas = self._resume
        if replicas == self.num_replicas:
            return done >= len(self)
        return self.remaining() == 0

    def _dealt_rest(self, trained: int) -> list[list[int]]:
        """This rank's share of the epoch's batches after the first ``trained`` (in the order every rank
        builds), completed by repeating the epoch's first batches (or cut, ``drop_uneven``) so that every
        rank runs the same number."""
        every = self._epoch_batches()
        rest = every[trained:]
        if self.drop_uneven:
            rest = rest[: len(rest) // self.num_replicas * self.num_replicas]
        else:
            missing = -len(rest) % self.num_replicas
            rest = rest + (every * math.ceil(missing / len(every)))[:missing]
        return rest[self.rank :: self.num_replicas]

    def __len__(self) -> int:
        """The number of batches this rank yields per epoch."""
        return self._len

    def _chunk(self, sorted_lengths: np.ndarray) -> list[tuple[int, int]]:
        """Greedy ``[start, end)`` cuts of an ascending length array under the two limits."""
        cuts: list[tuple[int, int]] = []
        start = 0
        for i in range(1, len(sorted_lengths) + 1):
            if i == len(sorted_lengths):
                cuts.append((start, i))
                break
            n = i + 1 - start
            too_many = self.batch_size is not None and n > self.batch_size
            too_big = self.batch_tokens is not None and n * int(sorted_lengths[i]) > self.batch_tokens
            if too_many or too_big:
                cuts.append((start, i))
                start = i
        return cuts

    def _eval_indices(self) -> np.ndarray:
        order = np.argsort(self.lengths, kind="stable")
        return order[self.rank :: self.num_replicas]

    def batches(self) -> list[list[int]]:
        """This rank's batches for the current epoch (what ``iter`` yields)."""
        if not self.shuffle:
            indices = self._eval_indices()
            return [indices[a:b].tolist() for a, b in self._chunk(self.lengths[indices])]
        batches = self._epoch_batches()
        total = self._len * self.num_replicas
        batches = (batches * math.ceil(total / len(batches)))[:total]
        return batches[self.rank :: self.num_replicas]

    def _epoch_batches(self) -> list[list[int]]:
        """Every rank's batches of the current epoch, in the order all ranks build them."""
        rng = np.random.default_rng([self.seed, self.epoch])
        order = np.lexsort((rng.random(len(self.lengths)), self.lengths))  # by length, random among ties
        batches = [order[a:b].tolist() for a, b in self._chunk(self.lengths[order])]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        # a generator: the epoch's batches are drawn at the first next(), since a resumed Lightning run
        # makes the iterator before it sets the epoch (with worker processes, the DataLoader's iterator
        # draws at once: the zoo's loaders set the epoch first, ResumableLoader and SequenceDataModule)
        resume, self._resume = self._resume, None
        if resume is None or resume[0] != self.epoch:
            yield from self.batches()
        elif resume[2] == self.num_replicas:
            yield from self.batches()[resume[1] :]
        else:
            yield from self._dealt_rest(resume[1] * resume[2])


class PackedSequences(Dataset):
    """Variable-length sequences stored back to back in one tensor; item ``i`` is a view ``T_i x ...``.

    Args:
        data: ``sum(T_i) x ...`` (token ids: ``sum(T_i)``; piano rolls: ``sum(T_i) x 88``).
        lengths: ``N`` lengths ``T_i`` (>= 1) summing to ``data.shape[0]``.
    """

    def __init__(self, data: Tensor, lengths: Sequence[int] | Tensor) -> None:
        lengths_t = torch.as_tensor(_as_lengths(lengths))
        if int(lengths_t.sum()) != data.shape[0]:
            raise ValueError(f"lengths sum to {int(lengths_t.sum())} but data has {data.shape[0]} rows")
        self.data = data
        self.lengths = lengths_t
        self.offsets = torch.cat([lengths_t.new_zeros(1), lengths_t.cumsum(0)])

    @classmethod
    def from_sequences(cls, sequences: Sequence[Tensor]) -> PackedSequences:
        """Pack a list of ``T_i x ...`` tensors (same trailing shape and dtype)."""
        if not sequences:
            raise ValueError("need at least one sequence, got none")
        return cls(torch.cat(list(sequences)), [len(s) for s in sequences])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> Tensor:
        return self.data[self.offsets[i] : self.offsets[i + 1]]


def _lengths_of(items: Sequence[Tensor]) -> Tensor:
    if not items:
        raise ValueError("cannot collate an empty batch")
    lengths = torch.tensor([len(x) for x in items], dtype=torch.long)
    if int(lengths.min()) < 1:
        raise ValueError(f"every sequence needs length >= 1, got lengths {lengths.tolist()}")
    return lengths


def collate_tokens(items: Sequence[Tensor | Sequence[int]]) -> dict[str, Tensor]:
    """Token id sequences (each ``T_i``) -> ``{"tokens": B x T long (0 past each length), "lengths": B}``."""
    seqs = [torch.as_tensor(x, dtype=torch.long) for x in items]
    lengths = _lengths_of(seqs)
    if any(s.dim() != 1 for s in seqs):
        raise ValueError(f"token sequences must be 1-D, got shapes {[tuple(s.shape) for s in seqs]}")
    tokens = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
    for b, s in enumerate(seqs):
        tokens[b, : len(s)] = s
    return {"tokens": tokens, "lengths": lengths}


def collate_frames(items: Sequence[Tensor]) -> dict[str, Tensor]:
    """Piano rolls (each ``T_i x K``, 0/1) -> ``{"frames": B x T x K float, "lengths": B}`` (0-padded)."""
    rolls = [torch.as_tensor(x) for x in items]
    lengths = _lengths_of(rolls)
    if any(r.dim() != 2 or r.shape[1] != rolls[0].shape[1] for r in rolls):
        raise ValueError(
            f"piano rolls must be T x K with one K, got shapes {[tuple(r.shape) for r in rolls]}"
        )
    frames = torch.zeros(len(rolls), int(lengths.max()), rolls[0].shape[1], dtype=torch.float32)
    for b, r in enumerate(rolls):
        frames[b, : len(r)] = r
    return {"frames": frames, "lengths": lengths}


def collate(items: Sequence[Tensor]) -> dict[str, Tensor]:
    """``collate_tokens`` for 1-D items (token ids), ``collate_frames`` for 2-D items (piano rolls)."""
    if items and torch.as_tensor(items[0]).dim() == 2:
        return collate_frames(items)
    return collate_tokens(items)
