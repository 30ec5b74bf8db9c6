"""What the ``zoo predict`` writers share: an output file, written once at the end of the epoch from the
predicted batches of every process, and the data module's description of its inputs."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import BasePredictionWriter


def listed(numbers: list[int], first: int = 20) -> str:
    """The ``first`` numbers, comma-separated, "..." after them when there are more."""
    return ", ".join(map(str, numbers[:first])) + (", ..." if len(numbers) > first else "")


class EpochWriter(BasePredictionWriter):
    """Base of the prediction writers: ``write(trainer, batches)`` gets every predicted batch's output.

    Under DDP each process predicts its share of the batches; they are gathered (on the CPU) and the
    first process writes them all.

    Args:
        output_path: the file to write (its directory is created).
        overwrite: replace an existing file at ``output_path`` (default: a FileExistsError before anything
            is predicted).
    """

    def __init__(self, output_path: str, overwrite: bool = False):
        super().__init__(write_interval="epoch")
        self.output_path = output_path
        self.overwrite = overwrite

    def setup(self, trainer, pl_module, stage: str) -> None:
        """Refuse an existing output file before anything is predicted, unless ``overwrite``."""
        super().setup(trainer, pl_module, stage)
        if stage == "predict" and not self.overwrite and Path(self.output_path).exists():
            raise FileExistsError(
                f"the output_path of {type(self).__name__}, {self.output_path}, exists: give another one, or "
                "overwrite: true (init_args) to replace it"
            )

    def write(self, trainer, batches: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        batches = predictions[0] if predictions and isinstance(predictions[0], list) else predictions
        if getattr(trainer, "world_size", 1) > 1:
            shares: list = [None] * trainer.world_size
            torch.distributed.all_gather_object(shares, move_data_to_device(batches, "cpu"))
            if trainer.global_rank != 0:
                return
            batches = [batch for share in shares for batch in share]
        self.write(trainer, batches)

    @staticmethod
    def from_data(trainer, method: str):
        """What the trainer's data module's ``method()`` returns, or None where it has no such method."""
        data = getattr(trainer, "datamodule", None)
        return getattr(data, method)() if callable(getattr(data, method, None)) else None

    def warn_unpredicted(self, trainer, predicted: Iterable[int]) -> None:
        """Warn, naming the first, about the sequences of the predicted split that no batch predicted (a
        data module with ``predict_count()`` says how many there are)."""
        count = self.from_data(trainer, "predict_count")
        missing = [] if count is None else sorted(set(range(count)) - set(predicted))
        if missing:
            warnings.warn(
                f"{self.output_path}: {len(missing)} of {count} sequences were not predicted (e.g. past "
                f"--trainer.limit_predict_batches) and are not in it: index {listed(missing)}",
                stacklevel=2,
            )

    def write_lines(self, lines: list[str]) -> None:
        path = Path(self.output_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    def write_json_lines(self, rows: list[dict[str, Any]]) -> None:
        """``rows`` in the order of their ``index``, one JSON object a line."""
        self.write_lines([json.dumps(row) for row in sorted(rows, key=lambda r: r["index"])])
