"""``scripts/device_tree.sh``: what a remote GPU machine (at most 64 MiB of the checkout) is sent, and
hiding the bundled weights from it without losing them. Run in a clone, never in this checkout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = str(REPO / "scripts" / "device_tree.sh")  # run on the clone it is called in


def run(*args: str, cwd: Path) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, timeout=120).stdout


def travelling_mib(clone: Path) -> float:
    return float(run("bash", SCRIPT, "size", cwd=clone).split()[0])


@pytest.fixture
def clone(tmp_path) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of the project")
    target = tmp_path / "clone"
    run("git", "clone", "-q", str(REPO), str(target), cwd=tmp_path)
    return target


def test_hide_leaves_the_weights_behind_and_restore_tracks_them_again(clone):
    weights = sorted(p.relative_to(clone) for p in (clone / "zoo" / "weights").rglob("*") if p.is_file())
    before = travelling_mib(clone)
    assert weights and before > 64  # why the script exists: the bundled weights are over the limit

    run("bash", SCRIPT, "hide", cwd=clone)
    assert travelling_mib(clone) < 16
    assert all((clone / p).is_file() for p in weights)  # on disk, only out of the index
    tracked = run("git", "ls-files", "zoo/weights", cwd=clone)
    assert tracked == ""

    run("bash", SCRIPT, "restore", cwd=clone)
    assert run("git", "status", "--porcelain", cwd=clone) == ""  # as HEAD has them, nothing staged
    assert travelling_mib(clone) == pytest.approx(before, abs=0.05)
    assert "/zoo/weights/" not in (clone / ".git" / "info" / "exclude").read_text()
