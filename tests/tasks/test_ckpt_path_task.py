"""``zoo validate / test --ckpt_path``: the checkpoint's task is rebuilt from its own hyperparameters,
through Lightning's public reading of them (``_class_path``), and checkpoints written before they
carried ``_class_path`` still work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import yaml

from zoo.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from test_vocab_from import TAG, write_text  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_a_checkpoint_rebuilds_its_task_old_and_new(tmp_path):
    recipe = str(REPO / "recipes/hmm/ptb-rank-space-small.yaml")
    data = ["--data.init_args.data_dir", str(write_text(tmp_path))]
    main([
        "fit", "--config", recipe, *data, "--model.init_args.init_from", TAG, "--model.init_args.lr", "0.02",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path),
    ])  # fmt: skip
    run = tmp_path / "lightning_logs" / "version_0"
    new = run / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(new, weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    assert hparams["_class_path"] == checkpoint["zoo_task"] == "zoo.tasks.likelihood.LikelihoodTask"
    assert hparams["lr"] == 0.02
    del hparams["_class_path"]  # as structured-zoo 0.1.0 wrote it
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)
    results = {}
    for name, path in (("new", new), ("old", old)):
        out = tmp_path / f"{name}.json"
        args = ["validate", "--config", str(run / "config.yaml"), "--ckpt_path", str(path)]
        args += ["--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path / name)]
        args += ["--trainer.limit_val_batches", "1.0"]  # the whole split: --results refuses the fit's limit
        assert main([*args, "--results", str(out)]) == 0
        results[name] = json.loads(out.read_text())["metrics"]
    assert results["new"] == results["old"] and results["new"]["val/nll"] > 0


def test_command_line_model_flags_win_over_the_checkpoints(tmp_path):
    """Lightning put the checkpoint's hyperparameters over the command line's --model.init_args.* flags,
    so that e.g. the max_eval_length its own error asks for was ignored without a word."""
    recipe = str(REPO / "recipes/hmm/ptb-rank-space-small.yaml")
    data = ["--data.init_args.data_dir", str(write_text(tmp_path))]
    one = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1"]
    one += ["--trainer.limit_val_batches", "1"]
    main([
        "fit", "--config", recipe, *data, "--model.init_args.init_from", TAG, *one,
        "--model.init_args.max_eval_length", "20", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
    ])  # fmt: skip
    checkpoint = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "best.ckpt"
    assert torch.load(checkpoint, weights_only=True)["hyper_parameters"]["max_eval_length"] == 20
    root = tmp_path / "validate"
    args = ["validate", "--config", recipe, *data, "--ckpt_path", str(checkpoint)]
    args += ["--trainer.default_root_dir", str(root), "--trainer.limit_val_batches", "1"]
    assert main([*args, "--model.init_args.max_eval_length=1000"]) == 0
    config = yaml.safe_load(next(root.glob("lightning_logs/version_*/config.yaml")).read_text())
    assert config["model"]["init_args"]["max_eval_length"] == 1000
