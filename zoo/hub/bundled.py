"""Pretrained checkpoints shipped inside the package: ``zoo/weights/<arch.tag>/``.

Each folder is a pretrained-model folder (``zoo.hub.pretrained``: config.json, model.safetensors, the
card, results.json, training_config.yaml) written by ``scripts/train_pretrained.py``. Importing ``zoo``
registers every folder as the pretrained tag of its name (``zoo.hub.registry.register_pretrained``), so
``zoo.from_pretrained("hmm_categorical_n512_d64.ptb_exact")`` and ``create_model(tag, pretrained=True)``
work offline on a fresh install. ``quick_check`` re-measures the number a checkpoint's
``results.json`` stores under ``quick_check`` (the tests compare them).
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import torch
import yaml

from zoo.hub.registry import PretrainedTag, list_models, register_pretrained

WEIGHTS = Path(__file__).resolve().parent.parent / "weights"
QUICK_CHECK_BATCHES = 2


def bundled_folders() -> dict[str, Path]:
    """``arch.tag`` -> its folder under ``zoo/weights/``, for every bundled checkpoint."""
    if not WEIGHTS.is_dir():
        return {}
    return {p.name: p for p in sorted(WEIGHTS.iterdir()) if (p / "config.json").is_file()}


def register_bundled() -> None:
    """Register every bundled checkpoint as a pretrained tag (its folder is the source)."""
    known = set(list_models(pretrained=True))
    for name, folder in bundled_folders().items():
        if name not in known:
            register_pretrained(PretrainedTag(name, str(folder), description="bundled with the package"))


def data_module(training_config: dict[str, Any]):
    """The data module of a ``zoo fit`` configuration's ``data`` section (class_path, init_args)."""
    section = training_config["data"]
    module, _, name = section["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**(section.get("init_args") or {}))


def bundled_data(tag: str):
    """The (not yet set up) data module a bundled checkpoint was trained on, from its training config."""
    return data_module(read_training_config(bundled_folders()[tag]))


def test_loader(training_config: dict[str, Any]):
    """The test-split loader of a ``zoo fit`` configuration's data (prepared and set up)."""
    data = data_module(training_config)
    data.prepare_data()
    data.setup("test")
    return data.test_dataloader()


def first_test_batch(tag: str) -> dict[str, torch.Tensor]:
    """The first test batch of the data a bundled checkpoint was trained on."""
    return next(iter(test_loader(read_training_config(bundled_folders()[tag]))))


def quick_check(model, training_config: dict[str, Any], batches: int = QUICK_CHECK_BATCHES) -> dict[str, Any]:
    """NLL (nats per event, the tasks' ``nll``) of ``model`` on the first ``batches`` batches of the
    test split of its training configuration's data: ``{"split", "batches", "sequences", "nll"}``. The
    random draws of batch i (a VAE's importance samples) are seeded with i, as ``zoo test`` seeds them."""
    total, events, sequences = 0.0, 0, 0
    model = model.eval()
    with torch.no_grad():
        for index, batch in enumerate(test_loader(training_config)):
            if index == batches:
                break
            generator = torch.Generator().manual_seed(index)
            total -= float(model.log_likelihood(batch, generator=generator).double().sum())
            events += int(model.num_events(batch).sum())
            sequences += int(model.num_events(batch).numel())
    if not math.isfinite(total) or events == 0:
        raise ValueError(f"quick_check: no finite NLL on the first {batches} test batches (got {total})")
    return {"split": "test", "batches": batches, "sequences": sequences, "nll": total / events}


def read_training_config(folder: str | Path) -> dict[str, Any]:
    """The parsed ``training_config.yaml`` of a pretrained-model folder."""
    return yaml.safe_load((Path(folder) / "training_config.yaml").read_text())
