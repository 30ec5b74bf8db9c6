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
    from zoo.inference import DenseChain, LinearChain
    from zoo.tasks.interrupt import InterruptDynamicPrograms

    class LongChain(pl.LightningModule):
        def configure_callbacks(self):
            return [InterruptDynamicPrograms()] if sys.argv[1] == "on" else []

        def validation_step(self, batch, batch_idx):
            unary = torch.randn(1, 5_000_000, 3)  # 20 s or more of steps
            trans = torch.zeros(3, 3)
            print("started", flush=True)
            started = time.perf_counter()
            with torch.no_grad():
                LinearChain(DenseChain(unary, trans)).log_partition
            print(f"finished after {time.perf_counter() - started:.1f} s", flush=True)

    data = torch.utils.data.DataLoader([0], batch_size=1)
    pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False).validate(
        LongChain(), data, verbose=False
    )
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_stops_a_long_dynamic_program(tmp_path):
    script = tmp_path / "long_chain.py"
    script.write_text(SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), "on"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
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
