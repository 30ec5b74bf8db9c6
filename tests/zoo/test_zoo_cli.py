"""zoo fit -> zoo test --results -> zoo export -> from_pretrained, and zoo fit fine-tuning from the
exported folder; the commands' errors. Tiny PTB-format files, CPU, one epoch."""

from __future__ import annotations

import json
import re
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
    model.save_pretrained(folder)  # a save without a curve removes the old one, and the card's image
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
    message = (
        f"initial weights' .init_from. vocabulary differs from the data's .id 2 is {shuffled.tokens[2]!r}"
    )
    other = ["--data.init_args.vocab_from", str(checkpoint)]  # another vocabulary named on purpose: refused
    with pytest.raises(ValueError, match=message):
        main([*args, "--model.init_args.init_from", str(folder), *other])
    main([*args, "--model.init_args.init_from", str(checkpoint)])  # it recorded the data's vocabulary
    task = LikelihoodTask(zoo.from_pretrained(folder).spec(), init_from=str(folder))
    assert task.model.vocab == shuffled  # fine-tuning keeps the initial weights' vocabulary


def test_command_errors(trained, tmp_path, capsys):
    config, checkpoint, _ = trained
    bogus = tmp_path / "bogus.ckpt"
    bogus.write_bytes(b"not a checkpoint")
    assert main(["export", str(bogus), str(tmp_path / "x")]) == 2
    assert "is not a readable Lightning checkpoint" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing.ckpt"), str(tmp_path / "x")]) == 2
    assert "no checkpoint file" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="--results is written by zoo validate and zoo test, not by zoo fit"):
        main(["fit", "--config", str(config), "--results", str(tmp_path / "r.json")])


def test_models_command(capsys):
    assert main(["models", "pcfg_nt10_*"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert out == [
        "pcfg_nt10_pt20_d64\tPCFG\t[exact, low-rank, rank-space, randomized]\tsmall PTB PCFG for a CPU"
    ]
    assert main(["models", "--pretrained"]) == 0
    listed = [line.split("\t")[:2] for line in capsys.readouterr().out.splitlines()]
    assert listed == [[name, "bundled"] for name in sorted(bundled_folders())]  # shipped in zoo/weights/
