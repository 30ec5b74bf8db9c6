"""The ``zoo`` console command."""

import subprocess
import sys
from pathlib import Path

import lightning.pytorch  # noqa: F401  (here: its log handler writes to the session's stderr, not a test's)

from zoo.cli import main

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


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


def error_lines(err: str) -> list[str]:
    """The lines of ``err`` but Lightning's notices of the seed and of fast_dev_run."""
    notices = ("Seed", "Running")
    return [x for x in err.splitlines() if x.strip() and x.removeprefix("INFO: ").split()[0] not in notices]


def test_data_that_are_not_there_are_one_line_naming_their_option(tmp_path, capsys, monkeypatch):
    """They were 50-136-line tracebacks, the message inside jsonargparse's dump of the config, naming
    no option (audit)."""
    monkeypatch.chdir(tmp_path)  # the recipes' relative data paths name nothing here
    encoder = "--model.init_args.model.init_args.pretrained_encoder"
    for recipe, extra, option in (
        ("hmm/jsb-low-rank.yaml", [], "--data.init_args.dataset"),  # in the data module's constructor
        ("hsmm/crosstask-exact-64.yaml", [], "--data.init_args.features_dir"),
        ("pcfg/wsj-exact-30-60.yaml", [], "--data.init_args.tree_files.train"),  # in its setup
        ("vae/mscoco-full-100.yaml", [encoder, str(tmp_path / "gpt2")], encoder),  # GPT-2 weights
    ):
        assert main(["fit", "--config", str(RECIPES / recipe), *extra, "--trainer.fast_dev_run", "1"]) == 2
        (line,) = error_lines(capsys.readouterr().err)
        assert line.startswith("zoo: error: ") and line.endswith(f"(give it with {option})"), line


def test_data_files_that_do_not_read_are_one_line_naming_file_and_line(tmp_path, capsys):
    """A text file that is not UTF-8 and a malformed tree file were 42- and 86-line tracebacks, the
    message (file, line, the fix) at their end (audit)."""
    text, trees = tmp_path / "text", tmp_path / "trees"
    text.mkdir()
    trees.mkdir()
    for split in ("train", "valid", "test"):
        (text / f"ptb.{split}.txt").write_bytes("the cat\nle caf\xe9\n".encode("latin-1"))
        (trees / f"{split}.mrg").write_text("(S (NP (DT the) (NN cat)) (VP (VBD sat)))\n(S (NP the cat)\n")
    for recipe, options, message in (
        ("hmm/ptb-exact-small.yaml", ["--data.init_args.data_dir", str(text)],
         f"{text / 'ptb.train.txt'} is not UTF-8 text: line 2"),
        ("pcfg/ptb-exact-small.yaml", ["--data.init_args.tree_files", "{"
         + ", ".join(f'"{s}": "{trees / (s + ".mrg")}"' for s in ("train", "valid", "test")) + "}"],
         f"{trees / 'train.mrg'}, line 2"),
    ):  # fmt: skip
        assert main(["fit", "--config", str(RECIPES / recipe), *options, "--trainer.fast_dev_run", "1"]) == 2
        (line,) = error_lines(capsys.readouterr().err)
        assert line.startswith("zoo: error: ") and message in line, line


def test_python_dash_m_zoo_is_the_zoo_command():
    done = subprocess.run(
        [sys.executable, "-m", "zoo", "capabilities"], capture_output=True, text=True, check=True
    )
    assert "| `argmax` |" in done.stdout


def test_a_checkpoint_that_is_not_there_is_one_line(tmp_path, capsys):
    """It was Lightning's 43-line traceback, after the data were read (audit)."""
    missing = tmp_path / "x.ckpt"
    recipe = str(RECIPES / "hmm/ptb-exact-small.yaml")
    for command in ("validate", "test"):
        assert main([command, "--config", recipe, "--ckpt_path", str(missing)]) == 2
        (line,) = error_lines(capsys.readouterr().err)
        assert line == f"zoo: error: no checkpoint file {missing} (--ckpt_path)"


def test_best_and_last_of_another_process_are_one_line(capsys):
    """`zoo test --ckpt_path last` in a process of its own found no checkpoint of a fit, warned, and
    tested the untrained model (audit); "best" was a traceback. Both name the file to give instead."""
    recipe = str(RECIPES / "hmm/ptb-exact-small.yaml")
    for command, name in (("validate", "best"), ("test", "last"), ("predict", "last"), ("fit", "best")):
        assert main([command, "--config", recipe, "--ckpt_path", name]) == 2
        (line,) = error_lines(capsys.readouterr().err)
        assert f"--ckpt_path {name} names a checkpoint of a fit run in the same process" in line, line
        assert f"checkpoints/{name}.ckpt" in line


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
