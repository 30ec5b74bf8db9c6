"""Feature-sequence data for HSMMs: the smartwatch recordings (real data from seglearn), ``.npy`` folders and
CrossTask files written by the tests in the real formats, the collator and the fitted input transform."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.data import (
    CrossTaskDataModule,
    NpyFolderDataModule,
    SmartwatchDataModule,
    collate_features,
    fit_feature_transform,
    load_smartwatch,
    read_step_annotations,
)
from zoo.data.smartwatch import smartwatch_file


def runs(labels: torch.Tensor) -> list[int]:
    return [k for k, _ in itertools.groupby(labels.tolist())]


def test_smartwatch_sequences_concatenate_one_subject_and_side():
    raw = np.load(smartwatch_file(), allow_pickle=True).item()
    sequences = load_smartwatch(window=50)
    assert len(sequences) == 20
    first = sequences[0]  # subject 1, side 0: its recordings in file order
    members = [i for i, (s, d) in enumerate(zip(raw["subject"], raw["side"])) if (s, d) == (1, 0)]
    assert first["name"] == "subject1-side0" and len(members) == 7
    assert runs(first["labels"]) == [int(raw["y"][i]) for i in members]  # 7 known segments, one a recording
    assert sorted(runs(first["labels"])) == list(range(7))
    x = np.asarray(raw["X"][members[0]])
    expected = np.concatenate([x[:50].mean(0), x[:50].std(0)])
    np.testing.assert_allclose(first["features"][0].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert len(first["features"]) == sum(len(raw["X"][i]) // 50 for i in members)


def test_smartwatch_split_by_subject():
    dm = SmartwatchDataModule(window=100)
    dm.setup()
    subjects = {s: {n.split("-")[0] for n in d.names} for s, d in dm.datasets.items()}
    assert [len(dm.datasets[s]) for s in ("train", "valid", "test")] == [14, 2, 4]
    assert not (subjects["train"] & subjects["valid"] or subjects["train"] & subjects["test"])
    assert dm.input_dim == 12 and dm.num_classes == 7
    batch = next(iter(dm.val_dataloader()))
    assert set(batch) == {"features", "lengths", "index", "labels"}
    assert batch["features"].dtype == torch.float32 and batch["labels"].shape == batch["features"].shape[:2]
    with pytest.raises(ValueError, match="window must be a positive int"):
        SmartwatchDataModule(window=0)


def test_collate_pads_features_and_labels():
    items = [
        {"features": torch.ones(3, 2), "labels": torch.tensor([0, 0, 1]), "index": 4},
        {"features": torch.full((1, 2), 2.0), "labels": None, "index": 1},
    ]
    batch = collate_features(items)
    assert batch["lengths"].tolist() == [3, 1] and batch["index"].tolist() == [4, 1]
    assert batch["features"][1].tolist() == [[2.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    assert batch["labels"].tolist() == [[0, 0, 1], [-1, -1, -1]]
    assert "labels" not in collate_features([{**items[1]}])
    with pytest.raises(ValueError, match="one F"):
        collate_features([items[0], {"features": torch.ones(2, 3), "index": 0}])


def test_fit_feature_transform_standardizes_or_whitens():
    rng = np.random.default_rng(0)
    frames = rng.normal(size=(500, 5)) @ rng.normal(size=(5, 5)) + 3.0
    mean, matrix = fit_feature_transform(frames, 5)
    y = (torch.tensor(frames, dtype=torch.float32) - mean) @ matrix
    torch.testing.assert_close(y.mean(0), torch.zeros(5), atol=1e-4, rtol=0)
    torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(5), atol=1e-4, rtol=0)
    mean, matrix = fit_feature_transform(frames, 3)
    y = ((torch.tensor(frames) - mean.double()) @ matrix.double()).numpy()
    np.testing.assert_allclose(np.cov(y.T), np.eye(3), atol=1e-4)  # whitened principal components
    with pytest.raises(ValueError, match="output_dim must be an int in 1..5"):
        fit_feature_transform(frames, 6)
    with pytest.raises(ValueError, match="NaN or inf"):
        fit_feature_transform(np.full((3, 2), np.nan), 2)


def write_npy_folder(root, dims=3, labelled=True):
    rng = np.random.default_rng(1)
    for split, count in (("train", 4), ("valid", 2), ("test", 2)):
        (root / split).mkdir(parents=True)
        for i in range(count):
            n = 6 + 3 * i
            np.save(root / split / f"seq{i}.npy", rng.normal(size=(n, dims)).astype(np.float32))
            if labelled and i != 1:
                np.save(
                    root / split / f"seq{i}.labels.npy", (np.arange(n) >= n // 2).astype(np.int64) + i % 2
                )
    return root


def test_npy_folder_reads_sequences_and_labels(tmp_path):
    dm = NpyFolderDataModule(str(write_npy_folder(tmp_path)), batch_size=8)
    dm.setup()
    train = dm.datasets["train"]
    assert train.names == ["seq0", "seq1", "seq2", "seq3"] and train.lengths.tolist() == [6, 9, 12, 15]
    assert dm.input_dim == 3 and dm.num_classes == 3  # labels up to 1 + 1
    assert train[1]["labels"] is None and train[2]["labels"].tolist()[:7] == [0] * 6 + [1]
    batch = next(iter(dm.train_dataloader()))
    assert (batch["labels"][batch["index"] == 1] == -1).all()
    assert dm.predict_names() == ["seq0", "seq1"]


def test_fit_feature_transform_per_sequence_sees_each_file_standardized(tmp_path):
    """The transform of a per-sequence projection is fitted on every training sequence standardized by
    its own statistics (read whole from its file), so on those frames it is the identity up to the
    rounding of the fit."""
    root = write_npy_folder(tmp_path)
    for i, path in enumerate(sorted((root / "train").glob("seq?.npy"))):
        np.save(path, np.load(path) * (i + 2.0) + 10.0 * i)  # each file its own offset and scale
    dm = NpyFolderDataModule(str(root), batch_size=8)
    mean, matrix = dm.fit_feature_transform(3, per_sequence=True)
    torch.testing.assert_close(mean, torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(matrix, torch.eye(3), atol=1e-4, rtol=0)
    mean, _ = dm.fit_feature_transform(3)
    assert float(mean.abs().max()) > 1.0  # the corpus fit sees the offsets


def test_npy_folder_errors(tmp_path):
    root = write_npy_folder(tmp_path / "a", labelled=False)
    dm = NpyFolderDataModule(str(root))
    dm.setup()
    assert dm.num_classes is None and dm.datasets["train"].labels is None
    with pytest.raises(FileNotFoundError, match=r"missing \['valid', 'test'\]"):
        (tmp_path / "b" / "train").mkdir(parents=True)
        NpyFolderDataModule(str(tmp_path / "b"))
    np.save(root / "train" / "seq0.labels.npy", np.zeros(5, dtype=np.int64))
    with pytest.raises(ValueError, match=r"seq0.labels.npy: expected one integer .* \(6\), got shape \(5,\)"):
        NpyFolderDataModule(str(root)).setup()
    np.save(root / "train" / "seq0.labels.npy", np.zeros(6))
    with pytest.raises(ValueError, match="expected one integer label"):
        NpyFolderDataModule(str(root)).setup()
    np.save(root / "train" / "seq0.labels.npy", np.array([0, 1, -5, 1, -7, 0]))
    message = r"labels.npy: expected labels >= -1 \(-1: unknown\), got -5 at frame 2 \(2 frame\(s\) below"
    with pytest.raises(ValueError, match=message):
        NpyFolderDataModule(str(root)).setup()
    (root / "train" / "seq0.labels.npy").unlink()
    np.save(root / "test" / "seq0.npy", np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="expected a numeric frames x dims array"):
        NpyFolderDataModule(str(root)).setup()
    np.save(root / "test" / "seq0.npy", np.zeros((4, 5)))
    with pytest.raises(ValueError, match="same feature size"):
        NpyFolderDataModule(str(root)).setup()


def test_npy_folder_errors_name_the_files(tmp_path):
    """A file of another feature size, or with NaN / inf, is named (its path gives the split)."""
    root = write_npy_folder(tmp_path, dims=5, labelled=False)
    odd = root / "train" / "seq2.npy"
    np.save(odd, np.zeros((4, 7), dtype=np.float32))
    with pytest.raises(
        ValueError,
        match=re.escape(f"got 5 in 3 ({root / 'train' / 'seq0.npy'}, ")
        + ".*"
        + re.escape(f"and 7 in 1 ({odd})"),
    ):
        NpyFolderDataModule(str(root)).setup()
    rows = np.zeros((4, 5), dtype=np.float32)
    rows[2, 1] = np.nan
    np.save(odd, rows)
    message = re.escape(f"{odd}: features must be finite, got NaN or inf in 1 frame(s) (first at frame 2)")
    dm = NpyFolderDataModule(str(root), batch_size=8)
    with pytest.raises(ValueError, match=message):
        dm.fit_feature_transform(5)  # the frames zoo fit draws first
    with pytest.raises(ValueError, match=message):
        dm.fit_feature_transform(5, per_sequence=True)
    with pytest.raises(ValueError, match=message):
        list(dm.train_dataloader())


def write_crosstask(root, dims=16, missing="v9"):
    """CrossTask's release layout: features/VIDEO.npy (1 frame a second), annotations/TASK_VIDEO.csv,
    videos.csv and videos_val.csv (task,video_id,url)."""
    rng = np.random.default_rng(2)
    (root / "features").mkdir(parents=True)
    (root / "annotations").mkdir()
    train = [("23521", f"v{i}") for i in range(8)] + [("59684", "w0"), ("59684", "w1"), ("23521", missing)]
    test = [("23521", "t0"), ("59684", "t1")]
    for task, video in train + test:
        if video == missing:
            continue
        np.save(root / "features" / f"{video}.npy", rng.normal(size=(12, dims)).astype(np.float32))
        if video != "w1":  # a video without annotations
            steps = "1,2.0,4.5\n3,6,9.0\n" if task == "23521" else "2,0.5,3.0\n"
            (root / "annotations" / f"{task}_{video}.csv").write_text(steps)
    for name, videos in (("videos.csv", train), ("videos_val.csv", test)):
        (root / name).write_text("".join(f"{t},{v},https://www.youtube.com/watch?v={v}\n" for t, v in videos))
    return {
        "features_dir": str(root / "features"),
        "annotations_dir": str(root / "annotations"),
        "train_videos": str(root / "videos.csv"),
        "test_videos": str(root / "videos_val.csv"),
    }


def test_crosstask_reads_features_annotations_and_splits(tmp_path, caplog):
    files = write_crosstask(tmp_path)
    dm = CrossTaskDataModule(**files, valid_fraction=0.2, batch_size=4)
    with caplog.at_level("WARNING"):
        dm.setup()
    assert "1 of 11 videos have no features" in caplog.text and caplog.text.rstrip().endswith("skipped: v9")
    assert "annotated step" not in caplog.text  # no overlap, none past a video's end
    assert [len(dm.datasets[s]) for s in ("train", "valid", "test")] == [8, 2, 2]
    assert dm.classes == [("23521", 1), ("23521", 3), ("59684", 2)] and dm.num_classes == 4
    assert dm.input_dim == 16
    test = dm.datasets["test"]
    assert test.names == ["t0", "t1"]
    # t0: step 1 over seconds [2, 4.5) -> frames 2..4, step 3 over [6, 9) -> frames 6..8; background 0
    assert test[0]["labels"].tolist() == [0, 0, 1, 1, 1, 0, 2, 2, 2, 0, 0, 0]
    assert test[1]["labels"].tolist() == [0, 3, 3] + [0] * 9  # step 2 over [0.5, 3): frames 1, 2
    every = dm.datasets["train"].names + dm.datasets["valid"].names
    assert sorted(every) == sorted([f"v{i}" for i in range(8)] + ["w0", "w1"])
    unlabelled = dm.datasets["train"].names.index("w1") if "w1" in dm.datasets["train"].names else None
    if unlabelled is not None:
        assert dm.datasets["train"][unlabelled]["labels"] is None
    only = CrossTaskDataModule(**files, tasks=["59684"], valid_fraction=0.5)
    only.setup()
    assert only.datasets["test"].names == ["t1"] and only.num_classes == 2


def test_crosstask_errors(tmp_path):
    files = write_crosstask(tmp_path)
    (tmp_path / "annotations" / "23521_v0.csv").write_text("1,5,2\n")
    with pytest.raises(ValueError, match="0 <= start < end"):
        CrossTaskDataModule(**files).setup()
    (tmp_path / "annotations" / "23521_v0.csv").write_text("1,2.0,4.5\n")
    (tmp_path / "bad.csv").write_text("step,start,end\n")
    with pytest.raises(ValueError, match="expected step,start,end"):
        read_step_annotations(tmp_path / "bad.csv")
    with pytest.raises(FileNotFoundError, match="no video list"):
        CrossTaskDataModule(**{**files, "test_videos": str(tmp_path / "none.csv")}).setup()
    with pytest.raises(FileNotFoundError, match="features_dir"):
        CrossTaskDataModule(**{**files, "features_dir": str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match="has features"):
        CrossTaskDataModule(**files, tasks=["00000"]).setup()
    (tmp_path / "videos_val.csv").write_bytes("23521,t0,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"videos_val.csv is not UTF-8 text: line 1"):
        CrossTaskDataModule(**files).setup()


def test_crosstask_video_lists_with_a_byte_order_mark(tmp_path):
    """A video list saved by Excel begins with a byte-order mark: its first video keeps its task, so its
    annotation is found (the task read as '\ufeff23521', and the video silently had no labels)."""
    files = write_crosstask(tmp_path)
    plain = CrossTaskDataModule(**files)
    plain.setup("test")
    for name in ("train_videos", "test_videos"):
        path = Path(files[name])
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    marked = CrossTaskDataModule(**files)
    marked.setup("test")
    test, reference = marked.datasets["test"], plain.datasets["test"]
    assert test.names == reference.names and test[0]["labels"] is not None
    assert [test[i]["labels"].tolist() for i in range(len(test))] == [
        reference[i]["labels"].tolist() for i in range(len(reference))
    ]


def test_crosstask_warns_of_overlapping_steps_and_steps_past_the_end(tmp_path, caplog):
    """A frame in two steps takes the later line's step, a step past the video's 12 frames is cut there
    (wholly past: no frame): each said once per split, naming the file and line (audit)."""
    files = write_crosstask(tmp_path)
    annotations = tmp_path / "annotations"
    (annotations / "23521_t0.csv").write_text("1,2.0,6\n3,4,9.0\n")
    (annotations / "59684_t1.csv").write_text("2,10,15\n2,20,30\n")
    dm = CrossTaskDataModule(**files, valid_fraction=0.2)
    with caplog.at_level("WARNING"):
        dm.setup()
    assert dm.datasets["test"][0]["labels"].tolist() == [0, 0, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0]
    assert dm.datasets["test"][1]["labels"].tolist() == [0] * 10 + [3, 3]
    test = [r.getMessage() for r in caplog.records if r.getMessage().startswith("CrossTask test split")]
    assert test == [
        "CrossTask test split: 1 annotated step(s) overlap an earlier step of their video and take the "
        f"frames they share (the later line wins): {annotations / '23521_t0.csv'}, line 2 (frames 4..5)",
        "CrossTask test split: 2 annotated step(s) end past their video's last frame, which cuts them (a "
        f"wrong frames_per_second or feature file?): {annotations / '59684_t1.csv'}, line 1 (ends at 15 s, "
        f"cut at the features' 12 s), {annotations / '59684_t1.csv'}, line 2 (from 20 s, wholly past the "
        "features' 12 s)",
    ]
    assert not any(r.getMessage().startswith("CrossTask train split") for r in caplog.records)


def test_crosstask_leaves_the_test_videos_out_of_training(tmp_path, caplog):
    """CrossTask's videos.csv lists every video, videos_val.csv's too; its own training code leaves the
    latter out (Zhukov et al.'s train.py). Given the two files as the docs say, the test videos were
    trained on. Duplicated lines put a video in training and validation both."""
    files = write_crosstask(tmp_path)
    listed = Path(files["train_videos"]).read_text()
    Path(files["train_videos"]).write_text(listed + "23521,t0,url\n59684,t1,url\n23521,v3,url\n" * 2)
    dm = CrossTaskDataModule(**files, valid_fraction=0.2)
    with caplog.at_level("WARNING"):
        dm.setup()
    fitted = dm.datasets["train"].names + dm.datasets["valid"].names
    assert sorted(fitted) == sorted([f"v{i}" for i in range(8)] + ["w0", "w1"])  # each once, no test video
    assert dm.datasets["test"].names == ["t0", "t1"]
    said = caplog.text
    again = "line 14 (v3, first at line 4), line 15 (t0, first at line 12), line 16 (t1, first at line 13)"
    assert f"4 video(s) listed again, read once: {again} and 1 more" in said
    assert "2 of 12 training videos are also test videos, left out of training and validation" in said
    Path(files["train_videos"]).write_text("23521,t0,url\n")
    with pytest.raises(ValueError, match="every training video is also a test video"):
        CrossTaskDataModule(**files).setup()


def test_crosstask_steps_shorter_than_a_frame_are_said(tmp_path, caplog):
    """A step between two frame times (1.2 to 1.8 s at one frame a second) labels no frame: said."""
    files = write_crosstask(tmp_path)
    (tmp_path / "annotations" / "23521_t0.csv").write_text("1,2.0,4.5\n3,6.2,6.8\n")
    dm = CrossTaskDataModule(**files, valid_fraction=0.2)
    with caplog.at_level("WARNING"):
        dm.setup()
    assert dm.datasets["test"][0]["labels"].tolist() == [0, 0, 1, 1, 1] + [0] * 7
    line = tmp_path / "annotations" / "23521_t0.csv"
    assert (
        "CrossTask test split: 1 annotated step(s) hold no frame's time (shorter than a frame), so they "
        f"label no frame: {line}, line 2 (6.2 to 6.8 s)" in caplog.text
    )


def test_npy_folder_says_what_it_does_not_read(tmp_path):
    """NAME.NPY and arrays in a sub-folder were skipped without a word; a labels file whose features
    are misnamed was ignored, so that sequence silently had no labels; a labels-length error named the
    sequence, which each split may hold, not its file."""
    root = write_npy_folder(tmp_path)
    train = root / "train"
    np.save(train / "upper.npy", np.zeros((4, 3), dtype=np.float32))
    (train / "upper.npy").rename(train / "UPPER.NPY")
    (train / "more").mkdir()
    np.save(train / "more" / "x.npy", np.zeros((4, 3), dtype=np.float32))
    unread = (
        r"train: not read \(one NAME.npy a sequence, lower-case, in the folder itself\): UPPER.NPY, more/$"
    )
    with pytest.warns(UserWarning, match=unread):
        NpyFolderDataModule(str(root)).setup()
    (train / "UPPER.NPY").unlink()
    (train / "more" / "x.npy").unlink()
    (train / "more").rmdir()
    np.save(train / "orphan.labels.npy", np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match=r"train: labels without their features \(NAME.labels.npy needs "
                       r"NAME.npy\): orphan.labels.npy"):  # fmt: skip
        NpyFolderDataModule(str(root)).setup()
    (train / "orphan.labels.npy").unlink()
    np.save(root / "test" / "seq0.labels.npy", np.zeros(5, dtype=np.int64))
    named = re.escape(f"{root / 'test' / 'seq0.labels.npy'}: expected one integer")  # not the features file
    with pytest.raises(ValueError, match=named):
        NpyFolderDataModule(str(root)).setup()


def test_float64_features_beyond_float32_say_why_they_are_inf(tmp_path):
    """A float64 value of 1e39 becomes inf in float32: the message said only "NaN or inf" (audit)."""
    root = write_npy_folder(tmp_path, labelled=False)
    rows = np.zeros((6, 3))
    rows[4, 0] = 1e39
    np.save(root / "train" / "seq0.npy", rows)
    dm = NpyFolderDataModule(str(root), batch_size=8)
    dm.setup()
    with pytest.raises(ValueError, match=r"NaN or inf in 1 frame\(s\) \(first at frame 4\).*float32.*3.4e38"):
        dm.datasets["train"].features(0)


def test_audit_y_feature_files_and_rows(tmp_path):
    """A labels file of the wrong length is named (the features file was); complex features are refused
    (their imaginary part was dropped); a standardized dimension of small spread is scaled (std 3e-9 was
    taken for constant); a null labels cell of a Smartwatch hf_dataset row is an unlabelled recording (a
    TypeError before) (audit Y)."""
    root = write_npy_folder(tmp_path / "npy")
    labels = root / "train" / "seq0.labels.npy"
    np.save(labels, np.zeros(5, dtype=np.int64))  # seq0 has 6 frames
    message = re.escape(f"{labels}: expected one integer label >= -1 per frame (6)")
    with pytest.raises(ValueError, match=message):
        NpyFolderDataModule(str(root)).setup()
    complex_root = write_npy_folder(tmp_path / "complex", labelled=False)
    np.save(complex_root / "valid" / "seq0.npy", np.ones((6, 3), dtype=np.complex64))
    with pytest.raises(ValueError, match="expected a numeric frames x dims array, got shape .*complex64"):
        NpyFolderDataModule(str(complex_root)).setup()
    rng = np.random.default_rng(0)
    frames = np.stack([rng.normal(0, 1, 1000), rng.normal(5e-9, 3e-9, 1000), np.full(1000, 7.0)], 1)
    mean, matrix = fit_feature_transform(frames, 3)
    y = (torch.tensor(frames) - mean.double()) @ matrix.double()
    spread = y.std(0, unbiased=False)[:2]
    torch.testing.assert_close(spread, torch.ones(2, dtype=torch.float64), rtol=1e-3, atol=0)
    assert matrix[2, 2] == 1.0  # the constant one keeps scale 1
    import json

    rows, splits = tmp_path / "hf", ("train", "validation", "test")
    rows.mkdir()
    for split in splits:
        with open(rows / f"{split}.jsonl", "w") as out:
            for i in range(3):
                own = [int(v) for v in np.repeat(rng.integers(0, 3, 3), 100)]
                row = {"features": rng.normal(size=(300, 6)).round(3).tolist(),
                       "labels": None if split == "test" and i == 1 else own}  # fmt: skip
                out.write(json.dumps(row) + "\n")
    files = {s: str(rows / f"{s}.jsonl") for s in splits}
    dm = SmartwatchDataModule(window=25, hf_dataset={"path": "json", "data_files": files, "labels": "labels"})
    dm.setup()
    shapes = [None if lab is None else tuple(lab.shape) for lab in dm.datasets["test"].labels]
    assert shapes == [(12,), None, (12,)]
