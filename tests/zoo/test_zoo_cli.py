"""zoo fit -> zoo test --results -> zoo export -> from_pretrained, and zoo fit fine-tuning from the
exported folder; the commands' errors. Tiny PTB-format files, CPU, one epoch."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from zoo_testlib import RecordVocab, example_batch, scores

import zoo
from zoo.cli import main
from zoo.data.vocab import Vocabulary
from zoo.hub.bundled import bundled_folders, data_module
from zoo.hub.export import portable
from zoo.hub.pretrained import save_vocab
from zoo.tasks import LikelihoodTask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from test_training_cli import recipe, write_ptb  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(recipe, best checkpoint, results JSON) of a tiny rank-space HMM trained by zoo fit."""
    tmp = tmp_path_factory.mktemp("zoo-cli")
    config = recipe(tmp, write_ptb(tmp), "rank-space")
    main(["fit", "--config", str(config)])
    (checkpoint,) = tmp.rglob("*.ckpt")
    results = tmp / "results.json"
    main(["test", "--config", str(config), "--ckpt_path", str(checkpoint), "--results", str(results)])
    return config, checkpoint, results


def test_fit_test_export_load(trained, tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    titles, suptitle = [], Figure.suptitle
    monkeypatch.setattr(Figure, "suptitle", lambda fig, text: titles.append(text) or suptitle(fig, text))
    config, checkpoint, results = trained
    measured = json.loads(results.read_text())
    assert measured["dataset"].startswith("text in zoo-cli")  # the tiny files are not PTB: no card claims so
    assert set(measured["metrics"]) == {"test/nll", "test/ppl"}
    assert main(["export", str(checkpoint), str(tmp_path / "out"), "--results", str(results)]) == 0
    assert "wrote" in capsys.readouterr().out
    folder = tmp_path / "out"
    names = ["README.md", "config.json", "model.safetensors", "results.json", "training_config.yaml"]
    assert sorted(p.name for p in folder.iterdir()) == sorted([*names, "vocab.json", "learning_curve.png"])
    assert (folder / "learning_curve.png").read_bytes().startswith(b"\x89PNG")  # from the run's metrics.csv
    assert titles == ["out"]  # the curve is titled with the folder's name, the tag it is released under
    task = LikelihoodTask.load_from_checkpoint(checkpoint)
    model = zoo.from_pretrained(folder)
    assert model.config == task.model.config
    vocab = data_module(yaml.safe_load(config.read_text())).vocab  # the training data's, from its files
    assert model.vocab == vocab and task.model.vocab == vocab
    sentence = " ".join(vocab.tokens[2:7])
    assert model.vocab.encode(sentence, add_eos=True) == vocab.encode(sentence, add_eos=True)
    batch = example_batch(model)
    assert torch.equal(scores(model, batch), scores(task.model, batch))
    card = ModelCard.load(folder / "README.md")
    value = card.data.to_dict()["model-index"][0]["results"][0]["metrics"][0]["value"]
    assert value in measured["metrics"].values()
    assert "zoo fit --config training_config.yaml" in card.text
    assert "](learning_curve.png)" in card.text
    exported = (folder / "training_config.yaml").read_text()
    assert "class_path: zoo.models.CategoricalHMM" in exported
    assert "default_root_dir" in config.read_text() and "default_root_dir" not in exported  # no machine path
    model.save_pretrained(folder)  # the same model: its curve, results and training config stay
    assert (folder / "learning_curve.png").is_file() and (folder / "results.json").is_file()
    model.save_pretrained(folder, overwrite=True)  # a save without a curve removes it, and the card's image
    assert not (folder / "learning_curve.png").exists()
    assert "learning_curve.png" not in (folder / "README.md").read_text()
    with pytest.raises(ValueError, match="learning_curve must be a PNG image"):
        model.save_pretrained(folder, learning_curve=folder / "config.json")


def test_export_in_shards(trained, tmp_path):
    _, checkpoint, _ = trained
    assert main(["export", str(checkpoint), str(tmp_path / "out"), "--max-shard-size", "1KB"]) == 0
    folder = tmp_path / "out"
    assert len(list(folder.glob("model-*-of-*.safetensors"))) > 1
    assert not (folder / "model.safetensors").exists()
    model, trained_model = zoo.from_pretrained(folder), LikelihoodTask.load_from_checkpoint(checkpoint).model
    batch = example_batch(model)
    assert torch.equal(scores(model, batch), scores(trained_model, batch))


def test_fit_fine_tunes_from_an_exported_folder(trained, tmp_path, capsys):
    config, checkpoint, _ = trained
    main(["export", str(checkpoint), str(tmp_path / "out")])
    args = ["fit", "--config", str(config), "--trainer.fast_dev_run", "true"]
    assert main([*args, "--model.init_args.init_from", str(tmp_path / "out")]) == 0  # exact architecture
    capsys.readouterr()
    assert main([*args, "--model.init_args.init_from", str(tmp_path / "out"),
                 "--model.init_args.model.init_args.num_states", "7"]) == 2  # fmt: skip
    assert re.search(r"zoo: error: init_from=.*shape .*'num_states': \(6, 7\)", capsys.readouterr().err)


def test_fine_tuning_keeps_the_vocabulary_of_the_initial_weights(trained, tmp_path):
    config, checkpoint, _ = trained
    folder = tmp_path / "out"
    main(["export", str(checkpoint), str(folder)])
    vocab = zoo.from_pretrained(folder).vocab
    shuffled = Vocabulary([*vocab.tokens[:2], *reversed(vocab.tokens[2:])])  # same words, other ids
    save_vocab(folder, shuffled)
    args = ["fit", "--config", str(config), "--trainer.fast_dev_run", "true"]
    # by default the data takes init_from's vocabulary: its ids keep meaning the words they were trained on
    main([*args, "--model.init_args.init_from", str(folder), "--trainer.callbacks+=zoo_testlib.RecordVocab"])
    assert RecordVocab.seen == [shuffled, shuffled]  # the data's and the model's
    main([*args, "--model.init_args.init_from", str(checkpoint)])  # it recorded the data's vocabulary
    task = LikelihoodTask(zoo.from_pretrained(folder).spec(), init_from=str(folder))
    assert task.model.vocab == shuffled  # fine-tuning keeps the initial weights' vocabulary


def test_weights_of_another_vocabulary_are_one_line(trained, tmp_path, capsys):
    """Another vocabulary named on purpose (vocab_from: same size, other ids) for the weights of init_from
    or of the --ckpt_path resumed: one line, as the other configuration errors (they were tracebacks)."""
    config, checkpoint, _ = trained
    folder = tmp_path / "out"
    main(["export", str(checkpoint), str(folder)])
    vocab = zoo.from_pretrained(folder).vocab
    shuffled = Vocabulary([*vocab.tokens[:2], *reversed(vocab.tokens[2:])])
    save_vocab(folder, shuffled)
    run = ["fit", "--config", str(config), "--trainer.logger=false"]
    run += ["--trainer.default_root_dir", str(tmp_path / "runs")]
    for weights, other, what in (
        (["--model.init_args.init_from", str(folder)], checkpoint, "the initial weights' (init_from)"),
        (["--ckpt_path", str(checkpoint), "--trainer.max_epochs", "2"], folder, "the checkpoint's"),
    ):
        capsys.readouterr()
        assert main([*run, *weights, "--data.init_args.vocab_from", str(other)]) == 2
        err = capsys.readouterr().err
        (line,) = [x for x in err.splitlines() if x.startswith("zoo: error: ")]
        given, data = (shuffled, vocab) if other == checkpoint else (vocab, shuffled)
        assert line.startswith(
            f"zoo: error: {what} vocabulary differs from the data's (id 2 is {given.tokens[2]!r} there but "
            f"{data.tokens[2]!r} in the data)"
        )
        assert "Traceback" not in err


def test_export_replaces_no_file_it_would_lose_without_overwrite(trained, tmp_path, capsys):
    _, checkpoint, results = trained
    folder = tmp_path / "out"
    assert main(["export", str(checkpoint), str(folder), "--results", str(results)]) == 0
    assert main(["export", str(checkpoint), str(folder)]) == 0  # the same model again: its results stay
    assert json.loads((folder / "results.json").read_text()) == json.loads(results.read_text())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("# my notes\n")
    capsys.readouterr()
    assert main(["export", str(checkpoint), str(mine)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo export: error: ") and "README.md" in err and "--overwrite" in err
    assert "\n" not in err and sorted(p.name for p in mine.iterdir()) == ["README.md"]
    assert main(["export", str(checkpoint), str(mine), "--overwrite"]) == 0
    assert zoo.from_pretrained(mine).config == zoo.from_pretrained(folder).config


def test_the_export_of_a_resumed_run_tests_and_fine_tunes_its_own_weights(trained, tmp_path):
    """A resumed run's config.yaml names the checkpoint it resumed (ckpt_path) and, as the data's
    vocab_from, that checkpoint's path here (zoo fit sets it): the card's zoo test restored the old
    checkpoint (wrong metrics), zoo fit resumed it, and elsewhere both failed (audit)."""
    config, _, _ = trained
    quiet = ["--config", str(config), "--trainer.logger=false"]
    run = ["fit", *quiet, "--trainer.default_root_dir", str(tmp_path / "run")]
    assert main([*run, "--trainer.max_steps", "1"]) == 0
    (first,) = (tmp_path / "run").rglob("*.ckpt")
    assert main([*run, "--trainer.max_steps", "2", "--ckpt_path", str(first)]) == 0
    (resumed,) = (tmp_path / "run").rglob("*step=2.ckpt")
    measured = tmp_path / "measured.json"
    test = ["test", *quiet, "--ckpt_path", str(resumed), "--results", str(measured)]
    assert main([*test, "--trainer.default_root_dir", str(tmp_path / "t0")]) == 0
    folder = tmp_path / "out"
    assert main(["export", str(resumed), str(folder)]) == 0
    exported = yaml.safe_load((folder / "training_config.yaml").read_text())
    assert exported["ckpt_path"] is None and exported["data"]["init_args"]["vocab_from"] is None
    assert exported["trainer"]["max_steps"] == 2  # the rest of the recipe stays
    shutil.rmtree(tmp_path / "run")  # another machine: the run's folder is not there
    card = ["--config", str(folder / "training_config.yaml"), "--model.init_args.init_from", str(folder)]
    results = tmp_path / "card.json"
    evaluate = ["test", *card, "--results", str(results), "--trainer.default_root_dir", str(tmp_path / "t1")]
    assert main(evaluate) == 0
    assert json.loads(results.read_text())["metrics"] == json.loads(measured.read_text())["metrics"]
    tuned = ["fit", *card, "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path / "ft")]
    assert main(tuned) == 0
    (checkpoint,) = (tmp_path / "ft").rglob("*.ckpt")
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 1  # from the folder's weights, step 0


def test_an_exported_training_config_names_no_state_of_the_training_machine(tmp_path):
    """``portable``: the run folder goes, a resumed checkpoint and a local vocab_from become null (a
    value of several lines too); a tag or Hub repo as vocab_from and everything else stay as written."""
    local = tmp_path / "a long folder name with spaces, which YAML folds " / "epoch=0-step=3.ckpt"
    run = {
        "trainer": {"max_steps": 5, "default_root_dir": str(tmp_path / "runs")},
        "model": {"init_args": {"init_from": "hmm_categorical_n512_d64.ptb_exact"}},
        "data": {"class_path": "zoo.data.PTBDataModule", "init_args": {"vocab_from": str(local), "seed": 0}},
        "ckpt_path": str(local),
        "weights_only": None,
    }
    text = yaml.safe_dump(run, sort_keys=False, width=40)
    assert len(text.splitlines()) > len(yaml.safe_dump(run, sort_keys=False, width=1000).splitlines())
    del run["trainer"]["default_root_dir"]
    run["data"]["init_args"]["vocab_from"] = run["ckpt_path"] = None
    assert yaml.safe_load(portable(text)) == run
    for source in ("hmm_categorical_n512_d64.ptb_exact", "org/name@v1"):
        kept = f"data:\n  init_args:\n    vocab_from: {source}\nckpt_path: null\n"
        assert portable(kept) == kept


def write_other_text(directory: Path) -> Path:
    """ptb.{train,valid,test}.txt of 5 words none of which the trained fixture's data has."""
    directory.mkdir()
    for split in ("train", "valid", "test"):
        (directory / f"ptb.{split}.txt").write_text("fox owl fox\nelk yak gnu owl\ngnu fox\n" * 4)
    return directory


def test_a_checkpoint_fine_tuned_on_other_text_tests_validates_and_resumes_on_it(trained, tmp_path, capsys):
    """--ckpt_path gives the data the checkpoint's vocabulary, as init_from does (the recipe's
    vocab_size is not the data's, and the checkpoint's arguments win)."""
    config, checkpoint, _ = trained
    data = ["--data.init_args.data_dir", str(write_other_text(tmp_path / "text"))]
    command = ["--config", str(config), *data, "--trainer.limit_val_batches", "1", "--trainer.logger=false"]
    fit = ["fit", *command, "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path / "runs")]
    assert main([*fit, "--model.init_args.init_from", str(checkpoint)]) == 0
    (tuned,) = (tmp_path / "runs").rglob("*.ckpt")
    results = tmp_path / "results.json"
    assert main(["test", *command, "--ckpt_path", str(tuned), "--results", str(results)]) == 0
    assert set(json.loads(results.read_text())["metrics"]) == {"test/nll", "test/ppl"}
    assert main(["validate", *command, "--ckpt_path", str(tuned)]) == 0
    assert main([*fit, "--ckpt_path", str(tuned), "--trainer.max_steps", "2"]) == 0  # resumed
    # a checkpoint that records no vocabulary: the one line says how to give the data one
    saved = torch.load(tuned, weights_only=True)
    del saved["vocab"]
    torch.save(saved, tmp_path / "no-vocab.ckpt")
    capsys.readouterr()
    assert main(["test", *command, "--ckpt_path", str(tmp_path / "no-vocab.ckpt")]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("zoo: error: ")]
    assert "no-vocab.ckpt have vocab_size" in line and "records no vocabulary" in line
    assert "--data.init_args.vocab_from" in line


def test_a_misspelled_model_argument_is_one_line_naming_it(trained, capsys):
    config, _, _ = trained
    for option in (
        ["--model.init_args.model.init_args.num_state", "10"],  # the recipe's class_path and args stay
        ["--model.init_args.model.init_args.num_states", "7", "--model.init_args.model.init_args.dropuot=0"],
        ["--model.init_args.model", '{"architecture": "hmm_categorical_n512_d64", "num_state": 3}'],
    ):
        assert main(["fit", "--config", str(config), *option]) == 2
        err = capsys.readouterr().err
        (line,) = [x for x in err.splitlines() if x.strip() and not x.startswith("Seed set to")]
        misspelled = "dropuot" if "dropuot" in " ".join(option) else "num_state"
        meant = {"dropuot": "dropout", "num_state": "num_states"}[misspelled]
        assert line.startswith("zoo: error: model.init_args.model (CategoricalHMM) takes no argument ")
        assert f"{misspelled!r} (did you mean {meant!r}?)" in line


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["--data.init_args.batchsize", "3"],
         "zoo: error: data (PTBDataModule) takes no argument 'batchsize' (did you mean 'batch_size'?); its "
         "arguments: data_dir, batch_tokens, batch_size,"),
        (["--model.init_args.lr_factr", "0.5"],
         "zoo: error: model (LikelihoodTask) takes no argument 'lr_factr' (did you mean 'lr_factor'?)"),
        (["--model.init_args.num_states", "7"],
         "zoo: error: model (LikelihoodTask) takes no argument 'num_states' (a model's own argument is "
         "--model.init_args.model.init_args.num_states); its arguments: model, lr,"),
        (["--trainer.max_stepz", "3", "--foo"],
         "zoo: error: unrecognized arguments: --trainer.max_stepz 3 --foo (--trainer.max_stepz: did you mean "
         "--trainer.max_steps?); all options: zoo SUBCOMMAND --help"),
    ],
)  # fmt: skip
def test_a_misspelled_task_data_or_trainer_option_is_one_line(trained, capsys, option, expected):
    """They were jsonargparse's whole usage (50 lines) and a nested union error."""
    config, _, _ = trained
    assert main(["fit", "--config", str(config), *option]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.strip() and not x.startswith("Seed set to")]
    assert line.startswith(expected), line


def test_a_value_of_the_wrong_type_keeps_jsonargparses_message(trained, capsys):
    config, _, _ = trained
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(config), "--data.init_args.batch_size", "x"])
    err = capsys.readouterr().err
    assert "usage:" in err and "Expected a <class 'int'>" in err and "Given value: x" in err


MODEL = "--model.init_args.model.init_args"


def test_null_on_the_command_line_sets_a_model_argument_to_none(tmp_path, capsys):
    """``--model.init_args.model.init_args.k1 null`` reached the model as the string "None" (jsonargparse
    parses an argument of a class nested in another from its value's text), and --print_config then
    showed ``model: {k1: None}`` for the recipe's model section (audit)."""
    from zoo.cli import zoo_cli

    path = recipe(tmp_path, write_ptb(tmp_path), "randomized")
    to_exact = [f"{MODEL}.{name}" for name in ("k1", "k2=null", "backend")]
    cli = zoo_cli(["--config", str(path), to_exact[0], "null", to_exact[1], to_exact[2], "exact"], run=False)
    model = cli.model.model
    assert (model.backend, model.k1, model.k2, model.num_states) == ("exact", None, None, 6)
    recipes = Path(__file__).resolve().parents[2] / "recipes"
    for name, argument, kept in (
        ("vae/mscoco-full-100.yaml", "pretrained_encoder", "encoder_dim"),
        ("vae/ptb-short-exact-small.yaml", "decoder_vocab", "num_states"),
        ("hmm/jsb-low-rank.yaml", "k1", "rank"),
    ):
        with pytest.raises(SystemExit):
            main(["fit", "--config", str(recipes / name), f"{MODEL}.{argument}=null", "--print_config"])
        spec = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["model"]
        recipe_spec = yaml.safe_load((recipes / name).read_text())["model"]["init_args"]["model"]
        assert spec["class_path"] == recipe_spec["class_path"]
        assert spec["init_args"][argument] is None
        assert spec["init_args"][kept] == recipe_spec["init_args"][kept]


def test_a_value_a_model_refuses_is_one_line(trained, capsys):
    """A value the model's constructor refuses was 2-3 chained jsonargparse tracebacks (126 lines) ending
    in a dump of the config, the model's own message in the middle (audit)."""
    config, _, _ = trained
    for option, message in (
        ("backend=fast", "unknown backend 'fast'; expected one of"),
        ("num_states=0", "num_states must be an int >= 1, got 0"),
    ):
        assert main(["fit", "--config", str(config), f"--model.init_args.model.init_args.{option}"]) == 2
        err = capsys.readouterr().err
        (line,) = [x for x in err.splitlines() if x.strip() and not x.startswith("Seed set to")]
        assert line.startswith(f"zoo: error: {message}"), line


def test_command_errors(trained, tmp_path, capsys):
    config, checkpoint, _ = trained
    bogus = tmp_path / "bogus.ckpt"
    bogus.write_bytes(b"not a checkpoint")
    assert main(["export", str(bogus), str(tmp_path / "x")]) == 2
    assert "is not a readable Lightning checkpoint" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing.ckpt"), str(tmp_path / "x")]) == 2
    assert "no checkpoint file" in capsys.readouterr().err
    folder = zoo.create_model("pcfg_nt10_pt20_d64").save_pretrained(tmp_path / "folder")
    assert main(["export", str(folder), str(tmp_path / "x")]) == 2  # it said "no checkpoint file" (audit)
    assert "is a pretrained-model folder already, not a zoo fit checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    for subcommand in ("fit", "predict"):  # one line (it was a traceback)
        capsys.readouterr()
        assert main([subcommand, "--config", str(config), "--results", str(tmp_path / "r.json")]) == 2
        expected = f"zoo: error: --results is written by zoo validate and zoo test, not by zoo {subcommand}"
        assert expected in capsys.readouterr().err


def test_models_command(capsys):
    assert main(["models", "pcfg_nt10_*"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert out == [
        "pcfg_nt10_pt20_d64\tPCFG\t[exact, low-rank, rank-space, randomized]\tsmall PTB PCFG for a CPU"
    ]
    assert main(["models", "--pretrained"]) == 0
    listed = [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()]
    assert listed == [[name, "bundled"] for name in sorted(bundled_folders())]  # shipped in zoo/weights/
    # a pattern that matches nothing printed nothing, rc 0; an unknown option showed zoo's usage (audit)
    assert main(["models", "nope_*"]) == 2
    error = "zoo models: error: no architecture matches 'nope_*' (zoo models lists them)"
    assert capsys.readouterr().err == error + "\n"
    with pytest.raises(SystemExit, match="2"):
        main(["models", "--bogus"])
    err = capsys.readouterr().err
    assert err.startswith("usage: zoo models ") and "error: unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("command", [["models"], ["models", "--pretrained"], ["capabilities"]])
def test_a_listing_whose_reader_left_stops_quietly(command):
    """``zoo models | head -1``: the closed pipe is no error message (it was "zoo models: error: [Errno
    32] Broken pipe"); the status is a shell tool's killed by SIGPIPE."""
    process = subprocess.Popen(
        [sys.executable, "-m", "zoo.cli", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # before the command prints: it starts in about a second
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
    assert process.stderr.read() == b""
