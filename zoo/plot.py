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

from zoo.extras import pyplot

AXES = (("step", "step"), ("train/tokens", "training tokens"), ("train/seconds", "training hours"))


def find_metrics(run_dir: str | os.PathLike) -> list[Path]:
    """The ``metrics.csv`` files of the newest training run under ``run_dir`` (a run's folder, its
    lightning_logs, one version), oldest first: the newest one with training rows (a ``zoo validate``
    or ``test`` into the same folder writes one without), after those of the runs it resumed (the
    version folder of its config.yaml's ``ckpt_path``, and so on back)."""
    run_dir = Path(run_dir)
    if run_dir.is_file() and run_dir.name == "metrics.csv":
        return [run_dir]
    found = sorted(run_dir.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime) if run_dir.is_dir() else []
    if not found:
        raise FileNotFoundError(
            f"no metrics.csv under {run_dir}: zoo plot reads the CSV logs of a zoo fit run (the recipes' "
            "default logger, or --trainer.logger lightning.pytorch.loggers.CSVLogger)"
        )
    trained = [path for path in found if _training_steps(path)]
    run = [trained[-1] if trained else found[-1]]  # none: read_curves says it holds no training values
    while (earlier := _resumed_from(run[0])) is not None and earlier not in run and _training_steps(earlier):
        run.insert(0, earlier)
    return run


def _resumed_from(path: Path) -> Path | None:
    """The metrics.csv of the run whose checkpoint the run of ``path`` resumed (``--ckpt_path`` in the
    config.yaml beside it: a checkpoint under that run's version folder), if any."""
    import yaml

    config = path.parent / "config.yaml"
    ckpt_path = (yaml.safe_load(config.read_text()) or {}).get("ckpt_path") if config.is_file() else None
    if not ckpt_path:
        return None
    return next((d / "metrics.csv" for d in Path(ckpt_path).parents if (d / "metrics.csv").is_file()), None)


def _training_steps(path: Path) -> list[float]:
    """The steps of a metrics.csv's training rows (``train/loss``), in order."""
    with open(path, newline="") as f:
        return sorted(float(r.get("step") or 0) for r in csv.DictReader(f) if r.get("train/loss"))


def progress_at(anchors: list[tuple[float, float, float]], step: float) -> tuple[float, float]:
    """(tokens, seconds) trained by ``step``, linear between the training rows' ``anchors`` (step,
    tokens, seconds; from (0, 0, 0)), past the last one at the last interval's rate."""
    if not anchors:
        return math.nan, math.nan
    points = [(0.0, 0.0, 0.0), *anchors]
    k = next((k for k in range(1, len(points)) if step <= points[k][0]), len(points) - 1)
    (s0, *at0), (s1, *at1) = points[k - 1], points[k]
    w = (step - s0) / (s1 - s0) if s1 > s0 else 1.0
    return tuple(a + w * (b - a) for a, b in zip(at0, at1))


def read_curves(paths: list[Path]) -> dict[str, list[tuple[float, float, float, float]]]:
    """Each metric's points as (step, tokens, seconds, value), in step order, over a run's metrics.csv
    files (``find_metrics``: each cut at the next one's first training step); tokens and seconds of a
    point between two training rows (logged every few steps) are interpolated (``progress_at``)."""
    rows: list[dict] = []
    for k, path in enumerate(paths):
        with open(path, newline="") as f:
            piece = list(csv.DictReader(f))
        if k + 1 < len(paths):
            resumed_at = _training_steps(paths[k + 1])[0]
            piece = [r for r in piece if float(r.get("step") or 0) < resumed_at]
        rows += piece
    rows.sort(key=lambda r: float(r.get("step") or 0))
    anchors = [
        (float(r.get("step") or 0), float(r["train/tokens"]), float(r.get("train/seconds") or math.nan))
        for r in rows
        if r.get("train/tokens")
    ]
    curves: dict[str, list] = {}
    for row in rows:
        step = float(row.get("step") or 0)
        for name, value in row.items():
            wanted = name == "train/loss" or (name.startswith("val/") and not name.endswith("_std"))
            if wanted and value:
                curves.setdefault(name, []).append((step, *progress_at(anchors, step), float(value)))
    if not curves:
        raise ValueError(f"{paths[-1]} holds no train/loss or val/* values yet")
    return curves


def plot_learning_curves(
    run_dir: str | os.PathLike, out: str | os.PathLike | None = None, title: str | None = None
) -> Path:
    """Draw the run's curves (``find_metrics``: a resumed run's versions joined) to ``out`` (default:
    ``learning_curves.png`` beside its newest metrics.csv), under ``title`` (default: that version
    folder, e.g. ``lightning_logs/version_0``)."""
    plt = pyplot("drawing learning curves")
    paths = find_metrics(run_dir)
    curves = read_curves(paths)
    path = paths[-1]
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
    fig.suptitle(title or "/".join(path.parent.parts[-2:]))  # not a machine path
    fig.tight_layout()
    out = Path(out) if out is not None else path.parent / "learning_curves.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
