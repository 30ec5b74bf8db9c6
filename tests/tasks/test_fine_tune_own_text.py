"""Fine-tuning a bundled word model on your own text, the command users run: the data takes the
initial weights' vocabulary by default, so their ids keep meaning the same words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from zoo.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "zoo"))
from test_vocab_from import TAG, write_text  # noqa: E402
from zoo_testlib import RecordVocab  # noqa: E402

import zoo  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_a_bundled_rank_space_hmm_fine_tunes_on_other_text(tmp_path, caplog):
    args = [
        "fit", "--config", str(REPO / "recipes/hmm/ptb-rank-space-small.yaml"),
        "--data.init_args.data_dir", str(write_text(tmp_path)), "--model.init_args.init_from", TAG,
        "--trainer.fast_dev_run", "true", "--trainer.callbacks+=zoo_testlib.RecordVocab",
        "--trainer.default_root_dir", str(tmp_path),
    ]  # fmt: skip
    with caplog.at_level("INFO"):
        main(args)
    bundled = zoo.from_pretrained(TAG).vocab
    assert RecordVocab.seen == [bundled, bundled]
    assert any(f"vocabulary of {TAG!r} (10,000 tokens), train split: 20.00% of 15" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_a_bad_init_from_is_one_line(tmp_path, capsys):
    recipe = str(REPO / "recipes/hmm/ptb-rank-space-small.yaml")
    for source, message in (
        (TAG.replace("space", "spce"), f"did you mean {TAG}"),
        (str(tmp_path / "gone.ckpt"), "no such checkpoint file"),
        # weights that exist but do not fit the recipe's model: another family, another size and backend
        ("pcfg_nt10_pt20_d64.ptb_exact", "holds a PCFG, but the task's model is a CategoricalHMM"),
        (
            "hmm_categorical_n1024_d64.ptb_low_rank",
            "do not fit CategoricalHMM: missing keys ['transition.rank_emb']",
        ),
    ):
        assert main(["fit", "--config", recipe, "--model.init_args.init_from", source]) == 2
        err = capsys.readouterr().err
        (line,) = [line for line in err.splitlines() if line.strip() and not line.startswith("Seed set to")]
        assert line.startswith(f"zoo: error: init_from={source!r}: ") and message in line


def test_the_run_keeps_absolute_data_paths_and_its_best_checkpoint_as_best_ckpt(tmp_path, monkeypatch):
    """A recipe's config.yaml (a checkpoint's training_config.yaml) works from any directory, and the
    best checkpoint has the name the README uses."""
    write_text(tmp_path)
    monkeypatch.chdir(tmp_path)
    recipe = str(REPO / "recipes/hmm/ptb-rank-space-small.yaml")
    main([
        "fit", "--config", recipe, "--data.init_args.data_dir", ".", "--model.init_args.init_from", TAG,
        "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    run = tmp_path / "lightning_logs" / "version_0"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt"]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["data"]["init_args"]["data_dir"] == str(tmp_path)
    assert saved["data"]["init_args"]["vocab_from"] == TAG


def test_lightning_noise_is_left_out(tmp_path, capfd, caplog, recwarn):
    caplog.set_level("INFO")
    main([
        "fit", "--config", str(REPO / "recipes/hmm/ptb-rank-space-small.yaml"),
        "--data.init_args.data_dir", str(write_text(tmp_path)), "--model.init_args.init_from", TAG,
        "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path),
        "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    out, err = capfd.readouterr()
    logged = [r.getMessage() for r in caplog.records]
    shown = "\n".join([out, err, *(str(w.message) for w in recwarn), *logged])
    assert "Tip:" not in shown and "tensorboardX" not in shown and "LeafSpec" not in shown
    assert "TPU available" not in shown and "GPU available: False" not in shown
    assert "init_from 'hmm_categorical_n4096_d64.ptb_rank_space'" in shown  # what the user needs stays


def test_a_datasets_source_keeps_absolute_data_files(tmp_path, monkeypatch):
    """An ``hf_dataset``'s relative ``data_files`` become absolute in the run's config.yaml too."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "text").mkdir()
    folder = write_text(tmp_path / "text")
    monkeypatch.chdir(tmp_path)
    files = {split: f"text/ptb.{split}.txt" for split in ("train", "valid", "test")}
    source = {"path": "text", "data_files": {"train": files["train"], "validation": files["valid"],
                                             "test": [files["test"]]}}  # fmt: skip
    main([
        "fit", "--config", str(REPO / "recipes/hmm/ptb-rank-space-small.yaml"),
        "--data.init_args.hf_dataset", json.dumps(source), "--model.init_args.init_from", TAG,
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false",
    ])  # fmt: skip
    saved = yaml.safe_load((tmp_path / "lightning_logs" / "version_0" / "config.yaml").read_text())
    assert saved["data"]["init_args"]["hf_dataset"]["data_files"] == {
        "train": str(folder / "ptb.train.txt"),
        "validation": str(folder / "ptb.valid.txt"),
        "test": [str(folder / "ptb.test.txt")],
    }
