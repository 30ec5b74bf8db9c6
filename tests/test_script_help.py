"""Every command-line script answers ``--help`` and changes nothing it would write (docs, pictures, cards,
weights): help is never a run (issue 18, ``plot_results.py --help`` used to redraw the docs' pictures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


# every script's --help in one process: each alone re-imported torch, Lightning and transformers (51 s)
HELP_RUNNER = """
import contextlib, io, json, os, runpy, sys
results_path, scripts, results = sys.argv[1], sys.argv[2:], {}
for path in scripts:
    out, err, code = io.StringIO(), io.StringIO(), None
    sys.argv, sys.path = [path, "--help"], [os.path.dirname(path), *sys.path]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            code = stop.code
        except BaseException as error:
            err.write(repr(error))
            code = 1
    sys.path.pop(0)
    results[path] = [code, out.getvalue(), err.getvalue()]
with open(results_path, "w") as f:
    json.dump(results, f)
"""


def helps_of(scripts: list[Path], results: Path) -> dict[str, list]:
    """{script: [exit code, stdout, stderr]} of ``script --help``, each run as ``__main__``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", HELP_RUNNER, str(results), *map(str, scripts)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(results.read_text())


def test_every_script_answers_help_without_writing_anything(tmp_path):
    assert len(SCRIPTS) >= 10
    before = snapshot()
    done = helps_of(SCRIPTS, tmp_path / "helps.json")
    assert sorted(done) == sorted(map(str, SCRIPTS))
    failed = {Path(s).name: e[-500:] for s, (rc, out, e) in done.items() if rc != 0 or "usage:" not in out}
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
