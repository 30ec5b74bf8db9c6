"""The shared LightningDataModule of the sequence data sets: length-bucketed loaders, DDP-aware.

A subclass fills ``self.datasets`` (``"train"`` / ``"valid"`` / ``"test"`` -> ``PackedSequences``) in
``setup`` and sets ``collate_fn``. The loaders use ``BucketBatchSampler`` with the trainer's world size
and rank, so under DDP the Trainer must not inject its own sampler: run with
``Trainer(use_distributed_sampler=False)`` (``zoo fit`` and the other commands set it); otherwise a
``SetupError`` says so. Lightning calls the sampler's ``set_epoch``
at every training epoch (through ``batch_sampler.sampler``), which reshuffles the batches.

The training loader is resumable (``ResumableLoader``): every checkpoint records the epoch, how many
of its batches each rank trained and the number of ranks, and a run resumed from it (``--ckpt_path``)
goes on with the next batch of the same order, so it sees exactly the batches a run without the
interruption sees (on another number of ranks: the rest of the epoch's batches, each once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from zoo.data.buckets import BucketBatchSampler, PackedSequences
from zoo.data.hf_source import source_name
from zoo.errors import SetupError
from zoo.extras import imported

pl = imported("lightning.pytorch", "train", "zoo.data's DataModules")

__all__ = ["SPLITS", "SequenceDataModule"]

SPLITS = ("train", "valid", "test")


class SequenceDataModule(pl.LightningDataModule):
    """Base of ``PTBDataModule`` and ``MusicDataModule``: train / val / test loaders over ``self.datasets``.

    Args:
        batch_tokens: at most this many padded events (``B x T``) a batch.
        batch_size: at most this many sequences a batch (at least one of the two limits is needed).
        num_workers: DataLoader worker processes (0: load in the main process).
        seed: the training shuffle's seed (the epoch is added by ``set_epoch``).
        predict_split: the split ``zoo predict`` reads ("train", "valid" or "test").
    """

    collate_fn: Callable[[list[Tensor]], dict[str, Tensor]]

    def __init__(
        self,
        batch_tokens: int | None,
        batch_size: int | None,
        num_workers: int = 0,
        seed: int = 0,
        predict_split: str = "test",
    ) -> None:
        super().__init__()
        if batch_tokens is None and batch_size is None:
            raise ValueError(
                "give batch_tokens (padded events a batch) or batch_size (sequences a batch), got neither"
            )
        if predict_split not in SPLITS:
            raise ValueError(f"predict_split must be one of {list(SPLITS)}, got {predict_split!r}")
        self.predict_split = predict_split
        self.batch_tokens = batch_tokens
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.datasets: dict[str, PackedSequences] = {}

    @classmethod
    def card_dataset(cls, args: dict[str, Any]) -> str:
        """The name model cards give the data that a data module built with ``args`` (its ``init_args``)
        reads: a ``datasets`` source by its Hub id or files (``hf_source.source_name``), else
        ``dataset_name``."""
        if args.get("hf_dataset"):
            return source_name(args["hf_dataset"])
        return cls.dataset_name(args)

    @classmethod
    def dataset_name(cls, args: dict[str, Any]) -> str:
        """The name of the data that ``args`` read from files or packages: by default the class's name
        without ``DataModule``, lower-cased; a data module that reads the user's files names them."""
        return cls.__name__.removesuffix("DataModule").lower()

    def _replicas(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None:
            return trainer.world_size, trainer.global_rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size(), torch.distributed.get_rank()
        return 1, 0

    def _train_dataset(self) -> PackedSequences:
        """The training sequences (a subclass may filter them)."""
        return self.datasets["train"]

    def _loader(self, split: str, train: bool, indexed: bool = False) -> DataLoader:
        """The loader of ``split``: shuffled buckets for training; ``indexed``: each batch also holds
        ``index``, B long, the sequences' positions in the split."""
        if split not in self.datasets:
            raise RuntimeError(
                f"no {split!r} data: call setup() first (have {sorted(self.datasets) or 'none'})"
            )
        dataset = self._train_dataset() if train else self.datasets[split]
        num_replicas, rank = self._replicas()
        self._check_replicas(split, train, len(dataset), num_replicas)
        sampler = BucketBatchSampler(
            dataset.lengths,
            batch_tokens=self.batch_tokens,
            batch_size=self.batch_size,
            shuffle=train,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank,
        )
        loader = (ResumableLoader if train else DataLoader)(
            IndexedItems(dataset) if indexed else dataset,
            batch_sampler=sampler,
            collate_fn=CollateWithIndex(self.collate_fn) if indexed else self.collate_fn,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            # the workers' seeds: drawn from the global generator otherwise, at each iteration's start,
            # between a checkpoint and the next training batch (zoo.tasks.random_state)
            generator=torch.Generator().manual_seed(self.seed),
        )
        if train:
            # worker processes draw the epoch's batches when Lightning makes the iterator, before its
            # set_epoch: a loader made at a resumed run's later epoch starts with that epoch's shuffle
            epoch = getattr(self.trainer, "current_epoch", None)  # None: no trainer (yet)
            if epoch is not None:
                sampler.set_epoch(epoch)
            loader.progress, loader.recount = self._batches_trained, self._count_batches_from
        return loader

    def _check_replicas(self, split: str, train: bool, sequences: int, num_replicas: int) -> None:
        """SetupError where the processes cannot share ``split``: a trainer that would inject its own
        distributed sampler (the batches are this module's, already split), or an evaluation split with
        fewer sequences than processes (a process without any stops the others at its first collective)."""
        if num_replicas == 1:
            return
        connector = getattr(self.trainer, "_accelerator_connector", None)
        if getattr(connector, "use_distributed_sampler", False):
            raise SetupError(
                f"{type(self).__name__} splits its batches between the {num_replicas} processes itself: run "
                "the trainer with use_distributed_sampler=False (--trainer.use_distributed_sampler false; "
                "zoo fit / validate / test / predict set it for the zoo's data modules)"
            )
        if not train and sequences < num_replicas:
            raise SetupError(
                f"the {split} split has {sequences} sequence(s) for {num_replicas} processes: each process "
                f"evaluates at least one, so run {split} on at most {sequences} device(s)"
            )

    def _batches_trained(self) -> int:
        """The training batches of the current epoch that the trainer has run."""
        return self.trainer.fit_loop.epoch_loop.batch_progress.current.processed

    def _count_batches_from(self, done: int) -> None:
        """Set the trainer's count of the current epoch's batches (restored from a checkpoint) to
        ``done``, keeping the differences between its ready, started, processed and completed counts."""
        current = self.trainer.fit_loop.epoch_loop.batch_progress.current
        shift = done - current.processed
        for name in ("ready", "started", "processed", "completed"):
            setattr(current, name, max(0, getattr(current, name) + shift))

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def predict_dataloader(self) -> DataLoader:
        """``zoo predict``'s batches: the ``predict_split``, each batch with ``index``."""
        return self._loader(self.predict_split, train=False, indexed=True)

    def predict_count(self) -> int:
        """The number of sequences of the ``predict_split`` (their ``index`` runs over 0 .. count - 1)."""
        self.setup()
        return len(self.datasets[self.predict_split])


class IndexedItems(Dataset):
    """A dataset's items paired with their positions: item i is (i, dataset[i])."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[int, Any]:
        return i, self.dataset[i]


class CollateWithIndex:
    """A collate function over ``IndexedItems``: the batch of ``collate_fn`` with ``index`` (B long)."""

    def __init__(self, collate_fn: Callable[[list], dict[str, Tensor]]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, items: list[tuple[int, Any]]) -> dict[str, Tensor]:
        batch = self.collate_fn([item for _, item in items])
        batch["index"] = torch.tensor([i for i, _ in items], dtype=torch.long)
        return batch


class ResumableLoader(DataLoader):
    """A training ``DataLoader`` over a ``BucketBatchSampler`` that Lightning saves in checkpoints
    (``state_dict`` / ``load_state_dict``): ``{"epoch", "batches_done", "replicas"}``, the batches that
    ``progress()`` (the data module's trainer) counts as run on each of the run's ranks: the loader
    itself has already fetched ahead. A run resumed on another number of ranks trains the rest of the
    epoch's batches, dealt to its ranks, and ``recount(done)`` sets its trainer's count of the epoch's
    steps so that the epoch ends after them."""

    progress: Callable[[], int] | None = None
    recount: Callable[[int], None] | None = None

    def state_dict(self) -> dict[str, int]:
        if self.progress is None:  # a copy Lightning re-made of this loader: nothing to record
            return {}
        sampler = self.batch_sampler
        done = int(self.progress())
        return {"epoch": sampler.epoch, "batches_done": done, "replicas": sampler.num_replicas}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if not state:
            return
        sampler = self.batch_sampler
        sampler.resume(state["epoch"], state["batches_done"], state.get("replicas"))
        sampler.set_epoch(state["epoch"])  # Lightning sets it again, to the same epoch
        if sampler.finished():  # trained to its end: the next epoch, whole (Lightning sets it too, but
            sampler.set_epoch(state["epoch"] + 1)  # after worker processes have drawn their batches)
            return
        remaining = sampler.remaining()
        if remaining is not None and self.recount is not None:
            self.recount(len(sampler) - remaining)
