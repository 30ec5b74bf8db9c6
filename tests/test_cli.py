"""The ``zoo`` console command."""

import subprocess
import sys

from zoo.cli import main


def test_capabilities_prints_every_backend(capsys):
    assert main(["capabilities"]) == 0
    out = capsys.readouterr().out
    for name in ("exact", "low-rank", "rank-space", "randomized", "log_partition", "rsample"):
        assert name in out


def test_module_entry_point_runs():
    done = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "capabilities"], capture_output=True, text=True, check=True
    )
    assert "| `argmax` |" in done.stdout


def test_a_second_fit_into_a_run_folder_refuses_and_resuming_it_works(tmp_path, capsys):
    """Without a versioned logger a second ``zoo fit`` into the same root would replace the first run's
    config.yaml and checkpoints: it refuses in one line; resuming the run (--ckpt_path) and testing it
    there work, and the test keeps the run's config.yaml."""
    from pathlib import Path

    text = tmp_path / "text"
    text.mkdir()
    for split in ("train", "valid", "test"):
        (text / f"ptb.{split}.txt").write_text("the a cat dog sat ran\non under mat log big small\n")
    run = tmp_path / "run"
    recipe = Path(__file__).resolve().parents[1] / "recipes/hmm/ptb-exact-small.yaml"
    args = [
        "--config", str(recipe), "--data.init_args.data_dir", str(text),
        "--model.init_args.model.init_args.vocab_size", "14",
        "--model.init_args.model.init_args.num_states", "4",
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(run),
    ]  # fmt: skip

    def files():
        return {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}

    assert main(["fit", *args]) == 0
    saved = files()
    capsys.readouterr()
    assert main(["fit", *args]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"zoo: error: {run} holds a run (config.yaml") and "--ckpt_path" in error
    assert files() == saved
    (checkpoint,) = (run / "checkpoints").glob("*.ckpt")
    assert main(["fit", *args, "--ckpt_path", str(checkpoint), "--trainer.max_epochs", "2"]) == 0
    config = (run / "config.yaml").read_bytes()
    assert main(["test", *args, "--ckpt_path", str(checkpoint)]) == 0
    assert (run / "config.yaml").read_bytes() == config
