"""What the CLI tests share: the trainer section of a tiny, quiet, CSV-logged CPU recipe."""

from __future__ import annotations

from pathlib import Path


def cpu_trainer(tmp: Path) -> dict:
    """One CPU device, one epoch, no progress bar or summary, CSV logs and runs under ``tmp``."""
    return {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp / "runs"),
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(tmp)}},
    }
