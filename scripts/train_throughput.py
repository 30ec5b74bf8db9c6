"""Training throughput of each family's small recipe through ``zoo fit``: tokens (frames) a second and
the training loss, per precision, on a GPU or on the CPU.

Each (recipe, precision) runs ``zoo fit --config RECIPE`` in its own process for ``--steps`` training
steps (no validation, no logger; a recipe's checkpoints go to a temporary folder), with a callback
that counts the tokens of the steps after a warm-up (``zoo.tasks.TrainingThroughput``, synchronizing
the GPU at each step's end) and records the first and last training losses.

Usage (repository root):
    python scripts/train_throughput.py --accelerator gpu --precision 32-true bf16-mixed --steps 200
    python scripts/train_throughput.py --accelerator cpu --precision 32-true --steps 20
    ... --write   # also write its block of docs/benchmarks.md (one per accelerator)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo.tasks.throughput import TrainingThroughput  # noqa: E402

from benchlib import num, paragraphs, table  # noqa: E402
from report import write_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECIPES = {  # family: recipe, share of --steps (an HSMM step is a whole recording of ~600 frames)
    "HMM (PTB, N = 512, exact)": ("recipes/hmm/ptb-exact-small.yaml", 1.0),
    "HMM (PTB, N = 4096, rank-space)": ("recipes/hmm/ptb-rank-space-small.yaml", 1.0),
    "HSMM (smartwatch, N = 16, exact)": ("recipes/hsmm/smartwatch-exact-small.yaml", 0.2),
    "PCFG (PTB, exact)": ("recipes/pcfg/ptb-exact-small.yaml", 1.0),
    "VAE (PTB short, exact)": ("recipes/vae/ptb-short-exact-small.yaml", 1.0),
}
REPORT_ENV = "ZOO_THROUGHPUT_REPORT"


class ReportThroughput(TrainingThroughput):
    """``TrainingThroughput`` that waits for the GPU at each step's end, and writes tokens/s and the first
    and last training losses to the JSON file named by ``$ZOO_THROUGHPUT_REPORT`` when training ends."""

    def __init__(self, skip: int = 5):
        super().__init__(skip)
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            self.losses.append(float(loss))

    def on_train_end(self, trainer: pl.Trainer, module):
        report = {
            "tokens_per_second": self.tokens_per_second,
            "sentences_per_second": self.sentences_per_second,
            "steps": trainer.global_step,
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.losses[-1] if self.losses else None,
        }
        Path(os.environ[REPORT_ENV]).write_text(json.dumps(report))


def fit(recipe: str, accelerator: str, precision: str, steps: int, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable, "-m", "zoo.cli", "fit", "--config", recipe,
            "--trainer.accelerator", accelerator, "--trainer.devices", "1", "--trainer.precision", precision,
            "--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1",
            "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0",
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.callbacks+=train_throughput.ReportThroughput", "--trainer.default_root_dir", tmp,
        ]  # fmt: skip
        env = {**os.environ, REPORT_ENV: str(report)}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "scripts"), str(REPO), env.get("PYTHONPATH", "")])
        start = time.perf_counter()
        try:
            run = dict(cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
            done = subprocess.run(command, **run)
        except subprocess.TimeoutExpired:
            return {"status": f"timeout ({timeout_s:.0f} s)"}
        seconds = time.perf_counter() - start
        if done.returncode != 0 or not report.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"status": f"exit {done.returncode}: {' / '.join(tail)[:300]}"}
        return {"status": "ok", "wall_s": seconds, **json.loads(report.read_text())}


def row(name: str, precision: str, r: dict) -> list[str]:
    if r["status"] != "ok":
        return [name, precision, r["status"], "—", "—", "—"]
    losses = "—" if r["first_loss"] is None else f"{r['first_loss']:.3g} → {r['last_loss']:.3g}"
    return [name, precision, num(r["tokens_per_second"]), str(r["steps"]), losses, num(r["wall_s"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accelerator", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--precision", nargs="+", default=["32-true", "bf16-mixed"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per fit")
    parser.add_argument("--families", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument("--out", type=Path, help="also write the table and the raw results (.json) here")
    parser.add_argument("--write", action="store_true", help="also write its block of docs/benchmarks.md")
    args = parser.parse_args()
    results = {}
    for name in args.families:
        for precision in args.precision:
            recipe, share = RECIPES[name]
            result = fit(recipe, args.accelerator, precision, max(1, round(share * args.steps)), args.timeout)
            results[f"{name} | {precision}"] = result
            print(f"  {name} {precision}: {result}", file=sys.stderr, flush=True)
    device = torch.cuda.get_device_name(0) if args.accelerator == "gpu" else f"CPU ({os.cpu_count()} cores)"
    text = paragraphs(
        f"### Training throughput: `zoo fit` on {device}, up to {args.steps} steps a run, "
        f"torch {torch.__version__} (HSMM: frames/s)",
        table(
            ["family (recipe)", "precision", "tokens/s", "steps", "train loss first → last", "wall (s)"],
            [row(key.split(" | ")[0], key.split(" | ")[1], r) for key, r in results.items()],
        ),
    )
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        write_section(REPO / "docs" / "benchmarks.md", f"train_throughput_{args.accelerator}", text)


if __name__ == "__main__":
    main()
