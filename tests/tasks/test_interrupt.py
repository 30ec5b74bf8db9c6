"""SIGTERM during one long batch stops the run at once (inside the dynamic program), not at its end."""

import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, time, torch
    import lightning.pytorch as pl
    from zoo.inference import DenseChain, DenseGrammar, LinearChain, TreeDistribution
    from zoo.tasks.interrupt import InterruptDynamicPrograms

    def long_dynamic_program():  # 20 s or more of steps
        if sys.argv[2] == "chain":
            return LinearChain(DenseChain(torch.randn(1, 5_000_000, 3), torch.zeros(3, 3))).log_partition
        grammar = DenseGrammar(torch.zeros(1, 10), torch.randn(1, 10, 30, 30))  # the inside pass, T = 800
        return TreeDistribution(grammar, torch.randn(1, 800, 20)).log_partition

    class LongDynamicProgram(pl.LightningModule):
        def configure_callbacks(self):
            return [InterruptDynamicPrograms()] if sys.argv[1] == "on" else []

        def validation_step(self, batch, batch_idx):
            print("started", flush=True)
            started = time.perf_counter()
            with torch.no_grad():
                long_dynamic_program()
            print(f"finished after {time.perf_counter() - started:.1f} s", flush=True)

    data = torch.utils.data.DataLoader([0], batch_size=1)
    pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).validate(
        LongDynamicProgram(), data, verbose=False
    )
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("structure", ["chain", "tree"])
def test_sigterm_stops_a_long_dynamic_program(tmp_path, structure):
    script = tmp_path / "long_dynamic_program.py"
    script.write_text(SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), "on", structure],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "started"
    time.sleep(1.0)
    sent = time.perf_counter()
    process.terminate()
    stdout, stderr = process.communicate(timeout=120)
    waited = time.perf_counter() - sent
    assert waited < 5, f"the DP ran on for {waited:.1f} s after SIGTERM"
    assert "finished" not in stdout
    assert process.returncode == 143, stderr  # 128 + SIGTERM, as if killed by it


def test_every_zoo_task_attaches_it_once(tmp_path, caplog):
    """Fit then test on one trainer: one callback, and no notice that the second replaces the first."""
    import lightning.pytorch as pl

    from zoo.data import PTBDataModule
    from zoo.models import CategoricalHMM
    from zoo.tasks import LikelihoodTask
    from zoo.tasks.interrupt import InterruptDynamicPrograms

    for split in ("train", "valid", "test"):
        (tmp_path / f"ptb.{split}.txt").write_text("the cat sat\na dog ran on the mat\n" * 4)
    data = PTBDataModule(data_dir=str(tmp_path), batch_size=4, batch_tokens=None)
    data.setup()
    model = CategoricalHMM(vocab_size=data.vocab_size, num_states=3, embedding_dim=4, hidden_dim=4)
    task = LikelihoodTask(model)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with caplog.at_level("INFO"):
        trainer.fit(task, data)
        trainer.test(task, data, verbose=False)
    assert sum(isinstance(c, InterruptDynamicPrograms) for c in trainer.callbacks) == 1
    assert not any("will override" in r.getMessage() for r in caplog.records)
