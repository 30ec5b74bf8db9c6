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
