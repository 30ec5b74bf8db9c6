"""A training run resumed from a mid-epoch checkpoint, or from one written when a run stopped (max_steps,
an epoch's end), sees exactly the batches, in the same order and at the same steps, that an uninterrupted
run sees (ResumableLoader, LikelihoodTask.on_load_checkpoint), draws the same random numbers (dropout,
the randomized backend's states: zoo.tasks.random_state), logs the same steps, tokens and continuing
seconds, and ends with the same weights."""

from __future__ import annotations

import csv

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from zoo.data import PTBDataModule
from zoo.models import CategoricalHMM
from zoo.tasks import LikelihoodTask

WORDS = "the a cat dog sat ran on under mat log big small".split()


class Interrupted(Exception):
    pass


class RecordBatches(pl.Callback):
    """The (epoch, step, tokens) of every training batch run; raises ``Interrupted`` before step
    ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        self.stop_at, self.batches = stop_at, []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.stop_at:
            raise Interrupted  # a crash: the last checkpoint is the one after the previous step
        self.batches.append((trainer.current_epoch, trainer.global_step, batch["tokens"].clone()))


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


def fit(text, root, record, ckpt_path=None, checkpoints=None, validate=False, workers=0, **limits):
    torch.manual_seed(0)
    data = PTBDataModule(data_dir=str(text), batch_tokens=40, seed=3, num_workers=workers)
    task = LikelihoodTask(  # every step draws: dropout masks, state dropout, the randomized backend's states
        CategoricalHMM(
            len(WORDS) + 2, 6, backend="randomized", k1=2, k2=2, embedding_dim=8, hidden_dim=8,
            dropout=0.3, state_dropout=0.2,
        )
    )
    checkpoints = checkpoints or ModelCheckpoint(dirpath=root, every_n_train_steps=1, save_last=True)
    quiet = dict(enable_progress_bar=False, enable_model_summary=False)
    quiet["limit_val_batches"] = None if validate else 0
    trainer = pl.Trainer(
        callbacks=[record, checkpoints], accelerator="cpu", logger=CSVLogger(root, name="log", version=0),
        log_every_n_steps=1, **(limits or dict(max_epochs=2)), **quiet,
    )  # fmt: skip
    trainer.fit(task, data, ckpt_path=ckpt_path)
    return task, trainer


def logged(root, name="train/tokens"):
    """The (step, value) rows of ``name`` that the run in ``root`` logged."""
    with open(root / "log" / "version_0" / "metrics.csv") as file:
        return [(int(row["step"]), float(row[name])) for row in csv.DictReader(file) if row.get(name)]


def assert_same_run(straight, resumed, stop, task, again):
    """The resumed run trains the straight run's batches from ``stop`` on, at the same epochs and
    steps, and ends with its weights."""
    assert [(e, s) for e, s, _ in resumed.batches] == [(e, s) for e, s, _ in straight.batches[stop:]]
    assert all(torch.equal(a, b) for (*_, a), (*_, b) in zip(resumed.batches, straight.batches[stop:]))
    for (name, want), got in zip(task.state_dict().items(), again.state_dict().values()):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)


# worker processes draw an epoch's batches when Lightning makes the iterator, before it sets the epoch:
# a resume at an epoch's end trained no batch, or the finished epoch's shuffle again (audit)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop_at", [5, "first of epoch 2"])
def test_a_resumed_run_sees_the_batches_of_a_straight_run(text, tmp_path, stop_at, workers):
    straight = RecordBatches()
    task, trainer = fit(text, tmp_path / "straight", straight)
    per_epoch = trainer.num_training_batches
    assert per_epoch > 6 and len(straight.batches) == 2 * per_epoch
    stop = per_epoch if stop_at == "first of epoch 2" else stop_at
    with pytest.raises(Interrupted):
        fit(text, tmp_path / "crashed", RecordBatches(stop_at=stop), workers=workers)
    resumed = RecordBatches()
    again, _ = fit(
        text, tmp_path / "resumed", resumed, ckpt_path=tmp_path / "crashed" / "last.ckpt", workers=workers
    )
    assert_same_run(straight, resumed, stop, task, again)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stopped_by", ["max_steps mid-epoch", "epoch end", "max_steps, recipes' last.ckpt"])
def test_a_stopped_run_goes_on_as_a_straight_run(text, tmp_path, stopped_by, workers):
    """The checkpoint a run writes when it stops (Lightning marks its epoch processed, not completed)
    resumed with a larger max_steps: the rest of a cut-short epoch, then the next epochs' shuffles, at
    the straight run's steps (Lightning alone trained nothing, skipped the epoch's rest, or ran the
    next epoch's shuffle one step late). The recipes' checkpoint (best by val/nll, and last) writes
    last.ckpt at the stop too (it held the previous epoch's end: audit). With worker processes too."""
    first = dict(max_epochs=3, max_steps=5) if stopped_by != "epoch end" else dict(max_epochs=1)
    latest = ModelCheckpoint(dirpath=tmp_path / "stopped")  # Lightning's default: at the epoch's end
    if stopped_by.endswith("last.ckpt"):
        latest = ModelCheckpoint(
            dirpath=tmp_path / "stopped", filename="best", monitor="val/nll", save_last=True,
            enable_version_counter=False,
        )  # fmt: skip
    stopped = RecordBatches()
    _, trainer = fit(
        text, tmp_path / "stopped", stopped, checkpoints=latest, validate=True, workers=workers, **first
    )
    stop, per_epoch = trainer.global_step, trainer.num_training_batches
    resume_from = latest.last_model_path if stopped_by.endswith("last.ckpt") else latest.best_model_path
    assert torch.load(resume_from, weights_only=False)["global_step"] == stop
    limits = dict(max_epochs=3, max_steps=2 * per_epoch + 3)
    straight, resumed = RecordBatches(), RecordBatches()
    task, trainer = fit(text, tmp_path / "straight", straight, validate=True, **limits)
    again, trainer_again = fit(
        text, tmp_path / "resumed", resumed, ckpt_path=resume_from, validate=True, workers=workers, **limits
    )
    assert len(resumed.batches) == 2 * per_epoch + 3 - stop
    assert_same_run(straight, resumed, stop, task, again)
    assert logged(tmp_path / "resumed") == logged(tmp_path / "straight")[stop:]
    if stopped_by != "epoch end":  # the resumed epoch's end steps the scheduler (Lightning's not)
        schedulers = (t.lr_scheduler_configs[0].scheduler.state_dict() for t in (trainer, trainer_again))
        assert next(schedulers) == next(schedulers)


def test_tokens_and_seconds_go_on_across_a_resume(text, tmp_path):
    """A step-based checkpoint counts the batch it is written after (its callback runs before the
    task's on_train_batch_end), and the first step after the resume adds its seconds."""
    fit(text, tmp_path / "straight", RecordBatches(), max_steps=5)
    with pytest.raises(Interrupted):
        fit(text, tmp_path / "crashed", RecordBatches(stop_at=3))
    progress_from = tmp_path / "crashed" / "last.ckpt"
    progress = torch.load(progress_from, weights_only=True)["zoo_progress"]
    assert logged(tmp_path / "straight")[2] == (2, progress["events"])  # the tokens of 3 batches
    fit(text, tmp_path / "resumed", RecordBatches(), ckpt_path=progress_from, max_steps=5)
    assert logged(tmp_path / "resumed") == logged(tmp_path / "straight")[3:]
    assert logged(tmp_path / "resumed", "train/seconds")[0][1] > progress["seconds"]


def test_a_checkpoint_of_two_ranks_resumed_on_one_trains_the_rest_of_the_epoch(text, tmp_path):
    """A mid-epoch checkpoint whose run had two ranks, each 3 batches in (6 of the epoch's batch list
    trained), resumed in one process: it trains the list from batch 6 on, once each, then the next
    epoch whole (it trained batches 3-5 again: the checkpoint counted each rank's batches; audit)."""
    straight = RecordBatches()
    _, trainer = fit(text, tmp_path / "straight", straight)
    per_epoch = trainer.num_training_batches
    with pytest.raises(Interrupted):
        fit(text, tmp_path / "crashed", RecordBatches(stop_at=3))
    checkpoint = torch.load(tmp_path / "crashed" / "last.ckpt", weights_only=False)
    (loader,) = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert loader == {"epoch": 0, "batches_done": 3, "replicas": 1}
    loader["replicas"] = 2  # as two ranks would have written it
    torch.save(checkpoint, tmp_path / "two-ranks.ckpt")
    resumed = RecordBatches()
    fit(text, tmp_path / "resumed", resumed, ckpt_path=tmp_path / "two-ranks.ckpt")
    epochs = [[t for e, _, t in run.batches if e == epoch] for run in (straight, resumed) for epoch in (0, 1)]
    straight_0, straight_1, resumed_0, resumed_1 = epochs
    assert len(resumed_0) == per_epoch - 6 and len(resumed_1) == per_epoch
    assert all(torch.equal(a, b) for a, b in zip(resumed_0 + resumed_1, straight_0[6:] + straight_1))
