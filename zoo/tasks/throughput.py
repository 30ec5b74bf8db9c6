"""``TrainingThroughput``: the training sentences and tokens a second that the results scripts report."""

from __future__ import annotations

import time

import lightning.pytorch as pl


class TrainingThroughput(pl.Callback):
    """Counts the sentences (``len(batch["lengths"])``) and tokens or frames (``batch["lengths"].sum()``)
    of training batches and the wall-clock seconds of their steps (not validation), after the first
    ``skip`` batches (warm-up)."""

    def __init__(self, skip: int = 0):
        self.skip, self.sentences, self.tokens, self.seconds, self._start = skip, 0, 0, 0.0, 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.skip > 0:
            self.skip -= 1
            return
        self.seconds += time.perf_counter() - self._start
        self.sentences += len(batch["lengths"])
        self.tokens += int(batch["lengths"].sum())

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    @property
    def sentences_per_second(self) -> float:
        return self.sentences / max(self.seconds, 1e-9)
