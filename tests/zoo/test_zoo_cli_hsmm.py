"""The zoo commands with a SegmentationTask: zoo fit (HSMM on the smartwatch recordings) -> zoo test
--results -> zoo export -> from_pretrained with the fitted input projection, and fine-tuning from the
exported folder (the loaded projection is kept, not refitted)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

import zoo
from zoo.cli import main
from zoo.data import SmartwatchDataModule
from zoo.tasks import SegmentationTask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
from test_hsmm_cli import SMARTWATCH, recipe  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(recipe, checkpoint, results JSON) of a tiny low-rank HSMM with a 12 -> 6 PCA, trained by zoo fit."""
    tmp = tmp_path_factory.mktemp("zoo-cli-hsmm")
    config = recipe(tmp, SMARTWATCH, "low-rank", boundary_tolerance=3)
    assert main(["fit", "--config", str(config), "--trainer.max_steps", "2"]) == 0
    (checkpoint,) = tmp.rglob("*.ckpt")
    results = tmp / "results.json"
    args = ["test", "--config", str(config), "--ckpt_path", str(checkpoint), "--results", str(results)]
    assert main(args) == 0
    return config, checkpoint, results


def test_fit_test_export_load(trained, tmp_path):
    config, checkpoint, results = trained
    measured = json.loads(results.read_text())
    assert measured["dataset"] == "smartwatch"
    assert set(measured["metrics"]) == {
        "test/nll",
        "test/nll_sequence",
        "test/frame_accuracy",
        "test/boundary_f1",
        "test/segment_ratio",
    }
    folder = tmp_path / "out"
    assert main(["export", str(checkpoint), str(folder), "--results", str(results)]) == 0
    task = SegmentationTask.load_from_checkpoint(checkpoint).eval()
    model = zoo.from_pretrained(folder)
    assert model.config == task.model.config and model.input_projection.fitted
    for name, value in task.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    data = SmartwatchDataModule(window=100)
    data.setup("test")
    batch = next(iter(data.test_dataloader()))  # raw 12-dimensional frames
    with torch.no_grad():
        assert torch.equal(model.log_likelihood(batch), task.model.log_likelihood(batch))
        assert torch.equal(model.segment(batch)[1], task.model.segment(batch)[1])
    card = ModelCard.load(folder / "README.md")
    index = card.data.to_dict()["model-index"][0]
    values = {m["name"]: m["value"] for r in index["results"] for m in r["metrics"]}
    assert values["test frame accuracy under the best one-to-one label map (fraction)"] == pytest.approx(
        measured["metrics"]["test/frame_accuracy"]
    )
    assert "class_path: zoo.tasks.SegmentationTask" in (folder / "training_config.yaml").read_text()
    assert "Raw frames of 12 features are projected to them by the whitened PCA" in card.text


def test_fit_fine_tunes_from_an_exported_folder_keeping_its_projection(trained, tmp_path, capsys):
    config, checkpoint, _ = trained
    main(["export", str(checkpoint), str(tmp_path / "out")])
    exported = zoo.from_pretrained(tmp_path / "out")
    projection = exported.input_projection  # another projection than the data's: it must survive
    projection.set(projection.mean + 1.0, 2.0 * projection.matrix)
    folder = exported.save_pretrained(tmp_path / "changed")
    args = ["fit", "--config", str(config), "--trainer.max_steps", "1", "--trainer.default_root_dir",
            str(tmp_path / "runs"), "--trainer.logger", "false"]  # fmt: skip
    assert main([*args, "--model.init_args.init_from", str(folder)]) == 0
    (tuned,) = (tmp_path / "runs").rglob("*.ckpt")
    task = SegmentationTask.load_from_checkpoint(tuned)
    assert task.hparams.init_from is None
    for name in ("mean", "matrix"):  # loaded with the weights, not refitted from the data
        assert torch.equal(getattr(task.model.input_projection, name), getattr(projection, name))
    assert not torch.equal(task.model.state_emb, exported.state_emb)  # one optimizer step from the export
    capsys.readouterr()
    assert main([*args, "--model.init_args.init_from", str(folder),
                 "--model.init_args.model.init_args.num_states", "5"]) == 2  # fmt: skip
    assert re.search(r"zoo: error: init_from=.*shape .*'num_states': \(4, 5\)", capsys.readouterr().err)
