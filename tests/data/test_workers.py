"""Worker processes (``num_workers > 0``) load the batches that loading in the training process does,
in every epoch's order, with fork and with spawn (macOS' and Windows' start method): every dataset,
collate function and memory-mapped feature file must pickle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from zoo.data import NpyFolderDataModule, PTBDataModule

sys.path.insert(0, str(Path(__file__).parent))
from test_segment_data import write_npy_folder  # noqa: E402


def text_module(root: Path, workers: int) -> PTBDataModule:
    for split, count in (("train", 30), ("valid", 4), ("test", 4)):
        lines = [" ".join(f"w{(i * 7 + j) % 11}" for j in range(2 + i % 6)) for i in range(count)]
        (root / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n")
    return PTBDataModule(data_dir=str(root), batch_tokens=30, seed=3, num_workers=workers)


def feature_module(root: Path, workers: int) -> NpyFolderDataModule:
    if not (root / "train").exists():
        write_npy_folder(root)
    return NpyFolderDataModule(str(root), batch_size=2, seed=3, num_workers=workers)


def batches(data, context: str | None) -> list[dict]:
    """Two epochs of training batches (the epoch set before each iterator is made, as Lightning's first
    epoch has it) and the validation and predict batches."""
    data.setup()
    seen = []
    for epoch in (0, 1):
        loader = data.train_dataloader()
        loader.batch_sampler.set_epoch(epoch)
        loaders = [loader, data.val_dataloader(), data.predict_dataloader()]
        for loader in loaders:
            if context is not None:
                loader.multiprocessing_context = context
            seen += list(loader)
    return seen


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("make", [text_module, feature_module], ids=["text", "features"])
def test_workers_load_the_same_batches(tmp_path, make, context):
    expected = batches(make(tmp_path, 0), None)
    got = batches(make(tmp_path, 2), context)
    assert len(got) == len(expected) > 4
    for a, b in zip(got, expected):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key
