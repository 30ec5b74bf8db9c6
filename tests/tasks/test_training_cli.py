"""The training stack end to end: `zoo fit | validate | test` on recipes, checkpoints, DDP, errors.

Tiny PTB-format files and a tiny Boulanger-format pickle are written by the tests, so nothing here
reads the network or the real datasets.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from cli_testlib import cpu_trainer, ddp_command, logged_rows

from zoo.cli import main
from zoo.tasks import LikelihoodTask

REPO = Path(__file__).resolve().parents[2]
WORDS = "the a cat dog sat ran on under mat rug <unk> quickly".split()


def write_ptb(directory: Path, seed: int = 0) -> int:
    """ptb.{train,valid,test}.txt with random sentences; returns the vocabulary size (+ <eos>)."""
    g = torch.Generator().manual_seed(seed)
    for split, count in (("train", 40), ("valid", 9), ("test", 7)):
        lines = []
        for _ in range(count):
            n = int(torch.randint(2, 9, (1,), generator=g))
            lines.append(" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (n,), generator=g)))
        (directory / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n")
    train = (directory / "ptb.train.txt").read_text().split()
    return len(set(train)) + 1


def write_music(path: Path, keys: int = 88) -> None:
    g = torch.Generator().manual_seed(1)

    def piece(n):
        return [sorted({21 + int(p) for p in torch.randint(keys, (3,), generator=g)}) for _ in range(n)]

    data = {split: [piece(6 + i) for i in range(k)] for split, k in (("train", 6), ("valid", 3), ("test", 2))}
    path.write_bytes(pickle.dumps(data))


def recipe(tmp: Path, vocab: int, backend: str, data: dict | None = None, **model) -> Path:
    """A small LikelihoodTask recipe over the tiny PTB files (or ``data``)."""
    init = {"num_states": 6, "backend": backend, "embedding_dim": 8, "hidden_dim": 8, "dropout": 0.0}
    if backend in ("low-rank", "rank-space"):
        init["rank"] = 3
    if backend == "randomized":
        init.update(k1=2, k2=2)
    init.update(model)
    if data is None:
        init["vocab_size"] = vocab
        data = {
            "class_path": "zoo.data.PTBDataModule",
            "init_args": {"data_dir": str(tmp), "batch_tokens": 64},
        }
        model_class = "zoo.models.CategoricalHMM"
    else:
        model_class = "zoo.models.BernoulliHMM"
    config = {
        "seed_everything": 0,
        "model": {
            "class_path": "zoo.tasks.LikelihoodTask",
            "init_args": {"model": {"class_path": model_class, "init_args": init}, "lr": 0.01},
        },
        "data": data,
        "trainer": cpu_trainer(tmp),
    }
    path = tmp / f"recipe-{backend}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def ptb(tmp_path):
    return tmp_path, write_ptb(tmp_path)


@pytest.mark.parametrize("backend", ["exact", "low-rank", "rank-space", "randomized"])
def test_fit_fast_dev_run_every_backend(ptb, backend):
    tmp, vocab = ptb
    assert main(["fit", "--config", str(recipe(tmp, vocab, backend)), "--trainer.fast_dev_run", "2"]) == 0


def test_fit_without_validation_keeps_the_learning_rate(ptb):
    """The plateau schedule watches val/nll: with validation off, training runs and the rate stays."""
    tmp, vocab = ptb
    args = ["fit", "--config", str(recipe(tmp, vocab, "exact")), "--trainer.limit_val_batches", "0"]
    assert main([*args, "--trainer.max_epochs", "2"]) == 0
    (checkpoint,) = tmp.rglob("*.ckpt")
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["optimizer_states"][0]["param_groups"][0]["lr"] == 0.01


def music_recipe(tmp: Path, backend: str = "low-rank") -> Path:
    """A small BernoulliHMM recipe over a tiny JSB_Chorales.pickle written into ``tmp``."""
    write_music(tmp / "JSB_Chorales.pickle")
    data = {
        "class_path": "zoo.data.MusicDataModule",
        "init_args": {"dataset": str(tmp / "JSB_Chorales.pickle"), "batch_size": 4},
    }
    return recipe(tmp, 0, backend, data=data)


def test_fit_music_pickle(tmp_path):
    path = music_recipe(tmp_path)
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "2"]) == 0


def test_checkpoint_reload_gives_identical_scores_and_fine_tunes(ptb):
    tmp, vocab = ptb
    path = recipe(tmp, vocab, "rank-space")
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "3"]) == 0
    (ckpt,) = (tmp / "runs").rglob("*.ckpt") if (tmp / "runs").exists() else tmp.rglob("*.ckpt")
    task = LikelihoodTask.load_from_checkpoint(ckpt)
    assert task.hparams["model"]["init_args"]["backend"] == "rank-space"
    from zoo.data import PTBDataModule

    data = PTBDataModule(data_dir=str(tmp), batch_tokens=64)
    data.setup("validate")
    batch = next(iter(data.val_dataloader()))
    task.eval()
    again = LikelihoodTask.load_from_checkpoint(ckpt).eval()
    with torch.no_grad():
        torch.testing.assert_close(task(batch), again(batch), rtol=0, atol=0)
    # fine-tuning: a new task initialized from the checkpoint's model weights
    tuned = LikelihoodTask(task.model.spec(), init_from=str(ckpt)).eval()
    with torch.no_grad():
        torch.testing.assert_close(tuned(batch), task(batch), rtol=0, atol=0)
    assert tuned.hparams["init_from"] is None  # the checkpoint holds the weights: reload reads no file


def test_print_config_round_trips(ptb, capsys):
    tmp, vocab = ptb
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(recipe(tmp, vocab, "exact")), "--print_config"])
    assert done.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["model"]["init_args"]["backend"] == "exact"


def test_vocabulary_mismatch_is_a_clear_error(ptb, capsys):
    """One line (it was a traceback)."""
    tmp, vocab = ptb
    assert main(["fit", "--config", str(recipe(tmp, vocab + 5, "exact")), "--trainer.fast_dev_run", "1"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("zoo: error: ")]
    assert f"the model has vocab_size = {vocab + 5} but the data has {vocab}: set " in line


def test_a_fit_that_fails_at_setup_leaves_no_run_folder(ptb, capsys):
    """The vocabulary mismatch stops the fit after its config.yaml was written: that folder is removed,
    so the corrected run is version_0, as the README's paths say (it was version_1, and version_0 held
    only the failed run's config)."""
    tmp, vocab = ptb
    logs = tmp / "lightning_logs"  # the recipes' CSV logger's
    assert main(["fit", "--config", str(recipe(tmp, vocab + 5, "exact")), "--trainer.max_steps", "1"]) == 2
    assert not logs.exists() or not any(logs.iterdir())
    assert main(["fit", "--config", str(recipe(tmp, vocab, "exact")), "--trainer.max_steps", "1"]) == 0
    assert sorted(p.name for p in logs.iterdir()) == ["version_0"]
    assert (logs / "version_0" / "config.yaml").is_file()


def test_unknown_backend_is_a_clear_error(ptb, capsys):
    tmp, vocab = ptb
    assert main(["fit", "--config", str(recipe(tmp, vocab, "sparse")), "--trainer.fast_dev_run", "1"]) == 2
    assert "zoo: error: unknown backend 'sparse'" in capsys.readouterr().err


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    path = recipe(tmp_path, 20, "exact")  # no ptb.*.txt written
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "1"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"zoo: error: no ptb.train.txt in {tmp_path}: ")
    assert line.endswith("(give it with --data.init_args.data_dir)")


def validation_nll(tmp: Path, ckpt: Path, recipe_path: Path, devices: int) -> float:
    """val/nll of ``zoo validate`` in a fresh process (CPU, ``devices`` processes with gloo)."""
    out = tmp / f"validate-{devices}"
    command = [
        sys.executable, "-m", "zoo.cli", "validate", "--config", str(recipe_path),
        "--ckpt_path", str(ckpt), "--trainer.devices", str(devices),
        "--trainer.logger.init_args.save_dir", str(out),
    ]  # fmt: skip
    if devices > 1:
        command += ["--trainer.strategy", "ddp", "--trainer.use_distributed_sampler", "false"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, cwd=REPO, env=env, capture_output=True, timeout=600)
    (row,) = [r for r in logged_rows(out) if r.get("val/nll")]
    return float(row["val/nll"])


def test_ddp_validation_equals_single_process(ptb):
    """Two CPU processes (gloo) validate the same checkpoint: the metric equals one process's."""
    tmp, vocab = ptb
    path = recipe(tmp, vocab, "exact")
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (ckpt,) = tmp.rglob("*.ckpt")
    single = validation_nll(tmp, ckpt, path, 1)
    double = validation_nll(tmp, ckpt, path, 2)
    assert double == pytest.approx(single, rel=1e-6)


def test_a_one_process_checkpoint_resumed_on_two_trains_the_rest_of_its_epoch(ptb):
    """A run stopped after 3 of its epoch's batches, resumed on 2 processes (plain --trainer.strategy
    ddp: Lightning's own sampler stopped it with a TypeError): the two ranks train the rest of the
    epoch's batch list between them, each batch once (each rank skipped 3 of its own, and the epoch
    ended half-way: batches never trained; audit)."""
    from batch_log import logged_batches

    tmp, vocab = ptb
    path = recipe(tmp, vocab, "exact")
    log = '{"class_path": "batch_log.BatchLog", "init_args": {"out": "%s"}}'
    assert main(["fit", "--config", str(path), "--trainer.callbacks+", log % (tmp / "straight")]) == 0
    straight = [tokens for _, tokens in logged_batches(tmp / "straight.0.jsonl")]
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "3", "--trainer.logger.init_args.name",
                 "first"]) == 0  # fmt: skip
    (checkpoint,) = (tmp / "first").rglob("*.ckpt")
    ddp_command(path, "--ckpt_path", str(checkpoint), "--trainer.callbacks+", log % (tmp / "resumed"),
                "--trainer.logger.init_args.name", "resumed")  # fmt: skip
    ranks = [logged_batches(tmp / f"resumed.{rank}.jsonl") for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == math.ceil((len(straight) - 3) / 2)
    assert {epoch for rank in ranks for epoch, _ in rank} == {0}
    dealt = [ranks[r][k][1] for k in range(len(ranks[0])) for r in (0, 1)]
    assert dealt[: len(straight) - 3] == straight[3:]  # the rest, in order, each batch once


def test_a_recipe_may_name_its_architecture(tmp_path):
    """``model: {architecture: NAME, backend: ..., overrides}`` trains ``zoo.create_model(NAME, ...)``;
    the checkpoint stores the full spec, so it reloads without the registry's help."""
    import zoo
    from zoo.tasks import LikelihoodTask

    vocab = write_ptb(tmp_path)
    config = yaml.safe_load(recipe(tmp_path, vocab, "exact").read_text())
    named = {"architecture": "hmm_categorical_n512_d64", "backend": "exact", "vocab_size": vocab,
             "num_states": 6, "embedding_dim": 8, "hidden_dim": 8}  # fmt: skip
    config["model"]["init_args"]["model"] = named
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["fit", "--config", str(path)]) == 0
    (checkpoint,) = tmp_path.rglob("*.ckpt")
    task = LikelihoodTask.load_from_checkpoint(checkpoint)
    arguments = dict(named)
    built = zoo.create_model(arguments.pop("architecture"), **arguments)
    assert task.model.spec() == built.spec() and task.model.config["dropout"] == 0.1  # the architecture's
    with pytest.raises(ValueError, match="did you mean"):
        LikelihoodTask({"architecture": "hmm_categorical_n512_d6"})


def only(paths):
    (path,) = paths
    return path


def test_a_two_process_run_resumed_ends_as_one_not_stopped(ptb):
    """Two processes (gloo) train with random draws on every step (dropout, state dropout, the randomized
    backend's kept states): a run stopped after 2 steps and resumed on two processes ends with the
    weights of the run that was not stopped; each rank's random generators' states are in the
    checkpoint (its draws differed from the first step on; audit)."""
    tmp, vocab = ptb
    path = recipe(tmp, vocab, "randomized", dropout=0.3, state_dropout=0.2)
    epochs = ("--trainer.max_epochs", "3")
    for name, steps in (("straight", "5"), ("first", "2")):
        ddp_command(path, *epochs, "--trainer.max_steps", steps, "--trainer.logger.init_args.name", name)
    (checkpoint,) = (tmp / "first").rglob("*.ckpt")
    assert len(torch.load(checkpoint, weights_only=True)["zoo_random_states"]) == 2
    ddp_command(path, *epochs, "--trainer.max_steps", "5", "--ckpt_path", str(checkpoint),
                "--trainer.logger.init_args.name", "resumed")  # fmt: skip
    ends = [torch.load(only((tmp / r).rglob("*.ckpt")), weights_only=True) for r in ("straight", "resumed")]
    assert [end["global_step"] for end in ends] == [5, 5]
    for name, weight in ends[0]["state_dict"].items():
        torch.testing.assert_close(ends[1]["state_dict"][name], weight, rtol=0, atol=0, msg=name)


def test_results_of_part_of_a_split_are_refused(ptb, capsys):
    """``zoo test --results`` with a batch limit wrote one batch's metrics, which a card then showed as
    the whole split's (audit)."""
    tmp, vocab = ptb
    path = recipe(tmp, vocab, "exact")
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (ckpt,) = tmp.rglob("*.ckpt")
    command = ["test", "--config", str(path), "--ckpt_path", str(ckpt), "--results", str(tmp / "r.json")]
    assert main([*command, "--trainer.limit_test_batches", "1"]) == 2
    assert "--trainer.limit_test_batches 1 evaluates part of it" in capsys.readouterr().err
    assert not (tmp / "r.json").exists()
    assert main(command) == 0 and json.loads((tmp / "r.json").read_text())["metrics"]


def test_tokens_trained_on_two_processes_are_every_process_s(ptb):
    """``train/tokens`` on two processes was rank 0's events times 2, 15 % off the events trained on
    where the ranks' batches differ in length (audit): it is now the sum of every rank's batches (an
    epoch's batches dealt to the ranks, the first ones again to even them out)."""
    from batch_log import logged_events

    tmp, vocab = ptb
    path = recipe(tmp, vocab, "exact")
    log = '{"class_path": "batch_log.BatchLog", "init_args": {"out": "%s"}}'
    epochs = ("--trainer.max_epochs", "1", "--trainer.callbacks+")
    named = "--trainer.logger.init_args.name"
    assert main(["fit", "--config", str(path), *epochs, log % (tmp / "one"), named, "one"]) == 0
    ddp_command(path, *epochs, log % (tmp / "two"), named, "two")
    ends = [torch.load(only((tmp / r).rglob("*.ckpt")), weights_only=True) for r in ("one", "two")]
    assert ends[0]["zoo_progress"]["events"] == logged_events(tmp / "one.0.jsonl")
    ranks = [logged_events(tmp / f"two.{rank}.jsonl") for rank in (0, 1)]
    assert ends[1]["zoo_progress"]["events"] == sum(ranks) and ranks[0] != ranks[1], ranks
