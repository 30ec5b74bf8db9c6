"""HSMMs end to end: `zoo fit | validate | predict` with SegmentationTask on the smartwatch recordings
(seglearn), CrossTask files and a .npy folder written by the tests; the input projection is fitted at
`fit`, stored in the checkpoint and reused; segmentations written; clear errors."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from cli_testlib import cpu_trainer, logged, predict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from test_segment_data import write_crosstask, write_npy_folder  # noqa: E402

import zoo  # noqa: E402
from zoo.cli import main  # noqa: E402
from zoo.data import SmartwatchDataModule  # noqa: E402
from zoo.hub.bundled import bundled_folders  # noqa: E402
from zoo.hub.pretrained import CheckpointError  # noqa: E402
from zoo.tasks import SegmentationTask  # noqa: E402

SMARTWATCH = {"class_path": "zoo.data.SmartwatchDataModule", "init_args": {"window": 100, "batch_size": 4}}
BACKENDS = {
    "exact": {"backend": "exact", "self_transitions": False},
    "low-rank": {"backend": "low-rank", "rank": 2},
    "rank-space": {"backend": "rank-space", "rank": 3},
    "randomized": {"backend": "randomized", "k1": 2, "k2": 1},
}


def recipe(
    tmp: Path, data: dict, backend: str = "exact", input_dim: int = 12, feature_dim: int = 6, **task
) -> Path:
    init = {"num_states": 4, "feature_dim": feature_dim, "input_dim": input_dim, "max_duration": 6,
            "embedding_dim": 8, "hidden_dim": 8, **BACKENDS[backend]}  # fmt: skip
    config = {
        "seed_everything": 0,
        "model": {
            "class_path": "zoo.tasks.SegmentationTask",
            "init_args": {
                "model": {"class_path": "zoo.models.GaussianHSMM", "init_args": init},
                "lr": 0.01,
                **task,
            },
        },
        "data": data,
        "trainer": cpu_trainer(tmp),
    }
    path = tmp / f"recipe-{backend}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_fit_fast_dev_run_every_backend(tmp_path, backend):
    path = recipe(tmp_path, SMARTWATCH, backend)
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "1"]) == 0


def test_fit_validate_predict_reload_on_smartwatch(tmp_path):
    path = recipe(tmp_path, SMARTWATCH, "exact", boundary_tolerance=3)
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (ckpt,) = tmp_path.rglob("*.ckpt")
    assert main(["validate", "--config", str(path), "--ckpt_path", str(ckpt)]) == 0
    accuracy, f1 = logged(tmp_path, "val/frame_accuracy"), logged(tmp_path, "val/boundary_f1")
    nll, per_sequence = logged(tmp_path, "val/nll"), logged(tmp_path, "val/nll_sequence")
    assert accuracy and all(0 < a <= 1 for a in accuracy) and f1 and all(0 <= v <= 1 for v in f1)
    assert nll and per_sequence and per_sequence[-1] > 50 * nll[-1]  # sequences of 140..170 frames

    task = SegmentationTask.load_from_checkpoint(ckpt).eval()
    assert task.model.input_projection.fitted  # fitted on the training split at `fit`, kept in the checkpoint
    dm = SmartwatchDataModule(window=100)
    mean, matrix = dm.fit_feature_transform(6)
    torch.testing.assert_close(task.model.input_projection.mean, mean)
    torch.testing.assert_close(task.model.input_projection.matrix, matrix)
    batch = next(iter(dm.test_dataloader()))
    again = SegmentationTask.load_from_checkpoint(ckpt).eval()
    with torch.no_grad():
        torch.testing.assert_close(task(batch), again(batch), rtol=0, atol=0)

    out = tmp_path / "pred" / "segments.jsonl"
    assert predict(path, ckpt, "zoo.tasks.SegmentationWriter", out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    test = dm.datasets["test"]
    assert [r["name"] for r in rows] == test.names and [r["frames"] for r in rows] == test.lengths.tolist()
    for row in rows:
        segments = row["segments"]
        assert segments[0][0] == 0 and segments[-1][1] == row["frames"]
        assert all(a[1] == b[0] for a, b in zip(segments, segments[1:]))
        assert all(1 <= e - s <= 6 and 0 <= z < 4 for s, e, z in segments) and row["log_likelihood"] < 0


def test_crosstask_with_pca_end_to_end(tmp_path):
    files = write_crosstask(tmp_path)
    data = {
        "class_path": "zoo.data.CrossTaskDataModule",
        "init_args": {**files, "valid_fraction": 0.2, "batch_size": 4},
    }
    path = recipe(tmp_path, data, "rank-space", input_dim=16, feature_dim=4)
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "2"]) == 0
    (ckpt,) = tmp_path.rglob("*.ckpt")
    task = SegmentationTask.load_from_checkpoint(ckpt)
    assert task.model.input_projection.matrix.shape == (16, 4) and task.model.input_projection.fitted
    assert logged(tmp_path, "val/frame_accuracy") and logged(tmp_path, "val/nll_sequence")
    out = tmp_path / "segments.jsonl"
    assert predict(path, ckpt, "zoo.tasks.SegmentationWriter", out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["name"] for r in rows] == ["t0", "t1"]
    assert all(0 <= z < 3 for r in rows for _, _, z in r["segments"])  # rank components label the segments


def test_fit_fits_a_per_sequence_projection_on_standardized_sequences(tmp_path):
    path = recipe(tmp_path, SMARTWATCH, "exact", feature_dim=12)
    config = yaml.safe_load(path.read_text())
    config["model"]["init_args"]["model"]["init_args"]["standardize_sequences"] = True
    path.write_text(yaml.safe_dump(config))
    assert main(["fit", "--config", str(path), "--trainer.max_steps", "1"]) == 0
    (ckpt,) = tmp_path.rglob("*.ckpt")
    projection = SegmentationTask.load_from_checkpoint(ckpt).model.input_projection
    assert projection.per_sequence and projection.fitted
    mean, matrix = SmartwatchDataModule(window=100).fit_feature_transform(12, per_sequence=True)
    torch.testing.assert_close(projection.mean, mean)
    torch.testing.assert_close(projection.matrix, matrix)
    assert float(mean.abs().max()) < 0.1  # fitted on standardized recordings, not on the raw ones


def test_npy_folder_fast_dev_run_without_projection(tmp_path):
    data = {
        "class_path": "zoo.data.NpyFolderDataModule",
        "init_args": {"data_dir": str(write_npy_folder(tmp_path / "d"))},
    }
    path = recipe(tmp_path, data, "low-rank", input_dim=None, feature_dim=3)
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "1"]) == 0


def test_fine_tuning_on_features_of_another_width_names_the_pretrained_width(tmp_path, capsys):
    """Setting input_dim cannot help when init_from's weights fix it: the error says so (audit), in one
    line (it came under a 17-frame traceback: audit Y)."""
    name = "hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_exact"
    config = bundled_folders()[name] / "training_config.yaml"
    message = (
        f"the data have 3 features per frame but the model expects 12 \\(input_dim\\): the pretrained model "
        f"of init_from='{name}' takes 12-dim features, so give it those, or train from scratch \\(without "
        "init_from\\) with model.init_args.model.init_args.input_dim: 3$"
    )
    folder = str(write_npy_folder(tmp_path))
    data = ["--data", "zoo.data.NpyFolderDataModule", "--data.init_args.data_dir", folder]
    run = ["--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.max_steps", "1"]
    assert main(["fit", "--config", str(config), "--model.init_args.init_from", name, *data, *run]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("zoo: error: ")]
    assert re.search("zoo: error: " + message, line) and "Traceback" not in err


def test_errors(tmp_path, capsys):
    path = recipe(tmp_path, SMARTWATCH, "exact", input_dim=10)
    assert main(["fit", "--config", str(path), "--trainer.fast_dev_run", "1"]) == 2
    expected = "the data have 12 features per frame but the model expects 10 (input_dim)"
    assert expected in capsys.readouterr().err
    hmm = {"class_path": "zoo.models.BernoulliHMM", "init_args": {"num_states": 2}}
    with pytest.raises(TypeError, match="needs a model with segment"):
        SegmentationTask(hmm)
    model = {
        "class_path": "zoo.models.GaussianHSMM",
        "init_args": {"num_states": 2, "feature_dim": 2, "max_duration": 2},
    }
    with pytest.raises(ValueError, match="tolerance must be an int >= 0"):
        SegmentationTask(model, boundary_tolerance=-1)
    with pytest.raises(ValueError, match="matching must be 'corpus' or 'sequence'"):
        SegmentationTask(model, matching="global")


def test_segment_counts_are_the_models_own_cuts():
    """The bundled rank-space HSMM labels segments by rank component, and some consecutive segments share
    one: the segment ratio and boundary F1 counted label changes (40 segments where the model cut 47 on
    the test split: audit). Now the task's metrics are those of the model's own segment starts."""
    from lightning.pytorch import Trainer

    from zoo import from_pretrained
    from zoo.metrics import BoundaryF1, SegmentRatio

    model = from_pretrained("hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_rank_space").eval()
    data = SmartwatchDataModule(window=100, batch_size=4)
    task = SegmentationTask(model, boundary_tolerance=1)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    (logged,) = trainer.test(task, datamodule=data, verbose=False)
    data.setup("test")
    f1, ratio, label_changes = BoundaryF1(1), SegmentRatio(), SegmentRatio()
    shared = 0
    for batch in data.test_dataloader():
        segmentation, frames = model.segment(batch)
        f1.update(frames, batch["labels"], batch["lengths"], starts=segmentation)
        ratio.update(frames, batch["labels"], batch["lengths"], starts=segmentation)
        label_changes.update(frames, batch["labels"], batch["lengths"])
        for b, n in enumerate(batch["lengths"].tolist()):
            labels = segmentation[b, :n][segmentation[b, :n] >= 0]
            shared += int((labels[1:] == labels[:-1]).sum())
    assert shared > 0  # the case in point: consecutive segments of one label
    assert logged["test/segment_ratio"] == pytest.approx(float(ratio.compute()))
    assert logged["test/boundary_f1"] == pytest.approx(float(f1.compute()))
    assert float(ratio.compute()) > float(label_changes.compute())


def test_segment_metrics_do_not_depend_on_the_batching(tmp_path):
    """A test split with an unlabelled sequence (no NAME.labels.npy, documented as allowed): boundary F1
    and the segment ratio are the same whatever sequences share a batch (the unlabelled one was scored
    when it shared a batch with a labelled one: 0.46 against 0.55 F1 in the audit's run)."""
    from lightning.pytorch import Trainer

    from zoo.data import NpyFolderDataModule
    from zoo.models import GaussianHSMM

    root = write_npy_folder(tmp_path / "data")
    torch.manual_seed(0)
    model = GaussianHSMM(num_states=4, feature_dim=3, max_duration=4, embedding_dim=8, hidden_dim=8)
    logged = {}
    for batch_size in (1, 2):
        task = SegmentationTask(model, boundary_tolerance=1)
        data = NpyFolderDataModule(str(root), batch_size=batch_size)
        quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
        trainer = Trainer(accelerator="cpu", **quiet)
        (logged[batch_size],) = trainer.test(task, datamodule=data, verbose=False)
    for name in ("test/boundary_f1", "test/segment_ratio", "test/frame_accuracy"):
        assert logged[1][name] == pytest.approx(logged[2][name]), name


def test_init_from_refuses_a_model_that_reads_the_weights_otherwise(tmp_path):
    """The bundled HSMMs' projections were fitted on per-recording standardized frames; a fine-tuning model
    with standardize_sequences false (the default) loaded them silently and applied them to raw frames:
    val/nll 17,989 nats a frame against 20.2 (audit Y). A folder and a task checkpoint are checked alike."""
    name = "hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_exact"
    source = zoo.from_pretrained(name)
    config = dict(source.config)
    assert config["standardize_sequences"] is True
    config["standardize_sequences"] = False
    spec = {"class_path": "zoo.models.GaussianHSMM", "init_args": config}
    message = r"was trained with standardize_sequences=True \(the model has False\)"
    with pytest.raises(CheckpointError, match=message):
        SegmentationTask(spec, init_from=name)
    checkpoint = tmp_path / "run.ckpt"
    model_spec = {"class_path": "zoo.models.hsmm.model.GaussianHSMM", "init_args": dict(source.config)}
    torch.save({"state_dict": {f"model.{k}": v for k, v in source.state_dict().items()},
                "hyper_parameters": {"model": model_spec}}, checkpoint)  # fmt: skip
    with pytest.raises(CheckpointError, match=message):
        SegmentationTask(spec, init_from=str(checkpoint))
    same = SegmentationTask({"class_path": "zoo.models.GaussianHSMM", "init_args": dict(source.config)},
                            init_from=str(checkpoint))  # fmt: skip
    assert torch.equal(same.model.input_projection.mean, source.input_projection.mean)
