"""``BatchLog``: a callback that records every training batch a rank runs, for tests of DDP runs."""

from __future__ import annotations

import json

import lightning.pytorch as pl


class BatchLog(pl.Callback):
    """Appends {"epoch", "tokens", "lengths", "events"} of each training batch to ``{out}.{rank}.jsonl``
    (events: what the model counts, ``num_events``)."""

    def __init__(self, out: str):
        self.out = out

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        events = int(pl_module.model.num_events(batch).sum())
        row = {"epoch": trainer.current_epoch, "tokens": batch["tokens"].tolist(), "events": events,
               "lengths": batch["lengths"].tolist()}  # fmt: skip
        with open(f"{self.out}.{trainer.global_rank}.jsonl", "a") as file:
            file.write(json.dumps(row) + "\n")


def logged_batches(path) -> list[tuple[int, list]]:
    """(epoch, tokens) of each batch a ``BatchLog`` file holds, in order."""
    with open(path) as file:
        return [(row["epoch"], row["tokens"]) for row in map(json.loads, file)]


def logged_events(path) -> int:
    """The events of every batch a ``BatchLog`` file holds."""
    with open(path) as file:
        return sum(json.loads(row)["events"] for row in file)
