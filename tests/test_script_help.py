"""Every command-line script answers ``--help`` and changes nothing it would write (docs, pictures, cards,
weights): help is never a run (issue 18, ``plot_results.py --help`` used to redraw the docs' pictures)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WRITTEN = ("docs", "cards", "zoo/weights", "README.md")  # what scripts write when they run
SCRIPTS = sorted(
    p
    for p in (REPO / "scripts").glob("*.py")
    if "ArgumentParser" in (text := p.read_text()) and '__name__ == "__main__"' in text
)


def snapshot() -> dict[str, tuple[int, int]]:
    files = []
    for name in WRITTEN:
        path = REPO / name
        files += [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in files}


def help_of(script: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_script_answers_help_without_writing_anything():
    assert len(SCRIPTS) >= 10
    before = snapshot()
    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(SCRIPTS, pool.map(help_of, SCRIPTS)))
    failed = {
        s.name: r.stderr[-500:] for s, r in done.items() if r.returncode != 0 or "usage:" not in r.stdout
    }
    assert not failed
    assert snapshot() == before


def test_the_shell_scripts_answer_help_and_run_nothing(tmp_path):
    """gpu_tests.sh --help started the four GPU suites (writing gpu-test-logs/), gpu_train_link.sh --help
    failed on an unbound $2 (audit). Each prints its header comment; without its arguments, the link
    script says how to call it (exit 2)."""
    for script in sorted((REPO / "scripts").glob("*.sh")):
        done = subprocess.run(["bash", str(script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0 and "scripts/" in done.stdout, (script.name, done.stdout, done.stderr)
        assert not list(tmp_path.iterdir()), f"{script.name} --help wrote {list(tmp_path.iterdir())}"
    bare = subprocess.run(["bash", str(REPO / "scripts/gpu_train_link.sh")], capture_output=True, text=True)
    assert bare.returncode == 2 and "Usage" in bare.stderr
