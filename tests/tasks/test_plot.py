"""zoo plot RUN_DIR: a run's learning curves against steps, tokens and hours; the task logs the
tokens and seconds it trained, and a resumed run goes on counting."""

from __future__ import annotations

import math

import torch
from test_training_cli import recipe, write_ptb

from zoo.cli import main
from zoo.plot import find_metrics, progress_at, read_curves


def test_a_run_plots_its_learning_curves(tmp_path, capsys):
    config = recipe(tmp_path, write_ptb(tmp_path), "exact")
    args = ["fit", "--config", str(config), "--trainer.max_epochs", "3", "--trainer.log_every_n_steps", "1"]
    assert main(args) == 0
    curves = read_curves(find_metrics(tmp_path))
    assert {"train/loss", "val/nll", "val/ppl"} <= set(curves) and "val/nll_std" not in curves
    steps, tokens, seconds, _ = zip(*curves["train/loss"])
    for axis in (steps, tokens, seconds):
        assert list(axis) == sorted(axis)
    assert tokens[0] > 0 and seconds[-1] > 0
    at_epochs = [p[1] for p in curves["val/nll"]]  # the tokens trained at each validation
    assert at_epochs == sorted(at_epochs) and len(at_epochs) == 3
    assert main(["plot", str(tmp_path)]) == 0
    written = capsys.readouterr().out.split()[-1]
    assert written.endswith("learning_curves.png") and open(written, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    (checkpoint,) = tmp_path.rglob("*.ckpt")
    progress = torch.load(checkpoint, map_location="cpu", weights_only=True)["zoo_progress"]
    assert progress["events"] == tokens[-1] and progress["seconds"] > 0  # a resumed run goes on from here


def test_the_title_defaults_to_the_version_folder_and_can_be_given(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    titles = []
    monkeypatch.setattr(Figure, "suptitle", lambda self, text, **kw: titles.append(text))
    version = tmp_path / "run" / "lightning_logs" / "version_3"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text("epoch,step,train/loss,train/tokens,train/seconds\n0,1,5.0,100,1\n")
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "a.png")]) == 0
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "b.png"), "--title", "hmm.ptb"]) == 0
    assert titles == ["lightning_logs/version_3", "hmm.ptb"]


def test_a_folder_without_logs_is_a_clear_error(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert "no metrics.csv under" in capsys.readouterr().err


def test_validation_points_between_training_rows_get_interpolated_progress(tmp_path):
    """Training rows are logged every few steps, validation more often: a validation point's tokens and
    seconds are interpolated between the training rows around it (from 0 at step 0), and past the last
    row they go on at the last interval's rate."""
    (tmp_path / "metrics.csv").write_text(
        "epoch,step,train/loss,train/tokens,train/seconds,val/nll\n"
        "0,10,5.0,1000,10,\n0,4,,,,7.0\n0,14,,,,6.0\n0,20,4.0,2000,30,\n0,24,,,,5.5\n"
    )
    curves = read_curves(find_metrics(tmp_path))
    assert [p[:3] for p in curves["val/nll"]] == [(4, 400, 4), (14, 1400, 18), (24, 2400, 38)]
    assert [p[:3] for p in curves["train/loss"]] == [(10, 1000, 10), (20, 2000, 30)]
    assert all(map(math.isnan, progress_at([], 3.0)))


def test_with_tensorboard_installed_the_run_still_writes_metrics_csv(tmp_path, monkeypatch):
    """Where tensorboard is installed Lightning's default logger is TensorBoard's; the run then logs to
    metrics.csv too (first, so the checkpoints stay under its version folder) and zoo plot draws it."""
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.trainer.connectors.logger_connector import logger_connector

    class TensorBoardStandIn(Logger):  # tensorboard itself is not a test dependency
        def __init__(self, save_dir, version=None):
            super().__init__()
            self.seen = []

        name, version = "tensorboard", 0

        def log_metrics(self, metrics, step=None):
            self.seen.append(metrics)

        def log_hyperparams(self, params, *args, **kwargs):
            pass

    monkeypatch.setattr(logger_connector, "_TENSORBOARD_AVAILABLE", True)
    monkeypatch.setattr(logger_connector, "TensorBoardLogger", TensorBoardStandIn)
    config = recipe(tmp_path, write_ptb(tmp_path), "exact")
    assert (
        main(["fit", "--config", str(config), "--trainer.max_epochs", "1", "--trainer.logger", "true"]) == 0
    )
    assert "val/nll" in read_curves(find_metrics(tmp_path))
    (checkpoint,) = tmp_path.rglob("*.ckpt")
    assert checkpoint.parent.parent == find_metrics(tmp_path)[-1].parent  # lightning_logs/version_0/


def _version(root, n, rows, mtime, resumed=None):
    """lightning_logs/version_n/metrics.csv of ``rows`` (epoch, step, loss, tokens, seconds, val/nll), and
    its config.yaml (``resumed``: the checkpoint it resumed)."""
    import os

    folder = root / "lightning_logs" / f"version_{n}"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text(f"ckpt_path: {resumed}\n" if resumed else "seed_everything: 0\n")
    path = folder / "metrics.csv"
    lines = ["epoch,step,train/loss,train/tokens,train/seconds,val/nll"]
    lines += [",".join("" if x is None else str(x) for x in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (mtime, mtime))
    return path


def test_a_resumed_run_is_one_curve_and_an_evaluation_after_it_is_passed_over(tmp_path):
    """zoo plot read only the newest metrics.csv: after a zoo test into the same folder it failed ("holds
    no train/loss"), and after a resume it drew the resumed part alone (audit)."""
    rows = [(0, 2, 5.0, 200, 2, None), (0, 4, 4.0, 400, 4, 6.0), (0, 6, 3.5, 600, 6, None)]
    first = _version(tmp_path, 0, rows, 1)
    _version(tmp_path, 1, [(0, 2, 9.0, 200, 2, None)], 2)  # another run from scratch
    checkpoint = first.parent / "checkpoints" / "epoch=0-step=5.ckpt"
    resumed = _version(tmp_path, 2, [(0, 6, 3.4, 600, 6, None), (0, 8, 3.0, 800, 8, 5.0)], 3, checkpoint)
    _version(tmp_path, 3, [(0, 8, None, None, None, 5.0)], 4, resumed.parent / "checkpoints" / "b.ckpt")
    assert find_metrics(tmp_path) == [first, resumed]
    curves = read_curves(find_metrics(tmp_path))
    assert [(p[0], p[3]) for p in curves["train/loss"]] == [(2, 5.0), (4, 4.0), (6, 3.4), (8, 3.0)]
    assert [(p[0], p[3]) for p in curves["val/nll"]] == [(4, 6.0), (8, 5.0)]
