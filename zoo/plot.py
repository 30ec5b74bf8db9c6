"""Learning curves of a ``zoo fit`` run: the metrics Lightning's CSVLogger wrote (``metrics.csv``),
drawn against training steps, training tokens and training hours into one PNG (``zoo plot RUN_DIR``).

Rows: the training loss, then each validation metric (``val/*``, standard deviations left out);
columns: the x axes. Tokens and hours are what the task logs as ``train/tokens`` and
``train/seconds`` (``LikelihoodTask.on_train_batch_end``); a validation point takes them from the
last training row at or before its step.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

AXES = (("step", "step"), ("train/tokens", "training tokens"), ("train/seconds", "training hours"))


def find_metrics(run_dir: str | os.PathLike) -> Path:
    """The newest ``metrics.csv`` under ``run_dir`` (a run's folder, its lightning_logs, one version)."""
    run_dir = Path(run_dir)
    if run_dir.is_file() and run_dir.name == "metrics.csv":
        return run_dir
    found = sorted(run_dir.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime) if run_dir.is_dir() else []
    if not found:
        raise FileNotFoundError(
            f"no metrics.csv under {run_dir}: zoo plot reads the CSV logs of a zoo fit run (the recipes' "
            "default logger, or --trainer.logger lightning.pytorch.loggers.CSVLogger)"
        )
    return found[-1]


def read_curves(path: Path) -> dict[str, list[tuple[float, float, float, float]]]:
    """Each metric's points as (step, tokens, seconds, value), in step order."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    curves: dict[str, list] = {}
    position = (0.0, math.nan, math.nan)  # the last training row's step, tokens, seconds
    for row in sorted(rows, key=lambda r: float(r.get("step") or 0)):
        step = float(row.get("step") or 0)
        if row.get("train/tokens"):
            position = (step, float(row["train/tokens"]), float(row.get("train/seconds") or math.nan))
        for name, value in row.items():
            wanted = name == "train/loss" or (name.startswith("val/") and not name.endswith("_std"))
            if wanted and value:
                curves.setdefault(name, []).append((step, position[1], position[2], float(value)))
    if not curves:
        raise ValueError(f"{path} holds no train/loss or val/* values yet")
    return curves


def plot_learning_curves(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Draw the run's curves to ``out`` (default: ``learning_curves.png`` beside its metrics.csv)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    path = find_metrics(run_dir)
    curves = read_curves(path)
    names = sorted(curves, key=lambda n: (n != "train/loss", n))
    fig, grid = plt.subplots(len(names), len(AXES), figsize=(4 * len(AXES), 2.6 * len(names)), squeeze=False)
    for row, name in enumerate(names):
        points = curves[name]
        for col, (_, label) in enumerate(AXES):
            xs = [p[col] / (3600 if col == 2 else 1) for p in points]
            ax = grid[row][col]
            ax.plot(xs, [p[3] for p in points], marker="o" if len(points) < 30 else None, markersize=3)
            ax.set_xlabel(label)
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
    fig.suptitle("/".join(path.parent.parts[-2:]))  # the run's version folder, not a machine path
    fig.tight_layout()
    out = Path(out) if out is not None else path.parent / "learning_curves.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
