"""A training run resumed from a mid-epoch checkpoint sees exactly the batches, in the same order, that
an uninterrupted run sees (ResumableLoader), and ends with the same weights."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from zoo.data import PTBDataModule
from zoo.models import CategoricalHMM
from zoo.tasks import LikelihoodTask

WORDS = "the a cat dog sat ran on under mat log big small".split()


class Interrupted(Exception):
    pass


class RecordBatches(pl.Callback):
    """The (epoch, tokens) of every training batch run; raises ``Interrupted`` before step ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        self.stop_at, self.batches = stop_at, []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.stop_at:
            raise Interrupted  # a crash: the last checkpoint is the one after the previous step
        self.batches.append((trainer.current_epoch, batch["tokens"].clone()))


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    g = torch.Generator().manual_seed(0)
    for split, count in (("train", 60), ("valid", 5), ("test", 5)):
        lines = [
            " ".join(
                WORDS[i]
                for i in torch.randint(
                    len(WORDS), (int(torch.randint(2, 9, (1,), generator=g)),), generator=g
                )
            )
            for _ in range(count)
        ]  # noqa: E501
        (folder / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def fit(text, root, record, ckpt_path=None):
    torch.manual_seed(0)
    data = PTBDataModule(data_dir=str(text), batch_tokens=40, seed=3)
    task = LikelihoodTask(
        CategoricalHMM(len(WORDS) + 2, 4, backend="exact", embedding_dim=8, hidden_dim=8, dropout=0.0)
    )
    checkpoints = ModelCheckpoint(dirpath=root, every_n_train_steps=1, save_last=True)
    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer = pl.Trainer(max_epochs=2, callbacks=[record, checkpoints], accelerator="cpu", **quiet)
    trainer.fit(task, data, ckpt_path=ckpt_path)
    return task, trainer


@pytest.mark.parametrize("stop_at", [5, "first of epoch 2"])
def test_a_resumed_run_sees_the_batches_of_a_straight_run(text, tmp_path, stop_at):
    straight = RecordBatches()
    task, trainer = fit(text, tmp_path / "straight", straight)
    per_epoch = trainer.num_training_batches
    assert per_epoch > 6 and len(straight.batches) == 2 * per_epoch
    stop = per_epoch if stop_at == "first of epoch 2" else stop_at
    with pytest.raises(Interrupted):
        fit(text, tmp_path / "crashed", RecordBatches(stop_at=stop))
    resumed = RecordBatches()
    again, _ = fit(text, tmp_path / "resumed", resumed, ckpt_path=tmp_path / "crashed" / "last.ckpt")
    assert [e for e, _ in resumed.batches] == [e for e, _ in straight.batches[stop:]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(resumed.batches, straight.batches[stop:]))
    for (name, want), got in zip(task.state_dict().items(), again.state_dict().values()):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
