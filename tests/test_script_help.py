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
