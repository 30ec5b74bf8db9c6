"""What the ``zoo predict`` writers share: an output file, written once at the end of the epoch from the
predicted batches, and the data module's description of its inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import BasePredictionWriter


class EpochWriter(BasePredictionWriter):
    """Base of the prediction writers: ``write_on_epoch_end`` gets the batches' predictions.

    Args:
        output_path: the file to write (its directory is created).
    """

    def __init__(self, output_path: str):
        super().__init__(write_interval="epoch")
        self.output_path = output_path

    @staticmethod
    def batches(predictions: list) -> list[dict[str, Any]]:
        """The predicted batches' outputs (Lightning nests them by dataloader when there are several)."""
        return predictions[0] if predictions and isinstance(predictions[0], list) else predictions

    @staticmethod
    def from_data(trainer, method: str):
        """What the trainer's data module's ``method()`` returns, or None where it has no such method."""
        data = getattr(trainer, "datamodule", None)
        return getattr(data, method)() if callable(getattr(data, method, None)) else None

    def write_lines(self, lines: list[str]) -> None:
        path = Path(self.output_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    def write_json_lines(self, rows: list[dict[str, Any]]) -> None:
        """``rows`` in the order of their ``index``, one JSON object a line."""
        self.write_lines([json.dumps(row) for row in sorted(rows, key=lambda r: r["index"])])
